"""Writes whose files the tasks write with pyarrow (``delta_files``): the same table, rows,
history and ``txn`` skips as Spark's Delta writer, and statistics no reader can skip wrongly."""

import datetime as dt
import glob
import json
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from simjoin.io import delta_files
from simjoin.spark import delta
from tests.helpers import commit_engines

ROWS = "id long, side tinyint, name string, d double, ts timestamp, v array<double>, run_id string"


def _frame(spark, lo, hi, run="r1"):
    base = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    rows = [(i, i % 2, None if i % 5 == 0 else f"n{i}", i / 7, base + dt.timedelta(microseconds=1500 * i + 1),
             [float(i), -0.0], run) for i in range(lo, hi)]
    return spark.createDataFrame(rows, ROWS).repartition(3)


def _rows(df):
    return sorted(tuple(r) for r in df.select(*[c for c in df.columns]).collect())


def test_append_is_spark_s_append(spark, tmp_table):
    ours, theirs = tmp_table("files_ours"), tmp_table("files_spark")
    for v, (lo, hi) in enumerate([(0, 40), (40, 41), (41, 41), (41, 90)]):
        for p in (ours, theirs):
            delta_files.ENABLED = p == ours
            try:
                delta.append_idempotent(_frame(spark, lo, hi), p, "pipe/out", v, options={"userMetadata": f"u{v}"})
                delta.append_idempotent(_frame(spark, lo, hi), p, "pipe/out", v)  # a replay: skipped
            finally:
                delta_files.ENABLED = True
    assert commit_engines(ours) == ["deltalake"] * 4 and set(commit_engines(theirs)) == {"spark"}
    a, b = delta.read_table(spark, ours), delta.read_table(spark, theirs)
    assert a.schema == b.schema
    assert _rows(a) == _rows(b) and a.count() == 90
    # each engine skips the other's txn, and the commit keeps its userMetadata
    delta.append_idempotent(_frame(spark, 0, 5), theirs, "pipe/out", 3)
    delta_files.ENABLED = False
    try:
        delta.append_idempotent(_frame(spark, 0, 5), ours, "pipe/out", 3)
    finally:
        delta_files.ENABLED = True
    assert delta.read_table(spark, ours).count() == 90 and delta.read_table(spark, theirs).count() == 90
    meta = [r["userMetadata"] for r in delta.history(spark, ours).orderBy("version").collect()]
    assert meta[-1] == "u3"
    # statistics: integer and timestamp bounds hold every row (no filter loses one by skipping)
    for cond in ["id = 17", "id > 88", "ts > timestamp'2026-01-01 00:00:00.0615'", "side = 1 and id < 3",
                 "ts <= timestamp'2026-01-01 00:00:00.000001'", "name is null", "d > 12.5"]:
        assert _rows(a.where(cond)) == _rows(b.where(cond)), cond
    lines = [line for f in glob.glob(f"{ours}/_delta_log/*.json") for line in Path(f).read_text().splitlines()]
    adds = [json.loads(line)["add"] for line in lines if line.startswith('{"add"')]
    st = json.loads(adds[0]["stats"])
    assert st["numRecords"] > 0 and {"id", "side", "ts"} <= set(st["minValues"]) and "d" not in st["minValues"]


def test_partition_overwrite_is_replace_where(spark, tmp_table):
    p = tmp_table("files_parts")
    delta.overwrite_partition(_frame(spark, 0, 30, "r1"), p, {"run_id": "r1"})
    delta.overwrite_partition(_frame(spark, 0, 30, "r1"), p, {"run_id": "r1"})  # a retried task: replaced
    delta.overwrite_partition(_frame(spark, 30, 33, "r2"), p, {"run_id": "r2"})
    delta.overwrite_partition(_frame(spark, 0, 0, "r3"), p, {"run_id": "r3"})  # empty
    assert commit_engines(p) == ["deltalake"] * 4
    t = delta.read_table(spark, p)
    assert t.count() == 33 and t.where("run_id = 'r1'").count() == 30
    assert [r["run_id"] for r in t.select("run_id").distinct().orderBy("run_id").collect()] == ["r1", "r2"]
    # Spark's replaceWhere and our overwrite replace each other's partition
    delta_files.ENABLED = False
    try:
        delta.overwrite_partition(_frame(spark, 0, 4, "r2"), p, {"run_id": "r2"})
    finally:
        delta_files.ENABLED = True
    delta.overwrite_partition(_frame(spark, 0, 6, "r1"), p, {"run_id": "r1"})
    t = delta.read_table(spark, p)
    assert t.where("run_id = 'r1'").count() == 6 and t.where("run_id = 'r2'").count() == 4
    with pytest.raises(Exception, match="replaces partition"):
        delta.overwrite_partition(_frame(spark, 0, 3, "r9"), p, {"run_id": "r1"})
    assert delta.read_table(spark, p).count() == 10  # nothing of the failed write is visible


def test_other_columns_go_to_spark(spark, tmp_table):
    p = tmp_table("files_merge")
    delta.overwrite_partition(_frame(spark, 0, 3), p, {"run_id": "r1"})
    wider = _frame(spark, 0, 2, "r2").withColumn("extra", F.lit(1))
    delta.overwrite_partition(wider, p, {"run_id": "r2"}, merge_schema=True)
    assert commit_engines(p) == ["deltalake", "spark"]
    assert delta.read_table(spark, p).where("extra = 1").count() == 2


