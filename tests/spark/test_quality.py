import os

import pytest

from simjoin.quality import gates


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

    from simjoin.spark import unique

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
    assert list(unique.repeated(__import__("numpy").array([5, 1, 5, 2, 1, 5]))) == [1, 5]


@pytest.fixture
def gate_home(monkeypatch):
    """A private folder of its own for the gate server (a short path: a Unix socket's is bounded);
    the server started there is stopped afterwards."""
    import contextlib
    import glob
    import shutil
    import signal
    import tempfile
    from pathlib import Path

    d = tempfile.mkdtemp(prefix="sj-gate-", dir="/tmp")
    monkeypatch.setenv("XDG_RUNTIME_DIR", d)
    monkeypatch.setattr(gates, "_use_server", False)
    yield d
    for log in glob.glob(f"{d}/simjoin/gate-*.log"):
        for line in Path(log).read_text().splitlines():
            if " ready at " in line:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(line.split("gate server ")[1].split()[0]), signal.SIGTERM)
    shutil.rmtree(d, ignore_errors=True)


def _pairs_tables():
    import pyarrow as pa

    good = pa.table({"left_id": pa.array([1, 2, 3], pa.int64()), "right_id": pa.array([2, 3, 4], pa.int64())})
    bad = pa.table({"left_id": pa.array([1, 1, 5], pa.int64()), "right_id": pa.array([2, 2, 4], pa.int64())})
    return good, bad


def test_the_gate_server_validates_as_this_process_does(monkeypatch, gate_home):
    """``preload(process=True)`` (a CLI run or task whose units may run in process) starts the warm
    gate server; a suite of ``Expect`` on a pyarrow Table is validated there, with this process's
    result - a pass, and a failure naming the same expectations and counts - by socket or, for a
    large table, by a memory-mapped Arrow file. The server's folder is private (0700), its key
    0600; a client without the key is refused and the server goes on serving."""
    import stat
    from multiprocessing.connection import Client

    from simjoin.quality import gate_server

    good, bad = _pairs_tables()
    ex = gates.pairs_expectations(None, None, None, True)
    assert all(isinstance(e, gates.Expect) for e in ex)
    here = [gates.run_suite(t, "here", ex, raise_on_failure=False) for t in (good, bad)]
    gates.preload(process=True)
    assert gates._use_server
    there = [gates.run_suite(t, "there", ex, raise_on_failure=False) for t in (good, bad)]
    assert gates._use_server and gate_server.running()  # the server answered
    monkeypatch.setattr(gates, "PICKLE_ROWS", 1)
    by_file = [gates.run_suite(t, "there", ex, raise_on_failure=False) for t in (good, bad)]
    assert [(r.success, r.evaluated) for r in by_file] == [(r.success, r.evaluated) for r in there]
    with pytest.raises(gates.GateFailed, match="expect_compound_columns_to_be_unique"):
        gates.run_suite(bad, "there", ex)
    assert [r.success for r in there] == [r.success for r in here] == [True, False]

    def key(r):
        return sorted((f["expectation"], f["unexpected_count"]) for f in r.failures)

    assert key(there[1]) == key(here[1]) == key(by_file[1]) and len(key(here[1])) == 2
    sock, key_file = gate_server.address()
    assert stat.S_IMODE(os.stat(os.path.dirname(sock)).st_mode) == 0o700
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    with pytest.raises(Exception, match=r"digest|challenge|Authentication"):
        Client(sock, family="AF_UNIX", authkey=b"not the key")
    assert gates.run_suite(good, "after", ex).success and gates._use_server


def test_a_gate_server_that_does_not_answer_leaves_the_gate_to_this_process(monkeypatch, caplog, gate_home):
    """No server answers within ``GATE_PROCESS_START_S``: the suite runs here, with the same
    result, and says so once; a server folder others may open is refused in one line."""
    from simjoin.quality import gate_server

    _, bad = _pairs_tables()
    ex = gates.pairs_expectations(None, None, None, True)
    monkeypatch.setattr(gates, "_use_server", True)  # as if started, but none runs
    monkeypatch.setattr(gates, "GATE_PROCESS_START_S", 0.5)
    res = gates.run_suite(bad, "fallback", ex, raise_on_failure=False)
    assert not res.success and not gates._use_server
    assert "the gate server did not answer in 0.5s" in caplog.text
    os.chmod(gate_server.server_dir(), 0o755)
    with pytest.raises(gate_server.Unsafe, match=r"allowed a folder of uid .* with mode 0700"):
        gate_server.server_dir()
    gates.preload(process=True)  # refused: the thread imports Great Expectations here instead
    assert not gates._use_server and "no gate server" in caplog.text


def test_narrow_columns_are_checked_by_value_as_wide_ones_and_keep_their_type():
    """An int32 or float32 column Great Expectations checks by value only is handed to it widened
    (its pandas check is vectorized only for int64 and float64): the same verdicts and counts; a
    column whose type an expectation checks keeps its own type."""
    import pyarrow as pa

    t = pa.table({"task": pa.array([0, 1, 2, 7], pa.int32()), "w": pa.array([0.5, 1.5, 0.25, 9.0], pa.float32())})
    ex = [gates.Expect.of("ExpectColumnValuesToBeBetween", column="task", min_value=0, max_value=3),
          gates.Expect.of("ExpectColumnValuesToBeBetween", column="w", min_value=0.0, max_value=2.0)]
    r = gates.validate(t, "narrow", ex, raise_on_failure=False)
    got = {(f["kwargs"]["column"], f["unexpected_count"], tuple(f["samples"])) for f in r.failures}
    assert got == {("task", 1, (7,)), ("w", 1, (9.0,))}
    assert gates.validate(t.slice(0, 3), "narrow_ok", ex, raise_on_failure=False).success
    typed = [gates.Expect.of("ExpectColumnValuesToBeOfType", column="task", type_="IntegerType"), ex[0]]
    r = gates.validate(t.slice(0, 3), "typed", typed, raise_on_failure=False)
    assert r.success, r.failures
    wrong = [gates.Expect.of("ExpectColumnValuesToBeOfType", column="task", type_="LongType")]
    assert not gates.validate(t, "typed_wrong", wrong, raise_on_failure=False).success
