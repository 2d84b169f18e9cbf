"""simjoin_ineq: loads, validates its params, and dag.test() runs join two streams exactly; a gate
that fails once publishes nothing, and the next run finishes the same unit."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import load_dag, outlet_uris
from tests.spark.test_ineq import T0, _append, _gen, _pairs


@pytest.fixture(scope="module")
def dag(airflow_db):
    return load_dag("ineq", fail_fast=True)


def test_tasks_params_and_outlets(dag):
    from airflow.sdk.exceptions import ParamValidationError

    assert [t.task_id for t in dag.topological_sort()] == ["ingest", "probe", "merge", "gate", "stats", "publish",
                                                           "in_process", "maintain"]
    # ingest chooses: one in_process task for a unit the in-process executor takes, else a task per stage
    assert dag.get_task("ingest").downstream_task_ids == {"probe", "in_process"}
    # the tables' maintenance follows whichever path ran (simjoin.pipeline.maintain)
    assert dag.get_task("maintain").upstream_task_ids == {"publish", "in_process"}
    assert dag.get_task("maintain").trigger_rule == "none_failed_min_one_success"
    assert "simjoin" in dag.tags and dag.doc_md and dag.params["where"] == "l.a < r.a AND l.b > r.b"
    for key, bad in (("workers", 0), ("window", "soon"), ("window_count", 0)):
        with pytest.raises(ParamValidationError):
            dag.params.get_param(key).resolve(bad)
    outs = {t: {u.rsplit("/", 1)[-1] for u in us} for t, us in outlet_uris(dag).items()}
    assert {"pairs", "pairs_stats"} <= outs["publish"] and outs["publish"] <= outs["in_process"]
    assert not any(outs[t] for t in ("ingest", "probe", "merge", "gate", "stats"))


def _state(run):
    return str(run.state).lower().rsplit(".", 1)[-1]


def test_gate_fails_once_then_the_rerun_is_exact(dag, spark, tmp_path, monkeypatch):
    from simjoin.core.inequality.query import parse_query
    from simjoin.core.inequality.spo import Window
    from simjoin.spark import delta
    from tests.unit.test_inequality_stream import brute_force

    L, R = _gen(7, 80, 1), _gen(8, 80, 2)
    conf = {"left": str(tmp_path / "l"), "right": str(tmp_path / "r"), "output": str(tmp_path / "out"),
            "where": "l.a < r.a AND l.b > r.b", "window": "15s", "workers": 2}
    _append(spark, conf["left"], L, np.arange(80))
    _append(spark, conf["right"], R, np.arange(80))
    monkeypatch.setenv("SIMJOIN_FAULTS", "ineq.gate")
    assert _state(dag.test(run_conf=conf)) == "failed"
    assert not delta.table_exists(spark, conf["output"]), "pairs published although the gate failed"
    monkeypatch.delenv("SIMJOIN_FAULTS")
    assert _state(dag.test(run_conf=conf)) == "success"
    got, t = _pairs(conf["output"])
    u = np.zeros(80, np.int64)
    ref = brute_force(parse_query(conf["where"]), L, R, Window(time_us=15_000_000), u, u)
    assert len(got) == len(set(got)) and sorted(got) == ref and len(ref) > 20
    assert min(t.column("ts").to_pylist()) >= T0
