"""Inequality join stage 3, merge (SPO-Join Section 4.2): the unit's new tuples enter each side's
mutable part; every delta tuples (default: a slide) the mutable part becomes an immutable PO-Join
batch - sorted arrays, permutation array, offsets - dealt round-robin to the workers' batch lists.
The new state rows go to ``<output>_work/state``; ``publish`` appends them."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.ineq.common import IneqRun, new_tuples
from jobs.ineq.probe import live_state
from simjoin.core.inequality.spo import MUTABLE, merge_state, read_mutable
from simjoin.io.rows import rows_table
from simjoin.operators.inequality import state_table
from simjoin.pipeline.context import StageContext

MERGE_SCHEMA = "merge_seconds double, build_seconds double, new_batches long, next_batch long, mutable long"


def run(ctx: StageContext) -> dict[str, Any]:
    run_: IneqRun = ctx.run
    u = ctx.unit
    p = run_.params()
    new = new_tuples(run_, u)
    sa = live_state(run_, u)
    mut = [] if sa is None else sa.filter(pc.equal(sa.column("kind").cast(pa.string()), MUTABLE)).to_pylist()
    prev = read_mutable(mut) if mut else {}
    next_batch = int(u.progress().meta.get("next_batch", 0))
    rows, nxt, secs = merge_state(prev, new, p, next_batch)
    made = nxt - next_batch
    sizes = {int(r["side"]): int(r["n"]) for r in rows if r["kind"] == MUTABLE}
    stat = [(secs["merge_seconds"], secs["build_seconds"], made, nxt, sum(sizes.values()))]
    return {"unit": u.id, "new_batches": made, "next_batch": nxt, "mutable": sizes, **secs,
            "work": {"state": state_table(rows), "merge": rows_table(stat, MERGE_SCHEMA)}}
