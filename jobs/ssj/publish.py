"""Stage: publish the gated pairs of this run to the output table (its run_id partition)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.ssj.common import SSJRun
from simjoin.log import get_logger
from simjoin.spark import delta, pins

log = get_logger("simjoin.ssj")


def run(spark: SparkSession, job: SSJRun) -> dict[str, Any]:
    """Copy the gated pairs (kept by the join in this process, else the staging table) to the output."""
    kept = "pairs" in job.frames
    staged = job.frame("pairs", lambda: delta.read_table(spark, job.tables.staging)
                       .filter(F.col("run_id") == job.run_id))
    delta.overwrite_partition(staged.select("left_id", "right_id", "similarity", "run_id"), job.output, job.part)
    n = staged.count() if kept else (
        delta.read_table(spark, job.output).filter(F.col("run_id") == job.run_id).count())
    pins.mark_published(spark, job.tables.runs, job.run_id)
    log.info("ssj publish: %d pairs -> %s", n, job.output)
    return {"pairs": n, "table": job.output, "run_id": job.run_id}
