"""simjoin_s2j: loads, validates its params, and dag.test() runs two concurrent tasks exactly; a
join task that fails once publishes nothing, and the next run finishes the same unit; a bad task
fails the first task with the parser's message and writes nothing."""

from __future__ import annotations

import os

import numpy as np
import pytest

from simjoin.core.s2j.bruteforce import brute_force
from simjoin.core.s2j.task import parse_tasks
from tests.helpers import load_dag, outlet_uris
from tests.spark.test_s2j import _append, _gen, _pairs, _tuples


@pytest.fixture(scope="module")
def dag(airflow_db):
    return load_dag("s2j", fail_fast=True)


def _state(run):
    return str(run.state).lower().rsplit(".", 1)[-1]


def test_tasks_params_and_outlets(dag):
    from airflow.sdk.exceptions import ParamValidationError

    assert [t.task_id for t in dag.topological_sort()] == ["ingest", "join", "gate", "publish", "in_process",
                                                           "maintain"]
    # ingest chooses: one in_process task for a unit the in-process executor takes, else a task per stage
    assert dag.get_task("ingest").downstream_task_ids == {"join", "in_process"}
    # the tables' maintenance follows whichever path ran (simjoin.pipeline.maintain)
    assert dag.get_task("maintain").upstream_task_ids == {"publish", "in_process"}
    assert dag.get_task("maintain").trigger_rule == "none_failed_min_one_success"
    assert "simjoin" in dag.tags and dag.doc_md and "pm25: abs(l.pm25 - r.pm25) > 30" in dag.params["tasks"]
    for key, bad in (("capacity", 0), ("window", "soon"), ("shed_model", "cubic"), ("tau1", 1.5)):
        with pytest.raises(ParamValidationError):
            dag.params.get_param(key).resolve(bad)
    outs = {t: {u.rsplit("/", 1)[-1] for u in us} for t, us in outlet_uris(dag).items()}
    assert outs["publish"] and outs["publish"] <= outs["in_process"]
    assert not any(outs[t] for t in ("ingest", "join", "gate"))


def test_a_failed_task_publishes_nothing_then_the_rerun_is_exact(dag, spark, tmp_path, monkeypatch):
    L, R = _gen(91, 150, 1), _gen(92, 150, 300_001)
    out = str(tmp_path / "out")
    tasks = "gap: abs(l.pm25 - r.pm25) > 50; eq: l.station = r.station AND l.pm10 > r.pm10"
    conf = {"left": str(tmp_path / "l"), "right": str(tmp_path / "r"), "output": out, "window": "25m",
            "workers": 2, "tasks": tasks}
    _append(spark, conf["left"], L, np.arange(150))
    _append(spark, conf["right"], R, np.arange(150))
    monkeypatch.setenv("SIMJOIN_FAULTS", "s2j.join")
    assert _state(dag.test(run_conf=conf)) == "failed"
    assert not os.path.exists(f"{out}/gap"), "pairs published although a task failed"
    monkeypatch.delenv("SIMJOIN_FAULTS")
    assert _state(dag.test(run_conf=conf)) == "success"
    for t in parse_tasks(tasks):
        got, _ = _pairs(f"{out}/{t.name}")
        ref = brute_force(t, _tuples(L), _tuples(R), 25 * 60_000_000)
        assert len(got) == len(set(got)) and set(got) == ref and len(ref) > 50


def test_a_bad_task_fails_the_first_task_and_writes_nothing(dag, spark, tmp_path):
    conf = {"left": str(tmp_path / "l"), "output": str(tmp_path / "out"), "tasks": "x: abs(l.pm25 - r.pm25) == 3"}
    assert _state(dag.test(run_conf=conf)) == "failed"
    assert not os.path.exists(conf["output"])
