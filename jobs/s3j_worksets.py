"""S3J stage 3, workset formulation (Section 7, steps 1-5) - ClusterJoin: virtual partitions.

One ``applyInArrow`` task per space partition runs the core's sequential formulation over
the unit's windows in ascending order, starting from the persisted workset centroids;
buffered physical outer copies of earlier micro-batches are routed to the worksets opened
now. Writes ``<output>_work/members``; new centroids are appended to the centroid state
(idempotent per unit: centroids persist across windows, only join state is cleared).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.s3j_common import PIPELINE, S3JRun, micros, pending, read_or_none, work
from simjoin.spark import delta
from simjoin.spark.metric import BUFFER, clusterjoin_members_df, formulate_worksets_df


def run(spark: SparkSession, run_: S3JRun) -> dict[str, Any]:
    unit = pending(spark, run_)
    if unit is None:
        return {"unit": None}
    b = unit.batch_id
    p = run_.params(unit.dim)
    copies = work(spark, run_, "copies", b)
    path = run_.tables.work("members")
    if p.algorithm == "clusterjoin":
        members = clusterjoin_members_df(copies, p).withColumn("kind", F.lit(0).cast("byte")).withColumn(
            "n", F.lit(0).cast("long"))
        delta.overwrite(members.withColumn("unit", F.lit(b).cast("long")), path)
        return {"unit": b, "members": path, "new_worksets": 0}
    cent = read_or_none(spark, run_.tables.centroids)
    if cent is not None:
        cent = cent.where(F.col("batch_id") < b)
    js = read_or_none(spark, run_.tables.join_state)
    buffered = None
    if js is not None:
        windows = copies.select("w").distinct()
        buffered = (js.where((F.col("role") == BUFFER) & (F.col("batch_id") < b))
                    .select(micros("window_start").alias("w"), micros("window_end").alias("we"),
                            "partition", "side", "id", "vector")
                    .join(windows, "w", "left_semi"))
    form = formulate_worksets_df(copies, cent, buffered, p)
    delta.overwrite(form.withColumn("unit", F.lit(b).cast("long")), path)
    members = work(spark, run_, "members", b)
    new_c = members.where(F.col("kind") == 1).select(
        "partition", "workset_id", "vector", "worker", F.timestamp_micros("w").alias("window_start"),
        F.lit(b).cast("long").alias("batch_id"))
    delta.append_idempotent(new_c, run_.tables.centroids, f"{PIPELINE}/centroids", b)
    return {"unit": b, "members": path, "centroids": run_.tables.centroids}
