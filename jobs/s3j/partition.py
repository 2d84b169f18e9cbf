"""S3J stage 2, space partitioning (Section 6): the unit's records -> space-partition copies.

Each record goes to its nearest centroid (home) and, by Criterion 1 with the one-way routing
of Section 6.3, as an outer copy to other partitions (S3J: one per worker; ClusterJoin: V
virtual partitions). ``space_partition_arrow`` on the unit's records, vectorized in this process
on either executor; writes ``<output>_work/copies``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from jobs.s3j.common import S3JRun, us
from simjoin.operators.metric import space_partition_arrow
from simjoin.pipeline.context import StageContext


def run(ctx: StageContext) -> dict[str, Any]:
    run_: S3JRun = ctx.run
    u = ctx.unit
    p = run_.params(u.dim)
    r = u.records
    rec = pa.table({"w": us(r.column("window_start")), "we": us(r.column("window_end")), "ts": us(r.column("ts")),
                    "side": r.column("side").cast(pa.int8()), "id": r.column("id").cast(pa.int64()),
                    "vector": r.column("vector").cast(pa.list_(pa.float64()))})
    copies = space_partition_arrow(rec, p)
    return {"unit": u.id, "dim": u.dim, "work": {"copies": copies}}
