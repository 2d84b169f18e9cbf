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
import pyarrow as pa
import pyarrow.compute as pc

from jobs.ineq.common import IneqRun, batch_expired, counts
from jobs.ineq.gate import staged_pairs
from jobs.ineq.probe import probed_state
from simjoin.core.inequality.spo import BATCH, MUTABLE


def _expire(u: Any, run: IneqRun) -> list[int]:
    """Drop the batches no future tuple can meet (``batch_expired``: the event time's
    expiry bound, read from the batches' metadata), and with them the superseded mutable parts. Nothing is deleted
    until a batch expires (about once a slide): readers take each side's latest mutable part, and
    ingest's duplicate check applies the exact bound itself. Each batch and mutable part is a file
    of its own (``OpenUnit.write_parts``), so the DELETE drops files and rewrites none."""
    p = run.params()
    prog = u.progress()
    cols = ["kind", "batch_id", "side", "ts_max", "seq_max"]
    probed = probed_state(run, u)
    if probed is not None:  # every batch committed before this unit, as the probe read them, and the unit's own
        t = pa.concat_tables([probed.select(cols), u.work("state").select(cols).cast(probed.select(cols).schema)])
    else:
        t = u.read_state(run.batches, None, cols)
    meta = [] if t is None else t.filter(pc.equal(t.column("kind").cast(pa.string()), BATCH)).to_pylist()
    gone = [int(r["batch_id"]) for r in meta
            if batch_expired(p, prog, int(r["side"]), int(r["ts_max"]), int(r["seq_max"]))]
    if not gone:
        return []
    u.expire_ids(run.batches, "batch_id", gone, also=[[("kind", "=", MUTABLE), ("unit", "<", u.id)]])
    return gone


def run(spark: Any, run_: IneqRun) -> dict[str, Any]:
    u = run_.open_unit(spark)
    if u is None:
        return {"unit": None}
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
            "expired_batches": _expire(u, run_)}
