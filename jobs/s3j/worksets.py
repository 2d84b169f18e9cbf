"""S3J stage 3, workset formulation (Section 7, steps 1-5) - ClusterJoin: virtual partitions.

One task per space partition runs the core's sequential formulation over
the unit's windows in ascending order, starting from the persisted workset centroids and the
join state of those windows: outer sets keep the exact t + m_W bound, and rows of earlier
units are routed to every workset that gets new members now (``formulate_worksets_df``).
Writes ``<output>_work/members``: members, the centroids of new worksets (committed to the
centroid state by ``publish``) and the centroid-distance counters. Both executors run the same
task, ``formulate_partition_arrow``, per space partition (``OpenUnit.map_tasks``: a thread pool,
or one Spark job).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.s3j.common import S3JRun, S3JUnit, state_arrow, window_state_arrow
from simjoin.operators.metric import (
    FORM_ARROW,
    clusterjoin_members_arrow,
    formulate_partition_arrow,
    formulation_input_arrow,
)
from simjoin.pipeline.context import StageContext


def run(ctx: StageContext) -> dict[str, Any]:
    run_: S3JRun = ctx.run
    u = ctx.unit
    p = run_.params(u.dim)
    copies = u.work("copies")
    if p.algorithm == "clusterjoin":
        return {"unit": u.id, "work": {"members": clusterjoin_members_arrow(copies, p)},
                "new_worksets": 0}
    return {"unit": u.id, "work": {"members": _formulate(run_, u, copies, p)}}


def _formulate(run_: S3JRun, u: S3JUnit, copies: pa.Table, p: Any) -> pa.Table:
    """The formulation input rows, one task per space partition on the unit's executor."""
    cent = state_arrow(u, run_.centroids, ["partition", "workset_id", "vector", "worker"])
    form_in = formulation_input_arrow(copies, cent, window_state_arrow(run_, u, pc.unique(copies.column("w"))))
    part = np.asarray(form_in.column("partition").to_numpy(zero_copy_only=False), np.int64)
    return u.map_tasks(form_in, part, functools.partial(_formulate_task, p=p), FORM_ARROW,  # type: ignore[no-any-return]
                       "s3j-worksets")


def _formulate_task(t: pa.Table, p: Any) -> list[pa.RecordBatch]:
    return formulate_partition_arrow(t, p).to_batches()  # type: ignore[no-any-return]
