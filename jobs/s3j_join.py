"""S3J stage 4, similarity computation (Section 7.7): rows routed by worker, joined in tasks.

New members are joined with each other and with the earlier members of the same worksets
kept in the join state (so a window spanning micro-batches reports each pair exactly once).
Pairs are appended to the output with an idempotent write (``txnVersion`` = unit); the
per-(window, worker) counters go to ``<output>_work/task_stats``.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.s3j_common import S3JRun, micros, pending, read_or_none, work
from simjoin.spark import delta
from simjoin.spark.metric import BUFFER, join_worksets_df

MEMBER_COLS = ["w", "we", "partition", "workset_id", "worker", "side", "id", "vector", "role", "is_new"]


def run(spark: SparkSession, run_: S3JRun) -> dict[str, Any]:
    unit = pending(spark, run_)
    if unit is None:
        return {"unit": None}
    b = unit.batch_id
    p = run_.params(unit.dim)
    new = work(spark, run_, "members", b).where(F.col("kind") == 0).select(*MEMBER_COLS)
    members = new
    js = read_or_none(spark, run_.tables.join_state)
    if js is not None:
        keys = new.where("is_new").select("w", "partition", "workset_id").distinct()
        old = (js.where((F.col("role") != BUFFER) & (F.col("batch_id") < b))
               .select(micros("window_start").alias("w"), micros("window_end").alias("we"), "partition",
                       "workset_id", "worker", "side", "id", "vector", "role", F.lit(False).alias("is_new"))
               .join(keys, ["w", "partition", "workset_id"], "left_semi"))
        members = new.unionByName(old)
    joined = join_worksets_df(members, p).withColumn("unit", F.lit(b).cast("long"))
    path = run_.tables.work("joined")
    delta.overwrite(joined, path)
    out = work(spark, run_, "joined", b)
    pairs = out.where(F.col("kind") == 0).select(
        "left_id", "right_id", "distance", F.timestamp_micros("w").alias("window_start"))
    ctx = run_.context(spark, b)
    ctx.write_output(pairs, run_.output, piece="pairs")
    n = out.where(F.col("kind") == 1).agg(F.sum("results")).first()[0]  # type: ignore[index]
    return {"unit": b, "pairs_added": int(n or 0), "output": run_.output,
            "version": delta.latest_version(spark, run_.output)}
