import pytest
from pyspark.sql import functions as F

from simjoin.io.rows import arrow_schema
from simjoin.spark import delta
from tests.helpers import commit_engines


def test_overwrite_partition_is_idempotent_and_time_travel(spark, tmp_table):
    p = tmp_table("parts")
    df = spark.range(10).withColumn("run_id", F.lit("r1"))
    delta.overwrite_partition(df, p, {"run_id": "r1"})
    delta.overwrite_partition(df, p, {"run_id": "r1"})  # retried task: same rows, not twice
    delta.overwrite_partition(spark.range(3).withColumn("run_id", F.lit("r2")), p, {"run_id": "r2"})
    t = delta.read_table(spark, p)
    assert t.count() == 13
    assert t.filter("run_id = 'r1'").count() == 10
    assert delta.read_table(spark, p, version=0).count() == 10
    assert delta.latest_version(spark, p) == 2
    ops = [r["operation"] for r in delta.history(spark, p).orderBy("version").collect()]
    assert ops == ["CREATE TABLE", "WRITE", "WRITE"]  # the tasks' files, committed by deltalake


def test_append_idempotent_skips_replayed_txn(spark, tmp_table):
    p = tmp_table("app")
    delta.append_idempotent(spark.range(5), p, "pipe/out", 0)
    delta.append_idempotent(spark.range(5), p, "pipe/out", 0)  # replay of batch 0
    delta.append_idempotent(spark.range(5, 8), p, "pipe/out", 1)
    assert delta.read_table(spark, p).count() == 8


def test_merge_upserts_state(spark, tmp_table):
    p = tmp_table("state")
    delta.merge(spark.createDataFrame([(1, "a"), (2, "b")], "k long, v string"), p, ["k"])
    delta.merge(spark.createDataFrame([(2, "B"), (3, "c")], "k long, v string"), p, ["k"])
    rows = sorted(tuple(r) for r in delta.read_table(spark, p).collect())
    assert rows == [(1, "a"), (2, "B"), (3, "c")]


def test_missing_table_and_bad_version(spark, tmp_table):
    with pytest.raises(FileNotFoundError, match="no Delta table"):
        delta.read_table(spark, tmp_table("nothing"))
    p = tmp_table("v")
    delta.overwrite(spark.range(2), p)
    with pytest.raises(ValueError, match="allowed >= 0"):
        delta.read_table(spark, p, version=-1)


def test_background_writes_complete_and_raise(spark, tmp_table):
    a, b = tmp_table("bg_a"), tmp_table("bg_b")
    with delta.background_writes():
        delta.overwrite_partition(spark.range(7).withColumn("run_id", F.lit("r")), a, {"run_id": "r"})
        delta.overwrite_partition(spark.range(3).withColumn("run_id", F.lit("r")), b, {"run_id": "r"})
    assert delta.read_table(spark, a).count() == 7 and delta.read_table(spark, b).count() == 3
    with pytest.raises(ValueError, match="partition columns"), delta.background_writes():
        delta.overwrite_partition(spark.range(3), b, {"run_id": "r"})  # checked before submitting
    bad = spark.range(3).withColumn("run_id", F.lit("r")).selectExpr("id", "run_id", "IF(id = 1, CAST(raise_error('boom') AS long), id) AS x")
    with pytest.raises(Exception, match="boom"), delta.background_writes():
        delta.overwrite_partition(bad, tmp_table("bg_c"), {"run_id": "r"})


