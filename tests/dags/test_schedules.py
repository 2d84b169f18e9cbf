"""Schedules, Assets, reruns and backfills, for every pipeline from its spec.

- Every pipeline's DAG takes a cron schedule or preset, or its input table's Asset, from
  ``SIMJOIN_<NAME>_SCHEDULE``; anything else is refused with the allowed forms.
- A task announces the Asset of the table it really wrote (through its AssetAlias), so a
  ``simjoin_generate`` run writing a join's input starts that join.
- A batch run reads its inputs as of its pins: an Airflow rerun of a past run, or a backfill for a
  past data interval, reproduces its output after the input moved on; a scheduled run with no
  new input is skipped.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

from simjoin.pipeline.registry import specs
from tests.helpers import load_dag

# the shipped pipelines (a test module may register a toy spec before this one is collected)
PIPELINES = sorted(n for n, s in specs().items() if s.run_type != "tool" and s.run_class.startswith("jobs."))


@pytest.mark.parametrize("name", PIPELINES)
def test_every_pipeline_takes_a_cron_or_its_input_asset(name, monkeypatch, airflow_db):
    from simjoin.pipeline.dags import build_dag, dag_defaults

    spec = specs()[name]
    var = f"SIMJOIN_{name.upper()}_SCHEDULE"
    monkeypatch.setenv(var, "*/15 * * * *")
    assert build_dag(spec).timetable.expression == "*/15 * * * *"
    monkeypatch.setenv(var, "@hourly")
    assert build_dag(spec).timetable.expression in ("@hourly", "0 * * * *")
    monkeypatch.setenv(var, "asset")
    cond = build_dag(spec).timetable.asset_condition
    assert [a.uri for a in cond.objects] == ["file://" + dag_defaults(spec)[spec.trigger_input]]
    monkeypatch.setenv(var, "every five minutes")
    with pytest.raises(ValueError, match=f"{var}='every five minutes' is not a cron expression: allowed"):
        build_dag(spec)
    monkeypatch.setenv(var, "@fortnightly")
    with pytest.raises(ValueError, match="allowed none, asset, a cron expression or one of"):
        build_dag(spec)


def test_outlets_announce_the_table_really_written(airflow_db, spark, tmp_path):
    """generate writes where its conf says; the Asset event names that path, via the alias."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    from simjoin.pipeline.dags import alias_name

    dag = load_dag("generate", fail_fast=True)
    assert {o.name for t in dag.tasks for o in t.outlets} == {alias_name("generate", "out")}
    out = str(tmp_path / "sets_for_ssj")
    run = dag.test(run_conf={"kind": "sets", "out": out, "rows": 50, "seed": 2})
    assert str(run.state).endswith("success")
    with create_session() as session:
        uris = [u for (u,) in session.query(AssetModel.uri).join(AssetEvent, AssetEvent.asset_id == AssetModel.id)]
    assert f"file://{out}" in uris


def _ssj_stage_run(spark, params, run_id, trigger, as_of=None):
    from simjoin.pipeline.runner import run_stage
    from simjoin.pipeline.spec import NothingNew

    out = {}
    for st in specs()["ssj"].stages:
        try:
            out[st.name] = run_stage("ssj", st.name, params, run_id, spark=spark, trigger=trigger, as_of=as_of)
        except NothingNew:
            return None
    return out


def _partition(path, run_id):
    from deltalake import DeltaTable

    t = DeltaTable(path).to_pandas()
    t = t[t["run_id"] == run_id]
    return sorted(zip(t["left_id"], t["right_id"], t["similarity"].round(12)))


def test_rerun_and_backfill_reproduce_a_past_run_and_scheduled_runs_skip_when_nothing_is_new(spark, tmp_path):
    from simjoin.spark import delta

    src, out = str(tmp_path / "sets"), str(tmp_path / "pairs")
    rows = [(i, f"a b c d e{i % 3} f{i % 2}") for i in range(30)]
    delta.overwrite(spark.createDataFrame(rows, "id long, text string"), src)
    time.sleep(1.1)
    t1 = dt.datetime.now(dt.UTC)
    time.sleep(1.1)
    params = {"input": src, "output": out, "threshold": 0.6}

    first = _ssj_stage_run(spark, params, "scheduled__1", "scheduled", as_of=t1)
    assert first is not None
    before = _partition(out, "scheduled__1")
    assert before and first["publish"]["pairs"] == len(before)

    # the next scheduled run: nothing new -> skipped, nothing written
    assert _ssj_stage_run(spark, params, "scheduled__2", "scheduled", as_of=dt.datetime.now(dt.UTC)) is None
    assert _partition(out, "scheduled__2") == []

    # the input moves on: more near-duplicate records
    more = [(100 + i, f"a b c d e{i % 3} f{i % 2}") for i in range(20)]
    delta.append_idempotent(spark.createDataFrame(more, "id long, text string"), src, "test", 1)

    # an Airflow rerun of the past run reads the versions it pinned: the same output
    _ssj_stage_run(spark, params, "scheduled__1", "scheduled", as_of=t1)
    assert _partition(out, "scheduled__1") == before
    # a backfill of that past interval under a new run id reads the input as of then: the same pairs
    _ssj_stage_run(spark, params, "backfill__1", "backfill", as_of=t1)
    assert _partition(out, "backfill__1") == before
    # a scheduled run now sees the new rows
    # a scheduled run now sees the new rows, and joins only them against all (one task per stage)
    now = _ssj_stage_run(spark, params, "scheduled__3", "scheduled", as_of=dt.datetime.now(dt.UTC))
    assert now is not None and len(_partition(out, "scheduled__3")) > len(before)
    assert now["tokenize"]["mode"] == "incremental" and now["tokenize"]["new_records"] == len(more)
    assert now["publish"]["base_run"] in ("scheduled__1", "backfill__1")
    full = _ssj_stage_run(spark, {**params, "incremental": False}, "manual__3", "manual")
    assert full is not None and full["tokenize"]["mode"] == "full"
    assert _partition(out, "scheduled__3") == _partition(out, "manual__3")
    # a backfill before the input existed: one clear line
    with pytest.raises(ValueError, match=r"has no version at or before .*allowed a data interval that ends after"):
        _ssj_stage_run(spark, params, "backfill__0", "backfill", as_of=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))


def test_run_kind_from_the_task_context():
    from simjoin.pipeline.runner import run_kind

    class DagRun:
        def __init__(self, run_type):
            self.run_type = run_type

    end = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    assert run_kind({"dag_run": DagRun("scheduled"), "data_interval_end": end}) == ("scheduled", end)
    assert run_kind({"dag_run": DagRun("backfill"), "data_interval_end": end}) == ("backfill", end)
    assert run_kind({"dag_run": DagRun("manual"), "data_interval_end": end}) == ("manual", None)
    assert run_kind({"dag_run": DagRun("asset_triggered"), "data_interval_end": end}) == ("asset_triggered", None)
