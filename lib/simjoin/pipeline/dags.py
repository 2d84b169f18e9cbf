"""One DAG factory: a pipeline spec -> its Airflow DAG (cf. Airflow's
``dynamic_stakeholder_dag_generator`` example, where one function builds many DAGs).

- **Params** come from the config dataclass: type, enum, bounds and description per field;
  defaults from ``conf/<section>.yaml`` and the environment, table paths under the warehouse.
  The cross-field rules (e.g. an angular threshold <= 1, ``right`` != ``left``) run in every
  task through the same ``load_config`` as the CLI; a violation fails the task at once with one
  line and is not retried.
- **Tasks:** one per stage, in the spec's order, each one call of
  :func:`simjoin.pipeline.runner.run_task`; retries from the spec, and an ``execution_timeout``
  (:func:`task_timeout`, 4 h by default) so that a hung task is failed and its output's lock
  freed (the lock of a process that is gone is stale). A ``background`` gate runs
  beside the stages after it, as in one process, and every publishing stage waits for it. A
  stream pipeline whose units may run on the in-process executor (``PipelineSpec.unit_task``:
  S3J, ineq) also has an ``in_process`` task: its first task is a branch that, for a unit small
  enough for that executor, runs ``in_process`` (every later stage in one task process, as the
  CLI runs them: one process start and one Great Expectations import instead of one per stage)
  and skips the per-stage tasks; a larger unit takes the stages, each opening Spark.
- **Assets:** a stage's ``outlets`` name tables. Each is an ``AssetAlias``
  (``simjoin_<name>.<table>``) through which the task announces, when it succeeds, the Asset of
  the table it really wrote (``file://<path>`` of this run's params, not only the default path),
  so a run writing elsewhere never announces the default table. Stream pipelines announce their
  pairs only from ``publish``, after the gate.
- **Schedule:** the spec's, overridden by ``SIMJOIN_<NAME>_SCHEDULE``: ``none``, a cron
  expression or preset (``@hourly``, ``*/15 * * * *``), or ``asset`` (run whenever the Asset of
  the input table at the DAG's default path is updated: by a ``simjoin_generate`` run writing
  there, or by any producer that emits that Asset).
- **Runs:** each task passes the run's kind and its data interval to the stages: a scheduled run
  or a backfill reads batch inputs as of the end of its data interval (so a backfill or a rerun of
  a past run reproduces its output), and a scheduled or asset-triggered batch run whose inputs
  have not changed since the last published run is skipped (see ``simjoin.pipeline.runner``).
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from simjoin.pipeline.registry import get_spec
from simjoin.pipeline.spec import UNIT_TASK, PipelineSpec

__all__ = ["build_dag", "dag_params", "dag_defaults", "warehouse", "schedule_of", "alias_name", "task_timeout",
           "TASK_TIMEOUT"]

#: Each task's ``execution_timeout`` unless the spec (``task_timeout``), ``SIMJOIN_TASK_TIMEOUT``
#: or ``SIMJOIN_<NAME>_TASK_TIMEOUT`` says otherwise: far above any stage measured here (minutes
#: at a million records), short enough that a hung task does not hold its output for a day.
TASK_TIMEOUT = "4h"


def warehouse() -> str:
    return os.path.abspath(os.environ.get("SIMJOIN_WAREHOUSE", "warehouse"))


def dag_defaults(spec: PipelineSpec) -> dict[str, Any]:
    """The DAG's default parameters: the config defaults, paths under the warehouse."""
    from dataclasses import fields

    cfg = spec.load({f.name: f.metadata["dag_default"].format(warehouse=warehouse())
                     for f in spec.fields() if f.metadata.get("dag_default")})
    return {f.name: getattr(cfg, f.name) for f in fields(cfg)}


def dag_params(spec: PipelineSpec) -> dict[str, Any]:
    """``{name: Param}`` for every config field, derived from its type and ``param`` metadata."""
    from airflow.sdk import Param

    defaults = dag_defaults(spec)
    out: dict[str, Any] = {}
    for f in spec.fields():
        m = f.metadata
        tp, optional = spec.field_type(f.name)
        js = {int: "integer", float: "number", bool: "boolean", str: "string"}[tp]
        kw: dict[str, Any] = {"type": [js, "null"] if optional else js, "description": m.get("help") or None}
        if m.get("choices"):
            kw["enum"] = list(m["choices"]) + ([None] if optional else [])
        for key, js_key in (("gt", "exclusiveMinimum"), ("ge", "minimum"), ("le", "maximum"),
                            ("lt", "exclusiveMaximum")):
            if m.get(key) is not None and tp is not str:  # a duration's ge=0 is checked by its pattern
                kw[js_key] = m[key]
        if m.get("duration"):
            kw["pattern"] = r"^[0-9]+(\.[0-9]+)?(ms|s|m|h)?$"
        if m.get("pattern"):
            kw["pattern"] = f"^({m['pattern']})$"
        if m.get("io") and not optional:
            kw["minLength"] = 1
        out[f.name] = Param(defaults[f.name], **{k: v for k, v in kw.items() if v is not None})
    return out


