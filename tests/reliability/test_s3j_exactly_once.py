"""The S3J DAG's exactly-once contract: a gate or stats task that fails once leaves nothing
published; the next run finishes the same unit and the pairs equal a clean run's."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from tests.helpers import load_dag

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def dag(airflow_db):
    return load_dag("s3j", fail_fast=True)


def _stream(spark, path, lo, hi, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (400, 2))
    secs = np.sort(rng.uniform(0, 40, 400))
    rows = [(i, T0 + dt.timedelta(seconds=float(secs[i])), X[i].tolist()) for i in range(lo, hi)]
    spark.createDataFrame(rows, "id long, ts timestamp, vector array<double>").write.format("delta").mode(
        "append").save(path)


def _pairs(path):
    from deltalake import DeltaTable

    t = DeltaTable(path).to_pyarrow_table().to_pydict()
    got = list(zip(t["left_id"], t["right_id"], t["window_start"]))
    return got


def _state(run):
    return str(run.state).lower().rsplit(".", 1)[-1]


CONF = {"threshold": 0.08, "metric": "euclidean", "window": "10s", "workers": 3}


def _brute_force(n):
    from simjoin.core.metric import brute_force_join

    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, (400, 2))
    secs = np.sort(rng.uniform(0, 40, 400))[:n]
    X, ids = X[:n], np.arange(n)
    ref = set()
    for k in range(5):
        m = (secs // 10) == k
        L, R, _ = brute_force_join(X[m], ids[m], None, "euclidean", 0.08)
        ref |= {(int(a), int(b), (T0 + dt.timedelta(seconds=10 * k)).replace(tzinfo=None)) for a, b in zip(L, R)}
    return ref


@pytest.mark.slow
@pytest.mark.exhaustive  # make test: the s3j walk of test_faults.py fails and retries every stage
def test_gate_then_stats_then_publish_fail_once_then_rerun_is_exact(dag, spark, tmp_path, monkeypatch):
    from simjoin.spark import delta

    src, out = str(tmp_path / "in"), str(tmp_path / "pairs")
    conf = {"left": src, "output": out, **CONF}
    _stream(spark, src, 0, 250)
    for fault in ("s3j.gate", "s3j.stats"):
        monkeypatch.setenv("SIMJOIN_FAULTS", fault)
        assert _state(dag.test(run_conf=conf)) == "failed"
        assert not delta.table_exists(spark, out), f"pairs published although {fault} failed"
    # more rows arrive: they must not be merged into the unfinished unit 0
    _stream(spark, src, 250, 400)
    monkeypatch.setenv("SIMJOIN_FAULTS", "s3j.publish.mid")  # pairs appended, unit not committed
    assert _state(dag.test(run_conf=conf)) == "failed"
    assert delta.table_exists(spark, out) and not delta.table_exists(spark, out + "_state/progress")
    monkeypatch.setenv("SIMJOIN_FAULTS", "s3j.publish")  # publish did all its writes, then the task failed
    assert _state(dag.test(run_conf=conf)) == "failed"
    units = sorted({r["unit"] for r in delta.read_table(spark, out + "_state/progress").collect()})
    assert units == [0]
    got = _pairs(out)
    assert len(got) == len(set(got)) and {(a, b, w.replace(tzinfo=None)) for a, b, w in got} == _brute_force(250)
    monkeypatch.delenv("SIMJOIN_FAULTS")
    assert _state(dag.test(run_conf=conf)) == "success"  # unit 1: the rows that arrived meanwhile
    got = _pairs(out)
    assert len(got) == len(set(got)), "a pair published twice"
    assert {(a, b, w.replace(tzinfo=None)) for a, b, w in got} == _brute_force(400)
    units = sorted({r["unit"] for r in delta.read_table(spark, out + "_state/progress").collect()})
    assert units == [0, 1]


@pytest.mark.slow
@pytest.mark.exhaustive  # make test: the s3j walk of test_faults.py reruns every stage under its unit
def test_every_stage_rerun_under_the_same_unit_is_idempotent(spark, tmp_path):
    """Each S3J task run twice in a row (as a retry would) through the one task entry."""
    from simjoin.pipeline.runner import run_stage
    from simjoin.spark import delta

    src, out = str(tmp_path / "in"), str(tmp_path / "pairs")
    conf = {"left": src, "output": out, **CONF}
    _stream(spark, src, 0, 250)
    first = run_stage("s3j", "ingest", conf, "r1", spark=spark)
    assert first["unit"] == 0 and not first["resumed"] and first["staged"] == first["unit_rows"] > 0
    assert run_stage("s3j", "ingest", conf, "r1", spark=spark) == {**first, "resumed": True, "batches": [],
                                                                    "rows": 0, "staged": 0, "quarantined": 0}
    for stage in ("partition", "worksets", "join", "gate", "stats", "rebalance", "publish"):
        a = run_stage("s3j", stage, conf, "r1", spark=spark)
        b = run_stage("s3j", stage, conf, "r1", spark=spark)
        assert a["unit"] == 0 and (b == a or stage == "publish"), (stage, a, b)
    got = _pairs(out)
    assert len(got) == len(set(got)) and {(a, b, w.replace(tzinfo=None)) for a, b, w in got} == _brute_force(250)
    stats = delta.read_table(spark, out + "_stats")
    assert stats.where("level = 'window'").count() == stats.where("level = 'window'").select("window_start") \
        .distinct().count() == 3