def test_a_task_failing_mid_write_commits_nothing(spark, tmp_table, monkeypatch):
    from simjoin import faults

    p = tmp_table("files_fault")
    delta.append_idempotent(_frame(spark, 0, 10), p, "pipe/out", 0)
    monkeypatch.setenv(faults.ENV, "t.s.rows@4")
    with faults.current_stage("t.s"), pytest.raises(faults.InjectedFault, match="rows@4"):
        delta.append_idempotent(_frame(spark, 10, 40), p, "pipe/out", 1)
    monkeypatch.delenv(faults.ENV)
    assert delta.read_table(spark, p).count() == 10 and commit_engines(p) == ["deltalake"]
    delta.append_idempotent(_frame(spark, 10, 40), p, "pipe/out", 1)  # the retry
    assert delta.read_table(spark, p).count() == 40


def test_overwrite_replaces_every_row(spark, tmp_table):
    p = tmp_table("files_over")
    delta.overwrite(_frame(spark, 0, 20), p)
    delta.overwrite(_frame(spark, 5, 8), p, options={"userMetadata": "w"})
    assert _rows(delta.read_table(spark, p)) == _rows(_frame(spark, 5, 8))
    delta.overwrite(_frame(spark, 0, 2).drop("v"), p)  # another schema: Spark's overwriteSchema
    assert commit_engines(p) == ["deltalake", "deltalake", "spark"]
    assert delta.read_table(spark, p).columns == [c for c in _frame(spark, 0, 1).columns if c != "v"]
    assert delta.history(spark, p).orderBy("version").collect()[1]["userMetadata"] == "w"


PAIRS = "left_id long, right_id long, distance double, window_start timestamp"


def _pair_table(lo, hi):
    import pyarrow as pa

    base = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    return pa.table({"left_id": pa.array(range(lo, hi), pa.int64()), "right_id": pa.array(range(lo + 1, hi + 1),
                                                                                          pa.int64()),
                     "distance": pa.array([None if i % 4 == 0 else i / 10 for i in range(lo, hi)], pa.float64()),
                     "window_start": pa.array([base + dt.timedelta(seconds=60 * (i % 3)) for i in range(lo, hi)],
                                              pa.timestamp("us", tz="UTC"))})


def test_files_written_by_tasks_are_committed_once_and_invisible_before(spark, tmp_table):
    """The join tasks' path: files written into the table's directory (``write_file``) are in no
    read until ``append_files`` commits them, once per txn; a replay commits nothing."""
    p = tmp_table("files_pairs")
    want = _pair_table(0, 1).schema
    root, schema = delta.file_target(p, want)  # no table yet: the files' schema is ours
    assert schema == want
    first = delta.Files(root, schema, (delta_files.write_file(root, _pair_table(0, 30)),
                                       delta_files.write_file(root, _pair_table(30, 30))))
    assert first.n == 30 and len(first.paths) == 1  # an empty file is never committed
    assert not delta.table_exists(spark, p)
    assert delta.files_frame(spark, first).count() == 30
    delta.append_files(spark, first, p, "pipe/pairs", 0)
    # unit 1: its files sit in the directory, but only the commit shows them
    root, schema = delta.file_target(p, want)
    second = delta.Files(root, schema, (delta_files.write_file(root, _pair_table(30, 50)),))
    assert delta.read_table(spark, p).count() == 30
    delta.append_files(spark, second, p, "pipe/pairs", 1)
    delta.append_files(spark, second, p, "pipe/pairs", 1)  # a publish rerun: the txn is known, skipped
    delta.append_files(spark, first, p, "pipe/pairs", 0)
    got = delta.read_table(spark, p)
    assert commit_engines(p) == ["deltalake", "deltalake"] and got.count() == 50
    assert sorted(r["left_id"] for r in got.collect()) == list(range(50))
    assert got.where("distance is null").count() == len(range(0, 50, 4))
    assert got.where("window_start = timestamp'2026-01-01 00:02:00+00:00'").count() == len(range(2, 50, 3))
    # a table with other columns takes no files: the caller hands its pairs over as rows
    other = tmp_table("files_pairs_other")
    delta.append_idempotent(spark.createDataFrame([(1, 2)], "left_id long, right_id long"), other, "x", 0)
    assert delta.file_target(other, want) is None
    # a non-local table neither
    assert delta.file_target("some_catalog_table", want) is None


def test_files_a_publish_fault_commits_nothing(spark, tmp_table, monkeypatch):
    from simjoin import faults

    p = tmp_table("files_pairs_fault")
    root, schema = delta.file_target(p, _pair_table(0, 1).schema)
    files = delta.Files(root, schema, (delta_files.write_file(root, _pair_table(0, 20)),))
    monkeypatch.setenv(faults.ENV, "t.s.rows@4")
    with faults.current_stage("t.s"), pytest.raises(faults.InjectedFault, match="rows@4"):
        delta.append_files(spark, files, p, "pipe/pairs", 0)
    monkeypatch.delenv(faults.ENV)
    assert not delta.table_exists(spark, p)
    delta.append_files(spark, files, p, "pipe/pairs", 0)
    assert delta.read_table(spark, p).count() == 20
