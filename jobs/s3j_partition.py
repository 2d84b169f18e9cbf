"""S3J stage 2, space partitioning (Section 6): staged records -> space-partition copies.

Each record goes to its nearest centroid (home) and, by Criterion 1 with the one-way routing
of Section 6.3, as an outer copy to other partitions (S3J: one per worker; ClusterJoin: V
virtual partitions). Runs in ``mapInArrow`` tasks; writes ``<output>_work/copies``.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.s3j_common import S3JRun, micros, pending
from simjoin.spark import delta
from simjoin.spark.metric import space_partition_df


def run(spark: SparkSession, run_: S3JRun) -> dict[str, Any]:
    unit = pending(spark, run_)
    if unit is None:
        return {"unit": None}
    p = run_.params(unit.dim)
    recs = unit.records.select(micros("window_start").alias("w"), micros("window_end").alias("we"),
                               micros("ts").alias("ts"), "side", "id", "vector")
    copies = space_partition_df(recs, p).withColumn("unit", F.lit(unit.batch_id).cast("long"))
    path = run_.tables.work("copies")
    delta.overwrite(copies, path)
    return {"unit": unit.batch_id, "copies": path, "version": delta.latest_version(spark, path), "dim": unit.dim}
