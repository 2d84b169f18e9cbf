"""The one task entry (:func:`run_stage`) and the in-process runner the CLI uses (:func:`run_pipeline`).

Both run the very stage functions a spec names, with one signature, ``fn(ctx) -> dict`` (``simjoin.pipeline.context``).
In one process the stages hand DataFrames to each other through ``run.frames``; in Airflow each
task reads its inputs from Delta. Before the first stage of a run, the overwrite guard refuses
an output path equal to an input, or holding a Delta table of another schema.

One run per output at a time: :func:`run_pipeline` holds the output's lock
(:mod:`simjoin.pipeline.lock`) for the whole run, :func:`run_stage` for its stage (gates, which
write nothing, take none); another run on the same output is refused with one line.

Fault injection for the reliability tests: ``SIMJOIN_FAULTS="s3j.gate,s3j.stats"`` makes those
stages raise :class:`simjoin.faults.InjectedFault` right after their body ran (its writes done);
``s3j.join.write@1`` right after the stage's first Delta commit, ``s3j.join.rows@5`` inside the
Spark job of its next write (:mod:`simjoin.faults`). Each stage runs as the faults' current stage.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from typing import Any

from simjoin.config import ConfigError
from simjoin.faults import InjectedFault, current_stage, maybe_fail
from simjoin.log import get_logger
from simjoin.log import stage as log_stage
from simjoin.pipeline.lock import OutputLocked, output_lock, output_of
from simjoin.pipeline.maintain import MAINTAIN_TASK
from simjoin.pipeline.registry import get_spec
from simjoin.pipeline.spec import TRIGGERS, UNIT_TASK, NothingNew, PipelineSpec, Run, Stage

__all__ = ["run_stage", "run_unit_task", "next_tasks", "run_task", "run_pipeline", "follow_pipeline", "Follow",
           "guard_outputs", "InjectedFault", "one_line", "VALIDATION_ERRORS"]

log = get_logger("simjoin.pipeline")


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items() if not _is_frame(x)}
    if isinstance(v, (list, tuple, set)):
        return [_jsonable(x) for x in (sorted(v) if isinstance(v, set) else v)]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


def _is_frame(v: Any) -> bool:
    return type(v).__name__ == "DataFrame"


def guard_outputs(spark: Any, run: Run) -> None:
    """Refuse, before anything is written, an output that is an input or holds a foreign table."""
    from simjoin.spark import delta

    inputs = [_norm(p) for p in run.inputs()]
    paths = run.table_paths()
    for key, cols in run.output_columns().items():
        path = paths[key]
        if _norm(path) in inputs:
            raise ValueError(f"output {path} is also an input of this run: allowed an output path that is "
                             "not an input (it would be overwritten)")
        if delta.table_exists(spark, path):
            have = delta.columns(spark, path)
            if set(have) != set(cols):
                raise ValueError(f"{path} holds a Delta table with columns {have}, not a simjoin {run.pipeline} "
                                 f"{key} table ({', '.join(cols)}): allowed a new path or one written by "
                                 f"simjoin {run.pipeline}")


def claim_output(run: Run) -> Any:
    """The output's manifest (``simjoin.runtime.manifest``), checked before anything is written: an
    output moved or copied, or one another pipeline wrote, is refused in one line; an output of an
    earlier release gets its manifest now. A batch pipeline's manifest is written here, at its
    first run, with every part of its layout that is not there yet or is a Delta table of this
    pipeline (its owner mark, or none: a table Spark's writer made); a part that holds anything
    else is refused (simjoin never takes over a foreign file). A stream's is written by its engine
    when it creates the output's checkpoint, after the same checks."""
    from simjoin.pipeline.maintain import layout_of
    from simjoin.runtime import manifest

    out = output_of(run)
    layout = layout_of(run.spec, out) if out is not None and "://" not in out else None
    if out is None or layout is None:  # a tool (generate) or a table that is not local: no layout to own
        return None
    m = manifest.of(out, layout, save=True)
    if m is not None:
        if m.pipeline and m.pipeline != run.spec.name:
            raise ValueError(f"--output {out} belongs to simjoin {m.pipeline} (its manifest {m.path}): allowed: "
                             f"a new --output for {run.spec.name}")
        return m
    if run.spec.run_type == "stream":
        return None
    owned = []
    for role, p in layout.items():
        if role == "manifest":
            continue
        if os.path.isdir(os.path.join(p, "_delta_log")):
            # a Delta table: the pipeline's own (its owner mark; unmarked: written by Spark's writer
            # before manifests, its columns checked by guard_outputs), never another pipeline's
            who = manifest.table_owner(p)
            if who is not None and who != run.spec.name:
                raise ValueError(f"{p} is a table of simjoin {who}, not of {run.spec.name} for {out}: allowed: a new "
                                 "--output")
        elif os.path.exists(p) and not (os.path.isdir(p) and not os.listdir(p)):
            raise ValueError(f"{p} already exists and was not written by simjoin {run.spec.name} for {out}: "
                             "allowed: a new --output, or move it away yourself")
        owned.append(p)
    return manifest.write(manifest.create(run.spec.name, out, layout, owned))


@contextmanager
def claimed(run: Run) -> Iterator[Any]:
    """:func:`claim_output` around the work that first writes the output: a manifest this claim
    wrote is removed again when that work fails before any table it owns exists (a run refused
    for its input leaves nothing behind)."""
    from simjoin.runtime import manifest

    out = output_of(run)
    had = out is not None and "://" not in out and manifest.locate(out) is not None
    m = claim_output(run)
    try:
        yield m
    except BaseException:
        if m is not None and not had and not any(os.path.exists(p) for p in m.owned):
            manifest.remove(m)
        raise


def _norm(p: str) -> str:
    return p if "://" in p else os.path.normpath(os.path.abspath(p.rstrip("/")))


def run_stage(pipeline: str | PipelineSpec, stage: str, params: dict[str, Any], run_id: str = "cli",
              spark: Any = None, attempt: int = 1, mode: str = "cli", trigger: str = "cli",
              as_of: Any = None) -> dict[str, Any]:
    """One stage of one run from (DAG) params: validate them, run the stage, return an XCom dict.
    Logs and records (:mod:`simjoin.pipeline.timing`) the process, Spark start-up and work seconds."""
    from simjoin.pipeline.timing import TaskTiming, process_age
    from simjoin.spark.session import jobs_started

    spec = pipeline if isinstance(pipeline, PipelineSpec) else get_spec(pipeline)
    st = spec.stage(stage)
    timing = TaskTiming(run_id, spec.name, st.name, mode, attempt=attempt, process_s=process_age())
    if st.gate and spec.unit_task:  # an Arrow gate runs in the warm gate server
        from simjoin.quality.gates import preload

        preload(process=True)
    run = spec.make_run(params, run_id, trigger=trigger, as_of=as_of)
    timing.output, timing.invocation = _abs_output(run), run_id
    t0 = time.perf_counter()
    if spark is None:  # connected (or started) when a step first needs Spark: maybe never
        from simjoin.spark.session import lazy_spark

        spark = lazy_spark(connect_now=False)
    timing.startup_s = time.perf_counter() - t0
    timing.spark = _spark_kind(spark)
    t1 = time.perf_counter()
    try:
        lock = nullcontext() if st.gate else output_lock(output_of(run), run.run_id, f"stage {st.name}")
        with lock, current_stage(f"{spec.name}.{st.name}"):
            first = spec.stages[0].name == st.name
            if first:
                guard_outputs(spark, run)
            jobs0 = jobs_started(spark)
            with claimed(run) if first else nullcontext(), log_stage(f"{spec.name} {st.name}", log):
                out = call_stage(st, spark, run)
            timing.count(out)
            timing.spark_jobs = _jobs_since(spark, jobs0)
            maybe_fail(f"{spec.name}.{st.name}")
    except BaseException:
        timing.ok = False
        raise
    finally:
        _finish(timing, spark, t1)
    return _jsonable(out)  # type: ignore[no-any-return]


def _finish(timing: Any, spark: Any, t1: float) -> None:
    """Log and record a task's timing; a session started during the work counts as start-up."""
    from simjoin.pipeline.timing import record

    timing.work_s = time.perf_counter() - t1
    timing.spark = _spark_kind(spark)  # at the end: a lazy session the work started, or none
    if timing.spark != "none" and getattr(spark, "startup_s", 0.0):  # a lazy session the work started
        timing.startup_s += float(spark.startup_s)
        timing.work_s = max(0.0, timing.work_s - float(spark.startup_s))
    log.info("task %s %s: process start %.1fs, Spark start-up %.2fs (%s), work %.1fs", timing.pipeline,
             timing.stage, timing.process_s, timing.startup_s, timing.spark, timing.work_s)
    record([timing])


def _abs_output(run: Run) -> str | None:
    out = output_of(run)
    return out if out is None or "://" in out else os.path.abspath(out)


def _jobs_since(spark: Any, before: int | None) -> int | None:
    """The Spark jobs this process started since it had started ``before`` (None: not known)."""
    from simjoin.spark.session import jobs_started

    now = jobs_started(spark)
    return None if now is None or before is None else now - before


def _spark_kind(spark: Any) -> str:
    """``warm`` (Spark Connect), ``local`` (a JVM of this process) or ``none``: a lazy session
    nothing has started yet (an in-process unit, a refused input)."""
    from simjoin.spark.session import is_remote

    if not getattr(spark, "started", True):
        return "none"
    return "warm" if is_remote(spark) else "local"


#: Errors a user causes with bad params or inputs: retrying cannot help.
VALIDATION_ERRORS: tuple[type[BaseException], ...] = (ConfigError, ValueError, FileNotFoundError)


def run_unit_task(pipeline: str | PipelineSpec, params: dict[str, Any], run_id: str = "cli", spark: Any = None,
                  attempt: int = 1, mode: str = "cli", trigger: str = "cli", as_of: Any = None) -> dict[str, Any]:
    """Every stage after the first, in this process, for the unit the first stage staged: what
    the Airflow task ``in_process`` (:data:`UNIT_TASK`) runs when :func:`next_tasks` chose it.
    The stages run as in a CLI run, the gate beside the stages after it; a unit that turns out
    to need Spark (a table deltalake cannot read) runs its stages on the Spark executor here.
    Holds the output's lock; returns the results by stage name."""
    from simjoin.pipeline.timing import TaskTiming, process_age
    from simjoin.quality.gates import preload

    spec = pipeline if isinstance(pipeline, PipelineSpec) else get_spec(pipeline)
    if not spec.unit_task:
        raise ValueError(f"pipeline {spec.name} has no {UNIT_TASK} task: allowed only for stream pipelines whose "
                         "units may run in process")
    # the gate runs in the warm gate server (started if none runs): this task never imports
    # Great Expectations
    preload(process=True)
    timing = TaskTiming(run_id, spec.name, UNIT_TASK, mode, attempt=attempt, process_s=process_age())
    run = spec.make_run(params, run_id, trigger=trigger, as_of=as_of)
    run.in_process = True  # the stages hand each other their frames, as in one CLI process
    timing.output, timing.invocation = _abs_output(run), run_id
    if spark is None:
        from simjoin.spark.session import lazy_spark

        spark = lazy_spark(connect_now=False)
    timing.spark = _spark_kind(spark)
    t1 = time.perf_counter()
    timed: list[Any] = []
    try:
        with output_lock(output_of(run), run.run_id, f"task {UNIT_TASK}"), \
                current_stage(f"{spec.name}.{UNIT_TASK}"):
            done = _run_stages(spark, run, spec.stages[1:], timed, fault_points=True)
            last = done.get(spec.stages[-1].name)
            timing.count(last if isinstance(last, dict) else {})
            jobs = [t[3] for t in timed]
            timing.spark_jobs = None if None in jobs else sum(jobs)
            maybe_fail(f"{spec.name}.{UNIT_TASK}")
    except BaseException:
        timing.ok = False
        raise
    finally:
        if timed:
            log.info("task %s %s: %s", spec.name, UNIT_TASK, ", ".join(f"{n} {sec:.2f}s" for n, sec, *_ in timed))
        _finish(timing, spark, t1)
    return _jsonable(done)  # type: ignore[no-any-return]


def next_tasks(pipeline: str | PipelineSpec, params: dict[str, Any], run_id: str, first: dict[str, Any]) -> list[str]:
    """The Airflow tasks to run after the first stage, from its result: :data:`UNIT_TASK` when
    the unit it staged has at most ``SIMJOIN_LOCAL_UNIT_ROWS`` records (the in-process
    executor's bound), else the second stage's (each stage its own task, on Spark)."""
    from simjoin.pipeline.stream import in_process_rows

    spec = pipeline if isinstance(pipeline, PipelineSpec) else get_spec(pipeline)
    rows, limit = first.get("unit_rows"), in_process_rows()
    if (spec.unit_task and first.get("unit") is not None and isinstance(rows, int) and not isinstance(rows, bool)
            and limit > 0 and rows <= limit):
        log.info("%s: unit %s (%s rows) runs its later stages in one task, %s", spec.name, first.get("unit"),
                 first.get("unit_rows"), UNIT_TASK)
        return [UNIT_TASK]
    return [spec.stages[1].name]


def run_task(pipeline: str, stage: str, params: dict[str, Any], run_id: str) -> dict[str, Any]:
    """Airflow's task body: a validation error fails the task at once (no retry), with one line.
    ``stage`` is a stage's name, or :data:`UNIT_TASK` (:func:`run_unit_task`)."""
    attempt, trigger, as_of = 1, "manual", None
    try:
        from airflow.sdk import get_current_context

        ctx = get_current_context()
        attempt = int(ctx["ti"].try_number or 1)
        trigger, as_of = run_kind(ctx)
    except Exception:  # outside a running task (tests calling it directly)
        pass
    try:
        if stage == MAINTAIN_TASK:
            from simjoin.pipeline.maintain import run_maintain_task

            return run_maintain_task(pipeline, params, run_id)
        if stage == UNIT_TASK:
            return run_unit_task(pipeline, params, run_id, attempt=attempt, mode="airflow", trigger=trigger,
                                 as_of=as_of)
        return run_stage(pipeline, stage, params, run_id, attempt=attempt, mode="airflow", trigger=trigger,
                         as_of=as_of)
    except NothingNew as e:
        from airflow.sdk.exceptions import AirflowSkipException

        log.info("%s", e)
        raise AirflowSkipException(str(e)) from e
    except OutputLocked:  # another run writes the output now: a retry may find it free
        raise
    except VALIDATION_ERRORS as e:
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException(one_line(e)) from e
    finally:
        if "pyspark" in sys.modules:  # a task that never loaded Spark has no session to end
            from simjoin.spark.session import release_warm_session

            release_warm_session()


def run_kind(ctx: Any) -> tuple[str, Any]:
    """(trigger, as_of) of an Airflow task's DAG run: its ``run_type`` and, for a scheduled run or
    a backfill, the end of its data interval (the inputs are read as of then); else None (latest)."""
    dag_run = ctx.get("dag_run")
    kind = str(getattr(dag_run, "run_type", "manual") or "manual").lower().rsplit(".", 1)[-1]
    trigger = kind if kind in TRIGGERS else "manual"
    end = ctx.get("data_interval_end") if trigger in ("scheduled", "backfill") else None
    return trigger, end


def one_line(e: BaseException) -> str:
    """The error as one line, with Spark's wrapping removed."""
    msg = str(e).strip() or type(e).__name__
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    # A Python error raised in a Spark task ends with "<Type>: <message>" on its own line.
    for ln in reversed(lines):
        for tag in ("ValueError: ", "ConfigError: ", "FileNotFoundError: ", "CheckpointMismatch: ",
                    "GateFailed: ", "AssertionError: "):
            if ln.startswith(tag) and len(lines) > 1:
                return ln[len(tag):][:800]
    if type(e).__name__ == "GateFailed":  # its failures, one per line, joined
        return "; ".join(lines)[:2000]
    if len(lines) > 1 and ("Traceback" in msg or "Python worker" in lines[0]):
        # any other Python error of a Spark task (PythonException): its own last line, not the wrapper's
        for ln in reversed(lines):
            if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)(: |$)", ln):
                return f"{ln} (in a Spark task)"[:800]
    first = lines[0] if lines else msg
    if isinstance(e, (ValueError, FileNotFoundError)):
        return first[:800]
    return f"{type(e).__name__}: {first}"[:800]


