"""simjoin_s3j: loads, validates its params, and a dag.test() run joins a small stream exactly."""

from __future__ import annotations

import datetime as dt
import os

import numpy as np
import pytest

from tests.helpers import load_dag, outlet_uris


@pytest.fixture(scope="module")
def dag(airflow_db):
    return load_dag("s3j")


def test_tasks_params_and_outlets(dag):
    from airflow.sdk.exceptions import ParamValidationError

    assert [t.task_id for t in dag.topological_sort()] == ["ingest", "partition", "worksets", "join", "gate", "stats",
                                                                 "rebalance", "publish", "in_process", "maintain"]
    # ingest chooses: the per-stage tasks, or one in_process task for a small unit
    assert dag.get_task("ingest").downstream_task_ids == {"partition", "in_process"}
    # the tables' maintenance follows whichever path ran (simjoin.pipeline.maintain)
    assert dag.get_task("maintain").upstream_task_ids == {"publish", "in_process"}
    assert dag.get_task("maintain").trigger_rule == "none_failed_min_one_success"
    assert type(dag.get_task("ingest")).__name__ == "_BranchPythonDecoratedOperator"
    assert all(t.retries >= 2 for t in dag.tasks) and "simjoin" in dag.tags and dag.doc_md
    for key, bad in (("threshold", 0), ("metric", "manhattan"), ("workers", 0), ("algorithm", "x"),
                     ("window", "soon"), ("rebalance", "always"), ("rebalance_trigger", 0)):
        with pytest.raises(ParamValidationError):
            dag.params.get_param(key).resolve(bad)
    outs = {t: {u.rsplit("/", 2)[-2] + "/" + u.rsplit("/", 1)[-1] for u in us} for t, us in outlet_uris(dag).items()}
    # Assets are announced only after the gate, by publish (or the in_process task, which publishes)
    assert {"s3j/pairs", "s3j/pairs_stats"} <= outs["publish"] and outs["publish"] <= outs["in_process"]
    assert not any(outs[t] for t in ("ingest", "partition", "worksets", "join", "gate", "stats", "rebalance"))


@pytest.mark.parametrize("path", ["in_process", "stages"])
def test_dag_run_matches_brute_force(dag, spark, tmp_path, monkeypatch, path):
    """A unit of 300 records runs in the one ``in_process`` task (the default), or, with
    SIMJOIN_LOCAL_UNIT_ROWS=0, task by task; both runs are exact, and the other path is skipped."""
    from deltalake import DeltaTable

    from simjoin.core.metric import brute_force_join

    if path == "stages":
        monkeypatch.setenv("SIMJOIN_LOCAL_UNIT_ROWS", "0")

    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, (300, 2))
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    secs = np.sort(rng.uniform(0, 20, 300))
    rows = [(i, t0 + dt.timedelta(seconds=float(s)), x.tolist()) for i, (s, x) in enumerate(zip(secs, X))]
    src, out = str(tmp_path / "in"), str(tmp_path / "pairs")
    spark.createDataFrame(rows, "id long, ts timestamp, vector array<double>").write.format("delta").save(src)
    run = dag.test(run_conf={"left": src, "output": out, "threshold": 0.05, "metric": "euclidean",
                             "window": "10s", "workers": 3})
    assert str(run.state) in ("success", "DagRunState.SUCCESS")
    states = {ti.task_id: str(ti.state).rsplit(".", 1)[-1].lower() for ti in run.get_task_instances()}
    stages = ("partition", "worksets", "join", "gate", "stats", "rebalance", "publish")
    if path == "in_process":
        assert states == {"ingest": "success", "in_process": "success", **{s: "skipped" for s in stages},
                          "maintain": "success"}, states
    else:
        assert states == {"ingest": "success", "in_process": "skipped", **{s: "success" for s in stages},
                          "maintain": "success"}, states
    t = DeltaTable(out).to_pyarrow_table()
    got = set(zip(t.column("left_id").to_pylist(), t.column("right_id").to_pylist(),
                  [w.timestamp() for w in t.column("window_start").to_pylist()]))
    ref = set()
    for k in (0, 1):
        m = (secs // 10) == k
        L, R, _ = brute_force_join(X[m], np.flatnonzero(m), None, "euclidean", 0.05)
        ref |= {(int(a), int(b), (t0 + dt.timedelta(seconds=10 * k)).timestamp()) for a, b in zip(L, R)}
    assert got == ref and t.num_rows == len(ref) > 0
    assert DeltaTable(out + "_stats").to_pyarrow_table().num_rows > 0


def test_the_in_process_task_fails_and_reruns_exactly(airflow_db, spark, tmp_path, monkeypatch):
    """The one in_process task killed inside publish (pairs appended, unit not committed), then after
    its gate: nothing is committed twice, and the next run finishes the same unit exactly."""
    from deltalake import DeltaTable

    from simjoin.core.metric import brute_force_join

    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, (200, 2))
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    rows = [(i, t0 + dt.timedelta(seconds=float(s)), x.tolist()) for i, (s, x) in
            enumerate(zip(np.sort(rng.uniform(0, 9, 200)), X))]
    src, out = str(tmp_path / "in"), str(tmp_path / "pairs")
    spark.createDataFrame(rows, "id long, ts timestamp, vector array<double>").write.format("delta").save(src)
    conf = {"left": src, "output": out, "threshold": 0.1, "metric": "euclidean", "window": "10s"}
    dag = load_dag("s3j", fail_fast=True)
    for fault in ("s3j.publish.mid", "s3j.gate"):
        monkeypatch.setenv("SIMJOIN_FAULTS", fault)
        run = dag.test(run_conf=conf)
        assert str(run.state).rsplit(".", 1)[-1].lower() == "failed", fault
        states = {ti.task_id: str(ti.state).rsplit(".", 1)[-1].lower() for ti in run.get_task_instances()}
        assert states["in_process"] == "failed" and states["partition"] == "skipped", states
        assert not os.path.isdir(out + "_state/progress/_delta_log"), f"the unit was committed although {fault}"
    monkeypatch.delenv("SIMJOIN_FAULTS")
    run = dag.test(run_conf=conf)
    assert str(run.state).rsplit(".", 1)[-1].lower() == "success"
    t = DeltaTable(out).to_pyarrow_table()
    got = list(zip(t.column("left_id").to_pylist(), t.column("right_id").to_pylist()))
    L, R, _ = brute_force_join(X, np.arange(200), None, "euclidean", 0.1)
    assert len(got) == len(set(got)) and set(got) == set(zip(L.tolist(), R.tolist())) and got
