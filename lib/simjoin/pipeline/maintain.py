"""A pipeline's table maintenance, on the platform's schedule (``simjoin.runtime.maintenance`` does
the work): ``simjoin maintain --output PATH``; a stream run (CLI or ``--follow``) after every
``--maintain-every`` units (``SIMJOIN_MAINTAIN_EVERY``, default 100); and each DAG's last task,
``maintain``, which maintains a stream's tables once that many units were published since the
last maintenance, and a batch pipeline's after every run. Each holds the output's lock."""

from __future__ import annotations

from typing import Any

from simjoin.log import get_logger
from simjoin.pipeline.lock import output_lock, output_of
from simjoin.pipeline.registry import get_spec
from simjoin.pipeline.spec import PipelineSpec, Run, resolve

__all__ = ["MAINTAIN_TASK", "by_part", "rules", "maintain", "after_unit", "run_maintain_task", "layout_of"]

log = get_logger("simjoin.maintain")

#: the DAG task that maintains a pipeline's tables after its stages
MAINTAIN_TASK = "maintain"


def by_part(pipeline: str | PipelineSpec | None) -> tuple[str, ...]:
    """The names of the pipeline's state tables written one part per file (never compacted)."""
    if pipeline is None:
        return ()
    spec = pipeline if isinstance(pipeline, PipelineSpec) else get_spec(pipeline)
    cls = resolve(spec.run_class)
    state = getattr(cls, "STATE", {})
    return tuple(state.get(k, k) for k in getattr(cls, "STATE_BY_PART", ()))


def rules(pipeline: str | PipelineSpec | None) -> dict[str, str]:
    """The state tables' retention rules (``StreamRun.STATE_RETENTION``), by table name."""
    if pipeline is None:
        return {}
    spec = pipeline if isinstance(pipeline, PipelineSpec) else get_spec(pipeline)
    cls = resolve(spec.run_class)
    state = getattr(cls, "STATE", {})
    return {state.get(k, k): r for k, r in getattr(cls, "STATE_RETENTION", {}).items()}


def _maintain(output: str, pipeline: str | PipelineSpec | None, retention: str | float | None) -> Any:
    """The pipeline's own retention rule (``PipelineSpec.retain``: ssj's runs), then every table."""
    from simjoin.runtime import maintenance, manifest

    spec = None
    if pipeline is not None:
        try:
            spec = pipeline if isinstance(pipeline, PipelineSpec) else get_spec(pipeline)
        except (KeyError, ValueError):
            spec = None
    layout = layout_of(spec, output)
    manifest.of(output, layout, save=True)  # an output of an earlier release gets its manifest first
    if spec is not None and spec.retain and not maintenance.unit_open(output):  # never under an open unit
        resolve(spec.retain)(output, maintenance.tables_of(output, layout))
    return maintenance.maintain_output(output, retention, by_part=by_part(spec) if spec else (),
                                       rules=rules(spec) if spec else None, layout=layout)


def layout_of(spec: PipelineSpec | None, output: str) -> dict[str, str] | None:
    """Role -> path of every part the pipeline writes for ``output`` (its run class's
    ``tables_at(output).layout()``; None: it names none beyond its output): what an output
    manifest records (``simjoin.runtime.manifest``), and what an output of an earlier release
    is migrated with."""
    if spec is None:
        return None
    at = getattr(resolve(spec.run_class), "tables_at", None)
    t = at(output) if at is not None else None
    return dict(t.layout()) if t is not None and hasattr(t, "layout") else None


def maintain(output: str, retention: str | float | None = None, lock: bool = True,
             run_id: str = "maintain") -> Any:
    """Maintain every table of ``output`` (``simjoin maintain``); with ``lock``, under the
    output's lock (a run writing it now makes this refused with one line)."""
    from contextlib import nullcontext

    from simjoin.runtime import maintenance

    pipeline = maintenance.pipeline_of(output)
    with output_lock(output, run_id, "maintenance") if lock else nullcontext():
        return _maintain(output, pipeline, retention)


def after_unit(run: Run, unit: int | None, every: int | None = None) -> Any:
    """In a stream run that holds the output's lock, after ``unit`` was published: maintain the
    output's tables when due. A failure is logged and left for the next due unit: the unit is
    published, and maintenance never changes what a reader sees."""
    from simjoin.runtime import maintenance

    if run.spec.run_type != "stream" or unit is None:
        return None
    out = output_of(run)
    n = maintenance.every_units(every if every is not None else getattr(run, "maintain_every", None))
    if out is None or not maintenance.due(out, unit, n):
        return None
    try:
        res = _maintain(out, run.spec, None)
        _timing()
        return res
    except Exception as e:  # logged; the next due unit tries again
        log.warning("%s: maintenance after unit %s failed (%s: %s); the next due unit tries again",
                    run.spec.name, unit, type(e).__name__, e)
        return None


def _timing() -> None:
    """The warehouse's task-timing table (shared by every pipeline; its rows kept 30 days)."""
    from simjoin.pipeline.timing import timing_path
    from simjoin.runtime import maintenance

    try:
        maintenance.maintain_timing(timing_path())
    except Exception as e:  # another process's append may conflict: the next time
        log.warning("maintenance of the task-timing table failed (%s: %s); the next time tries again",
                    type(e).__name__, e)


def run_maintain_task(pipeline: str | PipelineSpec, params: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The DAG's ``maintain`` task: a stream's tables when due (the units published since the last
    maintenance), a batch pipeline's after every run; under the output's lock."""
    from simjoin.runtime import maintenance

    spec = pipeline if isinstance(pipeline, PipelineSpec) else get_spec(pipeline)
    run = spec.make_run(params, run_id)
    out = output_of(run)
    if out is None:
        return {"maintained": False, "why": "no local output"}
    import os

    if not os.path.exists(out):
        return {"maintained": False, "why": "no output yet"}
    if maintenance.pipeline_of(out) is None:
        log.info("%s: no table a simjoin pipeline marked as its own at %s: nothing to maintain", spec.name, out)
        return {"maintained": False, "why": "no table of the pipeline"}
    with output_lock(out, run.run_id, f"task {MAINTAIN_TASK}"):
        if spec.run_type == "stream":
            unit = maintenance.last_unit(out)
            n = maintenance.every_units()
            if not maintenance.due(out, unit, n):
                log.info("%s: maintenance not due (unit %s, every %d units)", spec.name, unit, n)
                return {"maintained": False, "unit": unit, "every": n}
        res = _maintain(out, spec, None)
    _timing()
    return {"maintained": True, "summary": res.summary(), "tables": len(res.tables),
            "files_after": sum(t.files_after for t in res.tables), "seconds": res.seconds}
