"""S3J stage 2, space partitioning (Section 6): the unit's records -> space-partition copies.

Each record goes to its nearest centroid (home) and, by Criterion 1 with the one-way routing
of Section 6.3, as an outer copy to other partitions (S3J: one per worker; ClusterJoin: V
virtual partitions). Runs in ``mapInArrow`` tasks; writes ``<output>_work/copies``.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

from jobs.s3j.common import S3JRun, micros, open_unit
from simjoin.spark.metric import space_partition_df


def run(spark: SparkSession, run_: S3JRun) -> dict[str, Any]:
    u = open_unit(spark, run_)
    if u is None:
        return {"unit": None}
    recs = u.records.select(micros("window_start").alias("w"), micros("window_end").alias("we"),
                            micros("ts").alias("ts"), "side", "id", "vector")
    path = u.write_work(space_partition_df(recs, run_.params(u.dim)), "copies")
    return {"unit": u.id, "copies": path, "dim": u.dim}
