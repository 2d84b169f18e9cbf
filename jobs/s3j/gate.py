"""S3J stage 5, quality gate (Great Expectations): the pair contract on every window this unit
touched - schema, 0 <= distance <= t, left_id < right_id for a self-join, no pair twice in a
window, including pairs published by earlier units. Nothing is published unless it passes."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.s3j.common import S3JRun, open_unit
from simjoin.contracts import RowKind
from simjoin.quality.gates import pairs_expectations, run_suite
from simjoin.spark import delta

PAIR_COLS = ("left_id", "right_id", "distance", "window_start")


def staged_pairs(u: Any) -> Any:
    return (u.work("joined").where(F.col("kind") == int(RowKind.PAIR))
            .select("left_id", "right_id", "distance", F.timestamp_micros("w").alias("window_start")))


def run(spark: SparkSession, run_: S3JRun) -> dict[str, Any]:
    u = open_unit(spark, run_)
    if u is None:
        return {"unit": None}
    pairs = staged_pairs(u)
    # Once publishing began, the output may already hold this unit's pairs: check them alone.
    if delta.table_exists(spark, run_.output) and not u.engine.publishing(u.id):
        touched = pairs.select("window_start").distinct()
        pairs = pairs.unionByName(delta.read_small_or_table(spark, run_.output).select(*PAIR_COLS)
                                  .join(touched, "window_start", "left_semi"))
    hi = float(run_.cfg.threshold)
    res = run_suite(pairs, "s3j_pairs", pairs_expectations("distance", 0.0, hi, run_.self_join, "window_start"))
    return {"unit": u.id, "expectations": res.evaluated, "success": res.success}