def run_pipeline(spark: Any, run: Run) -> dict[str, Any]:
    """Every stage of ``run``'s pipeline in this process, in order; returns the merged results
    (``results[stage]``) and ``seconds``. Background gates run beside the following stages and
    must pass before a publishing stage. A stream pipeline that resumed an open unit runs
    again, so that what arrived since is joined too, and again while a unit left input waiting
    (``--max-records-per-unit``). Holds the output's lock throughout."""
    with output_lock(output_of(run), run.run_id, "the whole run"), _stop_between_units(run) as stop:
        return _run_pipeline(spark, run, stop)


@contextmanager
def _stop_between_units(run: Run) -> Iterator[threading.Event]:
    """For a stream run in the main thread: SIGINT and SIGTERM stop it between units (the unit in
    progress is published, the next is not started; a restart resumes), so a backlog of many units
    stops within one unit's time. A second signal stops at once (a stop mid-unit loses nothing
    either: the unit is staged again at the restart)."""
    import signal

    stop = threading.Event()
    if run.spec.run_type != "stream" or threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous: dict[int, Any] = {}

    def _on(sig: int, frame: Any) -> None:
        if stop.is_set():  # the second signal: as if there were no handler
            signal.signal(sig, previous.get(sig, signal.SIG_DFL))
            os.kill(os.getpid(), sig)
            return
        log.info("%s: %s: stopping after the unit in progress (a restart resumes)", run.spec.name,
                 signal.Signals(sig).name)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, _on)
    try:
        yield stop
    finally:
        for num, h in previous.items():
            signal.signal(num, h)