def test_overwrite_rows_is_overwrite_partition_without_spark_jobs(spark, tmp_table, monkeypatch):
    """A run's bookkeeping rows replace one partition, as ``overwrite_partition`` does, whoever wrote
    the table before (Spark or deltalake); Spark reads every commit; merge_schema adds a column."""
    import datetime as dt

    from simjoin import faults

    p = tmp_table("rows")
    schema = "k int, v string, at timestamp, ls array<int>, ok boolean, run_id string"
    t0 = dt.datetime(2026, 1, 1, 12, 0, 0)
    from simjoin.io import delta_files

    monkeypatch.setattr(delta_files, "ENABLED", False)  # Spark writes the table first
    delta.overwrite_partition(spark.createDataFrame([(9, "old", t0, [1], True, "r0")], schema), p, {"run_id": "r0"})
    monkeypatch.setattr(delta_files, "ENABLED", True)
    delta.overwrite_rows(spark, [(1, "a", t0, [1, 2], True, "r1"), (2, None, None, [], False, "r1")], schema, p,
                         {"run_id": "r1"})
    delta.overwrite_rows(spark, [(3, "c", t0, None, None, "r1")], schema, p, {"run_id": "r1"})  # a retry: replaced
    got = sorted(tuple(r) for r in delta.read_table(spark, p).collect())
    assert got == [(3, "c", t0, None, None, "r1"), (9, "old", t0, [1], True, "r0")]
    assert commit_engines(p) == ["spark", "deltalake", "deltalake"]  # no silent fall back to Spark
    assert sorted((r["k"], r["run_id"]) for r in delta.small_rows(spark, p)) == [(3, "r1"), (9, "r0")]
    # a new column (a table of an older version): the old rows read it as null
    delta.overwrite_rows(spark, [(4, "d", t0, [7], True, "r2", 1.5)], schema + ", x double", p, {"run_id": "r2"},
                         merge_schema=True)
    assert sorted((r["k"], r["x"]) for r in delta.read_table(spark, p).collect()) == [(3, None), (4, 1.5), (9, None)]
    # a new table is created partitioned, and Spark's replaceWhere works on it
    q = tmp_table("rows_new")
    delta.overwrite_rows(spark, [(1, "a", t0, [1], True, "r1")], schema, q, {"run_id": "r1"})
    delta.overwrite_partition(spark.createDataFrame([(2, "b", t0, [2], True, "r2")], schema), q, {"run_id": "r2"})
    assert sorted(r["k"] for r in delta.read_table(spark, q).collect()) == [1, 2]
    assert delta.read_table(spark, q).inputFiles()[0].split("/")[-2] in ("run_id=r1", "run_id=r2")
    # a rows@N fault fails the write before its commit, as a Spark task would
    monkeypatch.setenv(faults.ENV, "t.s.rows@0")
    with faults.current_stage("t.s"), pytest.raises(faults.InjectedFault, match="rows@0"):
        delta.overwrite_rows(spark, [(5, "e", t0, [5], True, "r1")], schema, q, {"run_id": "r1"})
    monkeypatch.delenv(faults.ENV)
    assert sorted(r["k"] for r in delta.read_table(spark, q).collect()) == [1, 2]
    with pytest.raises(ValueError, match="no Arrow type"):
        arrow_schema("m map<string,int>")


def test_append_rows_shares_spark_txn_and_commit_metadata(spark, tmp_table, monkeypatch):
    """``append_rows`` appends once per (app id, version) with the same ``txn`` action as Spark's
    ``txnAppId``/``txnVersion``: each engine skips what the other committed. ``userMetadata`` is
    the commit's, as Spark writes it; an Arrow table is appended as is; faults count alike."""
    import datetime as dt
    import json

    from simjoin import faults
    from simjoin.io import delta_files

    monkeypatch.setattr(delta_files, "ENABLED", False)  # append_idempotent here is Spark's writer
    p = tmp_table("txn")
    schema = "unit long, side byte, max_ts timestamp, meta string"
    t0 = dt.datetime(2026, 1, 1, 0, 1, 2)
    delta.append_idempotent(spark.createDataFrame([(0, 0, t0, "a")], schema), p, "pipe/progress/x", 0)
    delta.append_rows(spark, [(0, 0, t0, "replay")], schema, p, "pipe/progress/x", 0)  # Spark committed it
    delta.append_rows(spark, [(1, 1, t0, "b")], schema, p, "pipe/progress/x", 1, metadata=json.dumps({"unit": 1}))
    delta.append_idempotent(spark.createDataFrame([(1, 1, t0, "replay")], schema), p, "pipe/progress/x", 1)
    delta.append_rows(spark, [(1, 0, t0, "other app")], schema, p, "pipe/stats/x", 1)
    got = sorted(tuple(r) for r in delta.read_table(spark, p).collect())
    assert got == [(0, 0, t0, "a"), (1, 0, t0, "other app"), (1, 1, t0, "b")]
    assert commit_engines(p) == ["spark", "deltalake", "deltalake"]  # no silent fall back to Spark
    hist = {r["version"]: r["userMetadata"] for r in delta.history(spark, p).collect()}
    assert json.loads(hist[1]) == {"unit": 1}
    # an Arrow table from Spark (a small work frame) into the Spark-created table, with a new column
    frame = spark.createDataFrame([(2, 1, t0, "c", 0.5)], schema + ", x double")
    delta.append_rows(spark, frame.toArrow(), "", p, "pipe/stats/x", 2, merge_schema=True)
    assert sorted((r["unit"], r["x"]) for r in delta.read_table(spark, p).collect())[-1] == (2, 0.5)
    assert commit_engines(p)[-1] == "deltalake"
    # a rows@N fault fails before the commit; a write@N fault after it
    monkeypatch.setenv(faults.ENV, "t.s.rows@0")
    with faults.current_stage("t.s"), pytest.raises(faults.InjectedFault, match="rows@0"):
        delta.append_rows(spark, [(3, 0, t0, "d")], schema, p, "pipe/progress/x", 3)
    monkeypatch.setenv(faults.ENV, "t.s.write@1")
    with faults.current_stage("t.s"), pytest.raises(faults.InjectedFault, match="write@1"):
        delta.append_rows(spark, [(3, 0, t0, "d")], schema, p, "pipe/progress/x", 3)
    monkeypatch.delenv(faults.ENV)
    delta.append_rows(spark, [(3, 0, t0, "d")], schema, p, "pipe/progress/x", 3)  # the retry: skipped
    assert sorted(r["unit"] for r in delta.read_table(spark, p).collect()) == [0, 1, 1, 2, 3]
    # a new table (an engine's first unit)
    q = tmp_table("txn_new")
    delta.append_rows(spark, [(0, 0, None, None)], schema, q, "a", 0)
    delta.append_idempotent(spark.createDataFrame([(0, 0, None, None)], schema), q, "a", 0)
    assert delta.read_table(spark, q).count() == 1


