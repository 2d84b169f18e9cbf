"""simjoin_hypercube: loads, validates its params, and dag.test() joins two Zipf streams exactly; a
join task that fails once publishes nothing, and the next run finishes the same unit."""

from __future__ import annotations

import numpy as np
import pytest

from simjoin.core.hypercube.bruteforce import equi_pairs
from tests.helpers import load_dag, outlet_uris
from tests.spark.test_hypercube import _append, _gen, _read


@pytest.fixture(scope="module")
def dag(airflow_db):
    return load_dag("hypercube", fail_fast=True)


def test_tasks_params_and_outlets(dag):
    from airflow.sdk.exceptions import ParamValidationError

    assert [t.task_id for t in dag.topological_sort()] == ["ingest", "dispatch", "join", "gate", "stats", "publish",
                                                           "in_process", "maintain"]
    # ingest chooses: one in_process task for a unit the in-process executor takes, else a task per stage
    assert dag.get_task("ingest").downstream_task_ids == {"dispatch", "in_process"}
    # the tables' maintenance follows whichever path ran (simjoin.pipeline.maintain)
    assert dag.get_task("maintain").upstream_task_ids == {"publish", "in_process"}
    assert dag.get_task("maintain").trigger_rule == "none_failed_min_one_success"
    assert "simjoin" in dag.tags and dag.doc_md and dag.params["key"] == "k" and dag.params["workers"] == 8
    for key, bad in (("workers", 0), ("window", "soon"), ("strategy", "broadcast"), ("epsilon", 1.5)):
        with pytest.raises(ParamValidationError):
            dag.params.get_param(key).resolve(bad)
    outs = {t: {u.rsplit("/", 1)[-1] for u in us} for t, us in outlet_uris(dag).items()}
    assert {"pairs", "pairs_stats"} <= outs["publish"] and outs["publish"] <= outs["in_process"]
    assert not any(outs[t] for t in ("ingest", "dispatch", "join", "gate", "stats"))


def _state(run):
    return str(run.state).lower().rsplit(".", 1)[-1]


def test_a_failed_task_publishes_nothing_then_the_rerun_is_exact(dag, spark, tmp_path, monkeypatch):
    from simjoin.spark import delta

    L, R = _gen(11, 200, 1.5, 40, 1), _gen(12, 200, 1.5, 40, 1_000_001)
    conf = {"left": str(tmp_path / "l"), "right": str(tmp_path / "r"), "output": str(tmp_path / "out"), "key": "k",
            "workers": 4}
    _append(spark, conf["left"], L, np.arange(200))
    _append(spark, conf["right"], R, np.arange(200))
    monkeypatch.setenv("SIMJOIN_FAULTS", "hypercube.join")
    assert _state(dag.test(run_conf=conf)) == "failed"
    assert not delta.table_exists(spark, conf["output"]), "pairs published although a task failed"
    monkeypatch.delenv("SIMJOIN_FAULTS")
    assert _state(dag.test(run_conf=conf)) == "success"
    t = _read(conf["output"])
    got = list(zip(t.column("left_id").to_pylist(), t.column("right_id").to_pylist(), strict=True))
    ref = equi_pairs(L["id"], L["k"], R["id"], R["k"])
    assert len(got) == len(set(got)) and set(got) == ref and len(ref) > 500