def _run_pipeline(spark: Any, run: Run, stop: threading.Event | None = None) -> dict[str, Any]:
    from simjoin.pipeline.timing import process_age
    from simjoin.spark.session import startup_seconds

    t0 = time.perf_counter()
    results: dict[str, Any] = {"rounds": []}
    timings = {"startup_s": startup_seconds() or 0.0, "process_s": process_age() - (startup_seconds() or 0.0)}
    run.in_process = True
    guard_outputs(spark, run)
    with claimed(run):
        return _run_claimed(spark, run, stop, t0, results, timings)


def _run_claimed(spark: Any, run: Run, stop: threading.Event | None, t0: float, results: dict[str, Any],
                 timings: dict[str, float]) -> dict[str, Any]:
    spec = run.spec
    if run.reset:
        reset = getattr(run, "reset_tables", None)
        if reset is None:
            raise ValueError(f"--reset: pipeline {spec.name} has no state to reset")
        results["reset"] = reset(spark)
    timed: list[Any] = []
    while True:  # an open unit resumed, or a backlog over --max-records-per-unit: the next unit
        done = _run_stages(spark, run, spec.stages, timed)
        results["rounds"].append(done)
        _maintain_after(run, done)
        first = done.get(spec.stages[0].name) or {}
        if not (isinstance(first, dict) and (first.get("resumed") or first.get("more"))):
            break
        if stop is not None and stop.is_set():
            log.info("%s: stopped between units; %s (a restart resumes)", spec.name,
                     "more input waits" if first.get("more") else "the next unit was not started")
            results["stopped"] = True
            break
        if first.get("more"):
            log.info("%s: more input waits than one unit takes: the next unit", spec.name)
    results["seconds"] = time.perf_counter() - t0
    _record_cli(run, timed, timings)
    return results


