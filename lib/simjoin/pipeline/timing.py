"""Per-task timing: how long each stage's process took to start, to get Spark, and to work.

Every stage run (an Airflow task, or a stage of a CLI run) appends one row to the Delta table
``<warehouse>/_simjoin/task_timing``, written with ``deltalake`` (no Spark job, a few ms), so
that ``simjoin report`` can show where a run's time went:

- ``process_s``: from the task process's start to the stage's start (Airflow's task runner,
  imports; 0 for the second and later stages of a CLI run);
- ``startup_s``: getting a Spark session (a cold JVM, or a connection to the warm Spark; 0 for
  a task that needed none: ``spark`` is then ``none``);
- ``work_s``: the stage itself;
- ``rows_in``, ``rows_out``, ``quarantined``: the counts the stage reported (:func:`row_counts`);
- ``spark_jobs``: the Spark jobs this process started while the stage ran (0: none; null: not
  known, on the warm Spark). A stream unit's jobs are the sum over its stages (a background gate
  overlaps the stages after it);
- ``output``: the run's output table, and ``invocation``: one id per run of a CLI command or per
  Airflow DAG run, so ``simjoin report --output`` finds the stages of one run.

Recording never fails a stage: a write error is logged and dropped.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from simjoin.log import get_logger

__all__ = ["TaskTiming", "timing_path", "record", "process_age", "row_counts"]

#: Result keys a stage reports its counts under, in order of preference (the first int wins).
ROWS_IN = ("rows", "records_in", "tuples_in", "rows_in")
ROWS_OUT = ("pairs", "records", "staged", "rows_out")


def row_counts(result: Any) -> tuple[int | None, int | None, int | None]:
    """(rows in, rows out, quarantined) from a stage's result dict; None where it says nothing."""
    if not isinstance(result, dict):
        return None, None, None

    def first(keys: tuple[str, ...]) -> int | None:
        for k in keys:
            v = result.get(k)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        return None

    return first(ROWS_IN), first(ROWS_OUT), first(("quarantined",))

log = get_logger("simjoin.timing")


def timing_path(warehouse: str | None = None) -> str:
    """Where the task-timing table lives: under the warehouse (``SIMJOIN_WAREHOUSE``)."""
    if warehouse is None:
        from simjoin.config import SparkConfig, load_config

        warehouse = load_config(SparkConfig, "spark").warehouse
    return os.path.join(os.path.abspath(warehouse), "_simjoin", "task_timing")


def process_age() -> float:
    """Seconds since this process started. On Linux from ``/proc`` (the start in clock ticks
    since boot against the uptime: 10 ms steps); psutil's start time adds the boot time, which
    Linux gives in whole seconds, so its age was up to a second off."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        import psutil

        return max(0.0, time.time() - psutil.Process().create_time())


@dataclass
class TaskTiming:
    run_id: str
    pipeline: str
    stage: str
    mode: str  # "airflow" or "cli"
    spark: str = "local"  # "warm" (Spark Connect), "local" (a JVM of this process) or "none" (no Spark used)
    attempt: int = 1
    process_s: float = 0.0
    startup_s: float = 0.0
    work_s: float = 0.0
    ok: bool = True
    started_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    host: str = field(default_factory=socket.gethostname)
    output: str | None = None
    invocation: str | None = None
    rows_in: int | None = None
    rows_out: int | None = None
    quarantined: int | None = None
    spark_jobs: int | None = None

    def count(self, result: Any) -> None:
        self.rows_in, self.rows_out, self.quarantined = row_counts(result)


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema([("run_id", pa.string()), ("pipeline", pa.string()), ("stage", pa.string()),
                      ("mode", pa.string()), ("spark", pa.string()), ("attempt", pa.int32()),
                      ("process_s", pa.float64()), ("startup_s", pa.float64()), ("work_s", pa.float64()),
                      ("ok", pa.bool_()), ("started_at", pa.timestamp("us", tz="UTC")), ("host", pa.string()),
                      ("output", pa.string()), ("invocation", pa.string()), ("rows_in", pa.int64()),
                      ("rows_out", pa.int64()), ("quarantined", pa.int64()), ("spark_jobs", pa.int64())])


def record(rows: list[TaskTiming], path: str | None = None) -> None:
    """Append ``rows`` to the task-timing table (created on first use)."""
    if not rows:
        return
    try:
        import pyarrow as pa
        from deltalake import write_deltalake

        schema = _schema()
        cols = {f.name: [getattr(r, f.name) for r in rows] for f in schema}
        table = pa.Table.from_pydict(cols, schema=schema)
        target = path or timing_path()
        os.makedirs(os.path.dirname(target), exist_ok=True)
        from simjoin.io.delta_files import open_table

        kept = open_table(target) if os.path.isdir(os.path.join(target, "_delta_log")) else target
        write_deltalake(kept, table, mode="append", schema_mode="merge")  # tables of older versions gain columns
    except Exception as e:  # timing is for the report; it never fails a stage
        log.warning("task timing not recorded: %s", e)
