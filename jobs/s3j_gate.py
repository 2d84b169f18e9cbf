"""S3J stage 5, quality gate (Great Expectations): the pair contract on every window this unit
touched - schema, 0 <= distance <= t, left_id < right_id for a self-join, no pair twice in a
window (across micro-batches too). A failure stops the unit before its state is committed."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.s3j_common import S3JRun, pending, work
from simjoin.quality.gates import pairs_expectations, run_suite
from simjoin.spark import delta


def run(spark: SparkSession, run_: S3JRun) -> dict[str, Any]:
    unit = pending(spark, run_)
    if unit is None:
        return {"unit": None}
    touched = (work(spark, run_, "joined", unit.batch_id).where(F.col("kind") == 1)
               .select(F.timestamp_micros("w").alias("window_start")).distinct())
    pairs = delta.read_table(spark, run_.output).join(touched, "window_start", "left_semi")
    res = run_suite(pairs, "s3j_pairs",
                    pairs_expectations("distance", 0.0, float(run_.cfg.threshold), run_.self_join, "window_start"))
    return {"unit": unit.batch_id, "expectations": res.evaluated, "success": res.success}