def _maintain_after(run: Run, done: dict[str, Any]) -> None:
    """A stream run's tables maintained when due, once a unit is published (its last stage)."""
    if run.spec.run_type != "stream":
        return
    last = done.get(run.spec.stages[-1].name)
    unit = last.get("unit") if isinstance(last, dict) else None
    if isinstance(unit, int) and not isinstance(unit, bool):
        from simjoin.pipeline.maintain import after_unit

        after_unit(run, unit)


def _record_cli(run: Run, timed: list[Any], timings: dict[str, float] | None) -> None:
    from simjoin.pipeline.timing import TaskTiming, record

    invocation = f"{run.run_id}@{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{os.getpid()}"
    rows = []
    for name, sec, res, jobs, kind in timed:  # kind: the Spark a stage had at its end (none: no JVM yet)
        row = TaskTiming(run.run_id, run.spec.name, name, "cli", kind, work_s=sec, output=_abs_output(run),
                         invocation=invocation, spark_jobs=jobs)
        row.count(res)
        rows.append(row)
    if rows and timings:  # the process and Spark start-up are paid once, by the first stage
        rows[0].process_s, rows[0].startup_s = max(0.0, timings["process_s"]), timings["startup_s"]
    record(rows)


def _run_stages(spark: Any, run: Run, stages: Any, timed: list[Any], fault_points: bool = False) -> dict[str, Any]:
    """``stages`` in order in this process (background gates beside the next stages, done
    before a publishing stage); the frames they handed each other are dropped at the end."""
    from simjoin.spark import delta

    spec = run.spec
    done: dict[str, Any] = {}
    n0 = len(timed)
    try:
        # Stage tables of a batch run are written by background jobs (never read back in-process);
        # a stream's engine reads its own tables back, so it writes synchronously.
        writes = delta.background_writes() if spec.run_type == "batch" else nullcontext()
        with writes, ThreadPoolExecutor(1, thread_name_prefix="gate") as pool:
            pending: list[tuple[str, Future[Any]]] = []
            for st in stages:
                if st.publishes:
                    for name, fut in pending:
                        done[name] = fut.result()
                    pending.clear()
                if st.background:
                    pending.append((st.name, pool.submit(_timed, spec, st, spark, run, timed, fault_points)))
                    continue
                done[st.name] = _timed(spec, st, spark, run, timed, fault_points)
            for name, fut in pending:
                done[name] = fut.result()
    finally:
        run.frames.clear()
        if getattr(spark, "started", True):  # a lazy session never started caches nothing
            spark.catalog.clearCache()
    jobs = [t[3] for t in timed[n0:]]
    if spec.run_type == "stream" and jobs and None not in jobs:
        log.info("%s: the unit's stages ran %d Spark jobs (%s)", spec.name, sum(jobs),
                 ", ".join(f"{t[0]} {t[3]}" for t in timed[n0:]))
    return done


