"""S3J stage 3, workset formulation (Section 7, steps 1-5) - ClusterJoin: virtual partitions.

One ``applyInArrow`` task per space partition runs the core's sequential formulation over
the unit's windows in ascending order, starting from the persisted workset centroids and the
join state of those windows: outer sets keep the exact t + m_W bound, and rows of earlier
units are routed to every workset that gets new members now (``formulate_worksets_df``).
Writes ``<output>_work/members``: members, the centroids of new worksets (committed to the
centroid state by ``publish``) and the centroid-distance counters.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.s3j.common import S3JRun, micros, open_unit, read_state
from simjoin.contracts import RowKind
from simjoin.spark.metric import clusterjoin_members_df, formulate_worksets_df


def run(spark: SparkSession, run_: S3JRun) -> dict[str, Any]:
    u = open_unit(spark, run_)
    if u is None:
        return {"unit": None}
    p = run_.params(u.dim)
    copies = u.work("copies")
    if p.algorithm == "clusterjoin":
        members = (clusterjoin_members_df(copies, p).withColumn("kind", F.lit(int(RowKind.MEMBER)).cast("byte"))
                   .withColumn("n", F.lit(0).cast("long")))
        return {"unit": u.id, "members": u.write_work(members, "members"), "new_worksets": 0}
    cent = read_state(spark, run_.centroids, u.id)
    js = read_state(spark, run_.join_state, u.id)
    state = None
    if js is not None:
        windows = copies.select("w").distinct()
        state = (js.select(micros("window_start").alias("w"), micros("window_end").alias("we"), "partition",
                           "workset_id", "side", "id", "vector", "role")
                 .join(windows, "w", "left_semi"))
    path = u.write_work(formulate_worksets_df(copies, cent, state, p), "members")
    return {"unit": u.id, "members": path}
