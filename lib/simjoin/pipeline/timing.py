"""Per-task timing: how long each stage's process took to start, to get Spark, and to work.

Every stage run (an Airflow task, or a stage of a CLI run) appends one row to the Delta table
``<warehouse>/_simjoin/task_timing``, written with ``deltalake`` (no Spark job, a few ms), so
that ``simjoin report`` can show where a run's time went:

- ``process_s``: from the task process's start to the stage's start (Airflow's task runner,
  imports; 0 for the second and later stages of a CLI run);
- ``startup_s``: getting a Spark session (a cold JVM, or a connection to the warm Spark);
- ``work_s``: the stage itself.

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

__all__ = ["TaskTiming", "timing_path", "record", "process_age"]

log = get_logger("simjoin.timing")


def timing_path(warehouse: str | None = None) -> str:
    """Where the task-timing table lives: under the warehouse (``SIMJOIN_WAREHOUSE``)."""
    if warehouse is None:
        from simjoin.config import SparkConfig, load_config

        warehouse = load_config(SparkConfig, "spark").warehouse
    return os.path.join(os.path.abspath(warehouse), "_simjoin", "task_timing")


def process_age() -> float:
    """Seconds since this process started."""
    import psutil

    return max(0.0, time.time() - psutil.Process().create_time())


@dataclass
class TaskTiming:
    run_id: str
    pipeline: str
    stage: str
    mode: str  # "airflow" or "cli"
    spark: str = "local"  # "warm" (Spark Connect) or "local" (a JVM of this process)
    attempt: int = 1
    process_s: float = 0.0
    startup_s: float = 0.0
    work_s: float = 0.0
    ok: bool = True
    started_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    host: str = field(default_factory=socket.gethostname)


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema([("run_id", pa.string()), ("pipeline", pa.string()), ("stage", pa.string()),
                      ("mode", pa.string()), ("spark", pa.string()), ("attempt", pa.int32()),
                      ("process_s", pa.float64()), ("startup_s", pa.float64()), ("work_s", pa.float64()),
                      ("ok", pa.bool_()), ("started_at", pa.timestamp("us", tz="UTC")), ("host", pa.string())])


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
        write_deltalake(target, table, mode="append")
    except Exception as e:  # timing is for the report; it never fails a stage
        log.warning("task timing not recorded: %s", e)