def follow_pipeline(spark: Any, run: Run, trigger_s: float, max_units: int | None = None) -> dict[str, Any]:
    """Follow mode of a stream pipeline: finish an open unit and catch up (one normal run), then
    one long-running Structured Streaming query (``processingTime`` trigger) in this process, or
    for an output whose ingest is ``direct``, a loop that reads the inputs' new versions every trigger.
    Each micro-batch becomes one unit and runs every later stage, gate and publish at once, on
    the warm JVM, with the batch mode's tables and exactly-once rules. SIGINT or SIGTERM (or
    ``max_units`` units) stops it between units, during the catch-up too; a second signal stops it
    at once; a restart resumes where it stopped."""
    if run.spec.run_type != "stream":
        raise ValueError(f"--follow: {run.spec.name} is a batch pipeline: allowed only for stream pipelines")
    if trigger_s <= 0:
        raise ValueError(f"--trigger {trigger_s:g}s: allowed a duration > 0, e.g. 5s")
    units: list[dict[str, Any]] = []
    timed: list[Any] = []
    from simjoin.io.delta_files import keeping

    state = getattr(getattr(run, "tables", None), "state_dir", None)
    # the state tables stay in memory between units (Delta is the savepoint, read again at a restart)
    with output_lock(output_of(run), run.run_id, "follow mode"), keeping(*([state] if state else [])), \
            _stop_between_units(run) as stop:
        first = _run_pipeline(spark, run, stop)  # the catch-up stops between units too
        if stop.is_set():
            return {"catch_up": first, "units": units, "follow": {}}
        rest = run.spec.stages[1:]

        def after_unit(unit: int) -> dict[str, Any]:
            done = _run_stages(spark, run, rest, timed)
            units.append({"unit": unit, **{k: v for k, v in done.items() if isinstance(v, dict)}})
            _maintain_after(run, done)
            _record_cli(run, timed, None)
            timed.clear()
            if max_units is not None and len(units) >= max_units:
                stop.set()
            return done

        run.follow = Follow(trigger_s, after_unit, stop)  # type: ignore[attr-defined]
        try:
            follow = _timed(run.spec, run.spec.stages[0], spark, run, [])
        finally:
            run.follow = None  # type: ignore[attr-defined]
    return {"catch_up": first, "units": units, "follow": follow}