def test_delete_matches_spark_on_every_predicate_form_the_engines_use(spark, tmp_table):
    """``delta.delete`` rewrites a local table with deltalake; on each predicate form the stream
    pipelines use (integers at the boundary, IN, AND/OR, a string, a timestamp as an ISO string
    with its offset, down to the microsecond) it keeps exactly the rows Spark's DELETE keeps."""
    import datetime as dt

    t = dt.datetime(2026, 1, 1, 0, 1, 0)
    us = dt.timedelta(microseconds=1)
    rows = [(u, k, t + d, b) for u in range(4) for k, d, b in (("mutable", -us, 7), ("live", dt.timedelta(0), 8),
                                                                ("live", us, 9))]
    schema = "unit long, kind string, window_end timestamp, batch_id long"
    bound = dt.datetime(2026, 1, 1, 0, 1, 0, tzinfo=dt.UTC).isoformat()
    later = dt.datetime(2026, 1, 1, 0, 1, 0, 1, tzinfo=dt.UTC).isoformat()
    conds = ["unit <= 1", "unit < 2", "batch_id IN (7, 9) OR (kind = 'mutable' AND unit < 3)", "true",
             f"window_end <= '{bound}'", f"window_end <= '{later}'"]
    left = []
    for i, cond in enumerate(conds):
        p, q = tmp_table(f"del_rs_{i}"), tmp_table(f"del_spark_{i}")
        for path in (p, q):
            delta.overwrite(spark.createDataFrame(rows, schema), path)
        delta.delete(spark, p, cond)
        spark.sql(f"DELETE FROM delta.`{q}` WHERE {cond}").collect()
        kept = sorted(tuple(r) for r in delta.read_table(spark, p).collect())
        assert kept == sorted(tuple(r) for r in delta.read_table(spark, q).collect()), cond
        assert commit_engines(p)[-1] == "deltalake", cond  # no silent fall back to Spark
        left.append(len(kept))
    assert left == [6, 6, 4, 0, 4, 0]  # the timestamp bound is inclusive, to the microsecond


def test_read_small_is_the_spark_read_of_a_small_local_table(spark, tmp_table, monkeypatch):
    """A small state table read with deltalake is the same DataFrame - schema and rows - as Spark's
    read with the same unit filter; a table over the size guard is left to Spark (None)."""
    import datetime as dt

    p = tmp_table("small_state")
    schema = ("window_start timestamp, partition int, workset_id long, side byte, id long, "
              "vector array<double>, role byte, ok boolean, name string, unit long")
    t = dt.datetime(2026, 1, 1, 0, 1, 0, 250)
    rows = [(t, 1, 7, 0, 10, [0.5, -1.0], 2, True, "a", 0), (None, None, None, 1, 11, None, 0, None, None, 1),
            (t, 2, 8, 1, 12, [], 1, False, "c", 2)]
    delta.append_idempotent(spark.createDataFrame(rows[:2], schema), p, "s", 0)
    delta.append_idempotent(spark.createDataFrame(rows[2:], schema), p, "s", 1)
    small = delta.read_small(spark, p, [("unit", "<", 2)])
    want = delta.read_table(spark, p).where("unit < 2")
    assert small is not None and small.schema == want.schema
    assert sorted(map(tuple, small.collect()), key=str) == sorted(map(tuple, want.collect()), key=str)
    assert delta.read_small(spark, p, [("unit", "<", 0)]).count() == 0  # type: ignore[union-attr]
    monkeypatch.setattr(delta, "SMALL_TABLE_BYTES", 10)
    assert delta.read_small(spark, p) is None  # over the guard: Spark reads it
    assert delta.read_small(spark, tmp_table("missing")) is None