def schedule_of(spec: PipelineSpec, defaults: dict[str, Any] | None = None) -> Any:
    """The DAG's schedule: None, a cron expression / preset, or the input table's Asset."""
    from airflow.sdk import Asset

    var = f"SIMJOIN_{spec.name.upper()}_SCHEDULE"
    raw = os.environ.get(var, spec.schedule or "none").strip()
    if raw.lower() in ("", "none", "null"):
        return None
    if raw.lower() == "asset":
        if not spec.trigger_input:
            raise ValueError(f"{var}=asset: pipeline {spec.name} has no input table: allowed none or a cron "
                             "expression")
        defaults = defaults if defaults is not None else dag_defaults(spec)
        return [Asset(uri=_uri(defaults[spec.trigger_input]))]
    if raw.startswith("@"):
        presets = ("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")
        if raw not in presets:
            raise ValueError(f"{var}={raw!r}: allowed none, asset, a cron expression or one of {', '.join(presets)}")
        return raw
    from croniter import croniter

    if not croniter.is_valid(raw):
        raise ValueError(f"{var}={raw!r} is not a cron expression: allowed none, asset, a cron expression "
                         "such as '*/15 * * * *', or a preset such as @hourly")
    return raw


def task_timeout(spec: PipelineSpec) -> dt.timedelta:
    """Each task's ``execution_timeout``: ``SIMJOIN_<NAME>_TASK_TIMEOUT``, else
    ``SIMJOIN_TASK_TIMEOUT``, else the spec's ``task_timeout``, else :data:`TASK_TIMEOUT`."""
    from simjoin.config import parse_duration

    for var in (f"SIMJOIN_{spec.name.upper()}_TASK_TIMEOUT", "SIMJOIN_TASK_TIMEOUT"):
        raw = os.environ.get(var, "").strip()
        if raw:
            break
    else:
        var, raw = f"pipeline spec {spec.name}: task_timeout", spec.task_timeout or TASK_TIMEOUT
    try:
        seconds = parse_duration(raw)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ValueError(f"{var}={raw!r}: allowed a duration above 0 such as 4h, 90m or 600s")
    return dt.timedelta(seconds=seconds)


def _uri(path: str) -> str:
    return path if "://" in path else f"file://{os.path.abspath(path)}"


def alias_name(pipeline: str, table: str) -> str:
    """The AssetAlias through which ``pipeline``'s tasks announce the table they wrote."""
    return f"simjoin_{pipeline}.{table}"


