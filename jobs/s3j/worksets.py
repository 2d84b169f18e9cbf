"""S3J stage 3, workset formulation (Section 7, steps 1-5) - ClusterJoin: virtual partitions.

One ``applyInArrow`` task per space partition runs the core's sequential formulation over
the unit's windows in ascending order, starting from the persisted workset centroids and the
join state of those windows: outer sets keep the exact t + m_W bound, and rows of earlier
units are routed to every workset that gets new members now (``formulate_worksets_df``).
Writes ``<output>_work/members``: members, the centroids of new worksets (committed to the
centroid state by ``publish``) and the centroid-distance counters. Both executors run the same
task, ``formulate_partition_arrow``, per space partition (in process: on a thread pool).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from jobs.s3j.common import S3JRun, S3JUnit, micros, open_unit, read_state, state_arrow, window_state_arrow
from simjoin.spark.metric import (
    clusterjoin_members_arrow,
    clusterjoin_members_df,
    formulate_partition_arrow,
    formulate_worksets_df,
    formulation_input_arrow,
)
from simjoin.spark.routing import map_tasks


def run(spark: SparkSession, run_: S3JRun) -> dict[str, Any]:
    u = open_unit(spark, run_)
    if u is None:
        return {"unit": None}
    p = run_.params(u.dim)
    copies = u.work("copies")
    if p.algorithm == "clusterjoin":
        members = clusterjoin_members_arrow(copies, p) if u.in_process else clusterjoin_members_df(copies, p)
        return {"unit": u.id, "members": u.write_work(members, "members"), "new_worksets": 0}
    if u.in_process:
        return {"unit": u.id, "members": u.write_work(_formulate_arrow(run_, u, copies, p), "members")}
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


def _formulate_arrow(run_: S3JRun, u: S3JUnit, copies: pa.Table, p: Any) -> pa.Table:
    """The formulation on the in-process executor: the same input rows, one task per partition."""
    cent = state_arrow(run_.centroids, u.id, ["partition", "workset_id", "vector", "worker"])
    form_in = formulation_input_arrow(copies, cent, window_state_arrow(run_, u.id, pc.unique(copies.column("w"))))
    part = np.asarray(form_in.column("partition").to_numpy(zero_copy_only=False), np.int64)
    got = map_tasks(form_in, part, lambda t: formulate_partition_arrow(t, p), "s3j-worksets")
    return pa.concat_tables(got) if got else formulate_partition_arrow(form_in.slice(0, 0), p)
