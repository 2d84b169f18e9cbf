"""`simjoin cache-jvm`: record the class-data archive that makes later Spark starts faster.

Runs a small but representative workload (generate, the set-similarity join with its gates and
the S3J pipeline) in a JVM that writes every class it loaded to an AppCDS archive when it
exits; see ``simjoin.spark.jvmcache``. Takes about a minute, once per machine and install.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from simjoin.log import get_logger, stage
from simjoin.spark import jvmcache, session

log = get_logger("simjoin.jvm")


def record(force: bool = False) -> tuple[Path, bool]:
    """Record the archive unless it exists (or ``force``). Returns (path, recorded now)."""
    from simjoin.config import SparkConfig, load_config
    from simjoin.spark.session import delta_packages, get_spark, stop_spark

    packages = delta_packages()
    final = jvmcache.archive_path(packages)
    if final.is_file() and not force:
        return final, False
    if session.active_session() is not None:
        raise RuntimeError("cache-jvm needs a fresh process: a Spark session is already running here")
    flags, tmp = jvmcache.recording_flags(packages)
    work = Path(tempfile.mkdtemp(prefix="simjoin-cache-jvm-"))
    try:
        with stage("cache-jvm: recording classes", log), own_warehouse(work / "warehouse"):
            cfg = load_config(SparkConfig, "spark")
            spark = get_spark(cfg, record_to=flags)
            _workload(spark, work)
            stop_spark(wait_for_jvm=True)
        return jvmcache.finish_recording(tmp, packages), True
    finally:
        shutil.rmtree(work, ignore_errors=True)
        tmp.unlink(missing_ok=True)


def own_warehouse(path: Path) -> AbstractContextManager[None]:
    """``SIMJOIN_WAREHOUSE`` set to ``path`` for the recording: its runs' task timing, locks and
    manifests go to the scratch warehouse, never into the user's (``--force`` wrote its internal
    runs into the user's task-timing table)."""
    from simjoin.config import temp_env

    return temp_env("SIMJOIN_WAREHOUSE", str(path))


def _workload(spark: Any, work: Path) -> None:
    from jobs.tools.demo import s3j_demo
    from simjoin.pipeline import get_spec
    from simjoin.pipeline.runner import run_pipeline

    sets = str(work / "sets")
    run_pipeline(spark, get_spec("generate").make_run({"kind": "sets", "out": sets, "rows": 3000, "seed": 1}))
    run_pipeline(spark, get_spec("ssj").make_run({"input": sets, "output": str(work / "pairs"), "threshold": 0.7}))
    s3j_demo(spark, str(work))
