"""Stage: publish the gated pairs of this run to the output table (its run_id partition)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.ssj_common import SSJRun
from simjoin.log import get_logger, stage
from simjoin.spark import delta

log = get_logger("simjoin.ssj")


def run(spark: SparkSession, job: SSJRun, pairs: DataFrame | None = None) -> int:
    """Copy the gated staging pairs (or the given, already gated ``pairs``) to the output table."""
    with stage("ssj publish", log):
        staged = pairs if pairs is not None else (
            delta.read_table(spark, job.tables.staging).filter(F.col("run_id") == job.run_id))
        delta.overwrite_partition(staged.select("left_id", "right_id", "similarity", "run_id"), job.output, job.part)
        n = staged.count() if pairs is not None else (
            delta.read_table(spark, job.output).filter(F.col("run_id") == job.run_id).count())
        log.info("ssj publish: %d pairs -> %s", n, job.output)
        return n