def build_dag(pipeline: str | PipelineSpec) -> Any:
    """The DAG ``simjoin_<name>`` of a pipeline."""
    from airflow.sdk import DAG, Asset, AssetAlias, task

    spec = pipeline if isinstance(pipeline, PipelineSpec) else get_spec(pipeline)
    defaults = dag_defaults(spec)
    run = spec.make_run(defaults)
    paths = run.table_paths()
    stages = " -> ".join(s.name for s in spec.stages)
    doc = f"{spec.doc}\n\nStages: {stages}. Built from the pipeline spec `{spec.name}` (simjoin.pipeline)."
    with DAG(
        dag_id=f"simjoin_{spec.name}",
        schedule=schedule_of(spec, defaults),
        start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        catchup=False,
        max_active_runs=spec.max_active_runs,
        tags=["simjoin", spec.name, spec.run_type, *spec.tags],
        default_args={"retries": spec.retries, "retry_delay": dt.timedelta(seconds=30),
                      "execution_timeout": task_timeout(spec)},
        doc_md=doc,
        params=dag_params(spec),
    ) as dag:

        def announce(params: Any, run_id: Any, outlet_events: Any, name: str, keys: tuple[str, ...]) -> None:
            if keys and outlet_events is not None:  # the tables this run really wrote
                written = spec.make_run(dict(params), run_id).table_paths()
                for key in keys:
                    outlet_events[AssetAlias(alias_name(spec.name, key))].add(
                        Asset(uri=_uri(written[key])), extra={"run_id": str(run_id), "stage": name})

        prev = None  # the last stage that is not a background gate
        pending: list[Any] = []  # background gates not yet awaited
        first: Any = None
        for st in spec.stages:
            outlets = [AssetAlias(alias_name(spec.name, k)) for k in st.outlets]

            io = "; ".join(f"{k}: {', '.join(f'`{paths.get(t, t)}`' for t in v)}"
                           for k, v in (("reads", st.reads), ("writes", st.writes)) if v)
            kind = " Quality gate: writes nothing." if st.gate else ""
            doc_md = f"{st.doc}{kind}\n\n{io} (at the default paths)"
            if prev is None and spec.unit_task:  # the first stage chooses: one in-process task or the stages
                doc_md += (f"\n\nThen runs `{UNIT_TASK}` for a unit small enough for one process, else "
                           f"`{spec.stages[1].name}` and the stages after it.")

                @task.branch(task_id=st.name, outlets=outlets, doc_md=doc_md)
                def _first(params: Any = None, run_id: Any = None, outlet_events: Any = None, _name: str = st.name,
                           _outlets: tuple[str, ...] = st.outlets) -> list[str]:
                    from simjoin.pipeline.runner import next_tasks, run_task

                    out = run_task(spec.name, _name, dict(params), run_id)
                    announce(params, run_id, outlet_events, _name, _outlets)
                    return next_tasks(spec, dict(params), run_id, out)

                t = first = _first()
                prev = t
                continue

            @task(task_id=st.name, outlets=outlets, doc_md=doc_md)
            def _stage(params: Any = None, run_id: Any = None, outlet_events: Any = None, _name: str = st.name,
                       _outlets: tuple[str, ...] = st.outlets) -> dict[str, Any]:
                from simjoin.pipeline.runner import run_task

                out = run_task(spec.name, _name, dict(params), run_id)
                announce(params, run_id, outlet_events, _name, _outlets)
                return out

            t = _stage()
            if prev is not None:
                prev >> t
            if st.publishes:  # as in one process: every background gate passes before a publish
                for g in pending:
                    g >> t
                pending.clear()
            if st.background:  # runs beside the following stages, as in one process
                pending.append(t)
                continue
            prev = t
        if first is not None:  # every later stage of a small unit, in one task (PipelineSpec.unit_task)
            keys = tuple(k for st in spec.stages[1:] for k in st.outlets)

            @task(task_id=UNIT_TASK, outlets=[AssetAlias(alias_name(spec.name, k)) for k in keys],
                  doc_md=f"Stages {', '.join(s.name for s in spec.stages[1:])} of a small unit, in this one task "
                         "as a CLI run has them (the per-stage tasks are skipped): one task process instead of "
                         f"{len(spec.stages) - 1}. The same tables, gate and exactly-once publish.")
            def _unit(params: Any = None, run_id: Any = None, outlet_events: Any = None) -> dict[str, Any]:
                from simjoin.pipeline.runner import run_task

                out = run_task(spec.name, UNIT_TASK, dict(params), run_id)
                announce(params, run_id, outlet_events, UNIT_TASK, keys)
                return out

            unit_t = _unit()
            first >> unit_t
        if spec.run_type == "tool":  # a tool's tables belong to whoever reads them
            return dag
        # the tables' maintenance, when due (simjoin.pipeline.maintain): after whichever path ran
        from simjoin.pipeline.maintain import MAINTAIN_TASK

        @task(task_id=MAINTAIN_TASK, trigger_rule="none_failed_min_one_success",
              doc_md="Compacts small files, vacuums, checkpoints and cleans up the Delta log of every table the "
                     "pipeline owns for this run's output, and the warehouse's task-timing table: a stream's once "
                     "`SIMJOIN_MAINTAIN_EVERY` units (default 100) were published since the last time, a batch "
                     "pipeline's after every run. Holds the output's lock; never changes what a reader sees.")
        def _maintain(params: Any = None, run_id: Any = None) -> dict[str, Any]:
            from simjoin.pipeline.runner import run_task

            return run_task(spec.name, MAINTAIN_TASK, dict(params), run_id)

        maintain_t = _maintain()
        for t in [prev, *pending] + ([unit_t] if first is not None else []):  # type: ignore[possibly-undefined]
            if t is not None:
                t >> maintain_t
    return dag
