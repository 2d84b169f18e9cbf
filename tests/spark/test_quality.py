import pytest

from simjoin.quality import gates
from simjoin.quality import quarantine as q
from simjoin.spark import delta


def _vectors(spark):
    rows = [
        (1, [0.1, 0.2, 0.3]),
        (2, [0.5, float("nan"), 0.1]),      # NaN
        (3, [0.5, 0.5]),                    # wrong dimension
        (4, None),                          # null vector
        (5, [float("inf"), 0.0, 0.0]),      # inf
        (6, [1.0, 1.0, 1.0]),
        (6, [2.0, 2.0, 2.0]),               # duplicate id (second copy)
        (None, [1.0, 0.0, 0.0]),            # null id
        (7, [0.0, 0.0, 0.0]),               # zero vector (bad under angular)
        (8, [0.3, 0.3, 0.3]),
    ]
    return spark.createDataFrame(rows, "id long, vector array<double>")


def test_quarantine_splits_bad_vectors_with_reasons(spark, tmp_table):
    df = _vectors(spark)
    rules = q.not_null("id", "vector") + q.vector_rules("vector", 3) + [q.zero_vector("vector", "angular")]
    res = q.split_quarantine(df, rules, id_col="id", table="vectors")
    assert (res.n_in, res.n_good, res.n_bad) == (10, 3, 7)
    assert sorted(r.id for r in res.good.collect()) == [1, 6, 8]
    reasons = {(r.id, tuple(r.vector) if r.vector else None): r.reason for r in res.bad.collect()}
    by_id = {k[0]: v for k, v in reasons.items() if k[0] != 6}
    assert "NaN or inf" in by_id[2] and "dimension 2, expected 3" in by_id[3]
    assert "null vector" in by_id[4] and "NaN or inf" in by_id[5] and "null id" in by_id[None]
    assert "zero vector" in by_id[7]
    assert reasons[(6, (2.0, 2.0, 2.0))] == "duplicate id 6"
    path = q.write_quarantine(res, tmp_table("vectors"), "run1", "ingest")
    q.write_quarantine(res, tmp_table("vectors"), "run1", "ingest")  # rerun: replaced, not appended
    assert path.endswith("vectors_quarantine")
    qt = delta.read_table(spark, path)
    assert qt.count() == 7 and {"reason", "run_id", "stage"} <= set(qt.columns)


def test_quarantine_empty_and_null_text(spark):
    df = spark.createDataFrame([(1, "a b"), (2, "   "), (3, None), (4, "c")], "id long, text string")
    res = q.split_quarantine(df, q.not_null("text") + [q.nonempty_text("text")], id_col="id")
    assert (res.n_good, res.n_bad) == (2, 2)
    assert sorted(r.reason for r in res.bad.collect()) == ["empty text", "null text"]


def test_gate_passes_and_fails_with_readable_summary(spark):
    good = spark.createDataFrame([(1, 2, 0.9), (1, 3, 0.8)], "left_id long, right_id long, similarity double")
    r = gates.run_suite(good, "pairs_ok", gates.pairs_expectations("similarity", 0.8, 1.0, self_join=True))
    assert r.success and r.evaluated >= 7
    bad = spark.createDataFrame([(1, 2, 0.9), (1, 2, 0.9), (5, 3, 0.5)], "left_id long, right_id long, similarity double")
    with pytest.raises(gates.GateFailed) as e:
        gates.run_suite(bad, "pairs_bad", gates.pairs_expectations("similarity", 0.8, 1.0, self_join=True))
    msg = str(e.value)
    assert "expect_column_values_to_be_between" in msg and "expect_compound_columns_to_be_unique" in msg
    assert "expect_column_pair_values_a_to_be_greater_than_b" in msg
    fails = {f["expectation"]: f for f in e.value.failures}
    assert fails["expect_column_values_to_be_between"]["unexpected_count"] == 1
    assert 0.5 in fails["expect_column_values_to_be_between"]["samples"]
    assert fails["expect_compound_columns_to_be_unique"]["unexpected_count"] == 2
    assert {"left_id": 1, "right_id": 2} in fails["expect_compound_columns_to_be_unique"]["samples"]


def test_gate_fails_on_a_missing_or_mistyped_column(spark):
    df = spark.createDataFrame([(1, 2.0)], "left_id long, right_id double")
    with pytest.raises(gates.GateFailed) as e:
        gates.run_suite(df, "pairs_schema", gates.pairs_expectations("similarity", 0.5, 1.0, self_join=False))
    kinds = [(f["expectation"], f["kwargs"].get("column")) for f in e.value.failures]
    assert ("expect_column_values_to_be_of_type", "right_id") in kinds
    assert ("expect_column_values_to_be_of_type", "similarity") in kinds