class Follow:
    """What the engine's ingest needs to follow a stream (:func:`follow_pipeline`)."""

    def __init__(self, trigger_s: float, after_unit: Any, stop: Any) -> None:
        self.trigger_s = float(trigger_s)
        self.after_unit = after_unit
        self.stop = stop


#: Seconds between the progress lines of a long stage (``SIMJOIN_HEARTBEAT_S``; 0: none).
HEARTBEAT_S = float(os.environ.get("SIMJOIN_HEARTBEAT_S", "30"))


@contextmanager
def heartbeat(spark: Any, label: str, every: float = HEARTBEAT_S) -> Iterator[None]:
    """While the block runs, log every ``every`` seconds how long it has run and, from Spark's
    status tracker, the tasks done in each active Spark stage (a long ssj join: its units)."""
    import threading

    stop = threading.Event()

    def status_tracker() -> Any:
        if not getattr(spark, "started", True):  # a lazy session not started: no Spark stage runs
            return None
        try:
            return spark.sparkContext.statusTracker()
        except Exception:  # Spark Connect has no SparkContext: time only
            return None

    def beat() -> None:
        t0 = time.perf_counter()
        while not stop.wait(every):
            parts = []
            try:
                tracker = status_tracker()
                for sid in sorted(tracker.getActiveStageIds()) if tracker is not None else []:
                    info = tracker.getStageInfo(sid)  # type: ignore[union-attr]
                    if info is not None:
                        parts.append(f"Spark stage {sid} ({info.name.split(' at ')[0]}): "
                                     f"{info.numCompletedTasks}/{info.numTasks} tasks done, "
                                     f"{info.numActiveTasks} running")
            except Exception:  # the context is stopping: report the time only
                parts = []
            log.info("stage %s: running for %.0fs%s", label, time.perf_counter() - t0,
                     "; " + "; ".join(parts) if parts else "")

    th = threading.Thread(target=beat, name="heartbeat", daemon=True) if every > 0 else None
    if th:
        th.start()
    try:
        yield
    finally:
        stop.set()
        if th:
            th.join(timeout=5)  # no progress line after the stage's own "done"


