"""Inequality join stage 6, publish (after the gate): the unit's pairs -> the output, its stats
-> the stats table, its new batches and mutable parts -> ``<output>_state/batches``; then the
engine commits the unit (with each side's tuple count and the next batch id), and state no future
tuple can meet is dropped: batches past the window (coarse expiry, SPO-Join Section 4.3, kept the
allowed lateness longer - the exact test is in every probe), with the superseded mutable parts.
The batches hold every live tuple, so they are the duplicate check's live ids too (ingest). Every
append is idempotent per (checkpoint, unit)."""

from __future__ import annotations

from typing import Any

import numpy as np

from jobs.ineq.common import IneqRun, counts
from jobs.ineq.gate import staged_pairs
from simjoin.pipeline.context import StageContext


def run(ctx: StageContext) -> dict[str, Any]:
    run_: IneqRun = ctx.run
    u = ctx.unit
    state = u.work("state", keep_unit=True)
    before = counts(u.progress().meta)
    merge = u.work("merge").to_pylist()[0]
    sides = np.asarray(u.records.column("side").to_numpy(zero_copy_only=False), np.int64)
    n = {str(s): before.get(s, 0) + int((sides == s).sum()) for s in run_.params().sides}
    # each batch (and mutable part) a file of its own: expiry drops files without rewriting the rest
    batches = u.write_parts(run_.batches, [state.slice(i, 1) for i in range(state.num_rows)]) or state
    pieces = [("pairs", staged_pairs(u), run_.output), ("stats", u.work("stats", keep_unit=True), run_.tables.stats),
              ("batches", batches, run_.batches)]
    res = u.publish(pieces, meta={"count": n, "next_batch": int(merge["next_batch"])})
    return {**res, "rows_out": res["published"].get("pairs"),  # type: ignore[no-any-return]
            "expired_batches": res.get("expired", {}).get(run_.batches, [])}