@pytest.mark.parametrize("on_driver", [True, False, "table"])
def test_uniqueness_check_is_great_expectations_own(spark, monkeypatch, on_driver):
    """The gate's exact hash check of uniqueness fails on the same rows as Great Expectations'
    own expectation: ties, nulls in some or all key columns, one column or several - with the
    hashes sorted on the driver or in the tasks, or on a pyarrow table the stage holds in the
    driver (``unique.duplicates_table``, the suite run on pandas)."""
    import random

    import great_expectations as gx
    import great_expectations.expectations as gxe

    from simjoin.quality import unique

    monkeypatch.setattr(unique, "DRIVER_ROWS", 10**9 if on_driver else 0)
    ctx = gates._context()
    ds = ctx.data_sources.get("simjoin_spark")
    for seed in range(3):
        rnd = random.Random(seed)
        rows = [(rnd.choice([None, 1, 2, 3]), rnd.choice([None, 7, 8]), rnd.random()) for _ in range(40)]
        rows += [(None, None, 0.0)] * 3 + ([(9, 9, 1.0)] * 2 if seed % 2 else [])
        df = spark.createDataFrame(rows, "a long, b long, x double").repartition(3)
        for i, ex in enumerate([gxe.ExpectCompoundColumnsToBeUnique(column_list=["a", "b"]),
                   gxe.ExpectColumnValuesToBeUnique(column="a"), gxe.ExpectColumnValuesToBeUnique(column="x")]):
            asset = ds.add_dataframe_asset(name=f"uq_{seed}_{i}_{on_driver}")
            batch = asset.add_batch_definition_whole_dataframe("w").get_batch(batch_parameters={"dataframe": df})
            theirs = batch.validate(gx.ExpectationSuite(name=asset.name, expectations=[ex]), result_format="SUMMARY")
            r = gates.run_suite(df.toArrow() if on_driver == "table" else df, "uq", [ex], raise_on_failure=False)
            assert r.success == theirs.success, (seed, ex.expectation_type)
            if not r.success:
                assert r.failures[0]["unexpected_count"] == theirs.results[0].result["unexpected_count"]
            ds.delete_asset(asset.name)
    assert list(unique._repeated(__import__("numpy").array([5, 1, 5, 2, 1, 5]))) == [1, 5]


def test_the_gate_process_validates_as_this_process_does(monkeypatch):
    """``preload(process=True)`` (a CLI run whose units may run in process): a suite of ``Expect``
    on a pyarrow Table is validated in the gate process, with this process's result - a pass, and a
    failure naming the same expectations and counts."""
    import pyarrow as pa

    good = pa.table({"left_id": pa.array([1, 2, 3], pa.int64()), "right_id": pa.array([2, 3, 4], pa.int64())})
    bad = pa.table({"left_id": pa.array([1, 1, 5], pa.int64()), "right_id": pa.array([2, 2, 4], pa.int64())})
    ex = gates.pairs_expectations(None, None, None, True)
    assert all(isinstance(e, gates.Expect) for e in ex)
    here = [gates.run_suite(t, "here", ex, raise_on_failure=False) for t in (good, bad)]
    monkeypatch.setattr(gates, "_gate_pool", None)
    gates.preload(process=True)
    pool = gates._gate_pool
    assert pool is not None
    try:
        there = [gates.run_suite(t, "there", ex, raise_on_failure=False) for t in (good, bad)]
        # a large table goes as a memory-mapped Arrow file, not through the pool's pipe: the same result
        monkeypatch.setattr(gates, "PICKLE_ROWS", 1)
        by_file = [gates.run_suite(t, "there", ex, raise_on_failure=False) for t in (good, bad)]
        assert [(r.success, r.evaluated) for r in by_file] == [(r.success, r.evaluated) for r in there]
        with pytest.raises(gates.GateFailed, match="expect_compound_columns_to_be_unique"):
            gates.run_suite(bad, "there", ex)
    finally:
        pool.terminate()
        monkeypatch.setattr(gates, "_gate_pool", None)
    assert [r.success for r in there] == [r.success for r in here] == [True, False]

    def key(r):
        return sorted((f["expectation"], f["unexpected_count"]) for f in r.failures)

    assert key(there[1]) == key(here[1]) == key(by_file[1]) and len(key(here[1])) == 2


def _slow_start() -> bool:
    import time

    time.sleep(30)
    return True


def test_a_gate_process_that_does_not_start_leaves_the_gate_to_this_process(monkeypatch, caplog):
    """A gate process whose warm-up never answers (one spawned from a ``__main__`` it cannot import
    again respawns forever) is stopped after ``GATE_PROCESS_START_S``; the suite then runs here,
    with the same result, and says so once."""
    import multiprocessing as mp

    import pyarrow as pa

    bad = pa.table({"left_id": pa.array([1, 1, 5], pa.int64()), "right_id": pa.array([2, 2, 4], pa.int64())})
    ex = gates.pairs_expectations(None, None, None, True)
    pool = mp.get_context("spawn").Pool(1)
    monkeypatch.setattr(gates, "_gate_pool", pool)
    monkeypatch.setattr(gates, "_gate_warm", pool.apply_async(_slow_start))
    monkeypatch.setattr(gates, "GATE_PROCESS_START_S", 0.5)
    try:
        res = gates.run_suite(bad, "fallback", ex, raise_on_failure=False)
    finally:
        pool.terminate()
    assert not res.success and gates._gate_pool is None
    assert "the gate process did not start" in caplog.text