def call_stage(st: Stage, spark: Any, run: Run) -> dict[str, Any]:
    """The runtime calls the operator: ``st``'s function with its context (``run.context``:
    its run, and for a per-unit stream stage the open unit); a per-unit stage with no unit open
    is not called (``{"unit": None}``). A per-unit stage returns the tables it hands to the
    unit's later stages under ``work`` (name -> pyarrow Table); the runtime keeps or writes
    them (``OpenUnit.write_work``), in the order given, once the stage has returned, and the
    result names where each went."""
    ctx = run.context(spark, st)
    if ctx is None:
        return {"unit": None}
    out = st.function()(ctx) or {}
    work = out.pop("work", None)
    if work:
        out["work"] = {name: ctx.unit.write_work(t, name) for name, t in work.items()}
    return out


def _timed(spec: PipelineSpec, st: Stage, spark: Any, run: Run, timed: list[Any],
           fault_points: bool = False) -> Any:
    """One stage of an in-process run; ``fault_points``: the stage's own fault point after it, as
    its Airflow task has it (the :data:`UNIT_TASK` task runs the stages' tasks' fault points)."""
    from simjoin.spark.session import jobs_started

    name = st.name
    t0, jobs0 = time.perf_counter(), jobs_started(spark)
    res: Any = None
    try:
        with current_stage(f"{spec.name}.{name}"), log_stage(f"{spec.name} {name}", log), \
                heartbeat(spark, f"{spec.name} {name}"):
            res = call_stage(st, spark, run)
            if fault_points:
                maybe_fail(f"{spec.name}.{name}")
            return res
    finally:
        timed.append((name, time.perf_counter() - t0, res, _jobs_since(spark, jobs0), _spark_kind(spark)))
