"""Inequality join stage 6, publish (after the gate): the unit's pairs -> the output, its stats
-> the stats table, its new batches and mutable parts -> ``<output>_state/batches``, its tuples
-> ``<output>_state/tuples``; then the engine commits the unit (with each side's tuple count and
the next batch id), and state no future tuple can meet is dropped: batches past the window
(coarse expiry, SPO-Join Section 4.3, kept the allowed lateness longer - the exact test is in
every probe), with the superseded mutable parts and expired tuples. Every append is idempotent
per (checkpoint, unit)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.ineq.common import IneqRun, counts, tuple_bound
from jobs.ineq.gate import staged_pairs
from jobs.ineq.probe import probed_state
from simjoin.core.inequality.spo import BATCH, MUTABLE
from simjoin.quality.rows import epoch_us
from simjoin.spark import delta


def _expire(u: Any, run: IneqRun) -> list[int]:
    """Drop the batches no future tuple can meet (``simjoin.core.inequality.spo.expired``, read
    from the batches' metadata), and with them the superseded mutable parts and the expired
    tuples. Nothing is deleted until a batch expires (about once a slide): readers take each
    side's latest mutable part, and ingest's duplicate check applies the exact bound itself."""
    from simjoin.core.inequality.spo import expired

    p = run.params()
    prog = u.engine.progress()
    n = counts(prog.meta)
    cols = ["kind", "batch_id", "side", "ts_max", "seq_max"]
    probed = probed_state(run, u)
    if probed is not None:  # every batch committed before this unit, as the probe read them, and the unit's own
        t = pa.concat_tables([probed.select(cols), u.work("state").select(cols).cast(probed.select(cols).schema)])
    else:
        t = u.read_state(run.batches, None, cols)
    meta = [] if t is None else t.filter(pc.equal(t.column("kind").cast(pa.string()), BATCH)).to_pylist()
    marks = {s: epoch_us(m) for s, m in prog.max_ts.items()}
    gone = [int(r["batch_id"]) for r in meta if expired(
        p.window, int(r["ts_max"]), int(r["seq_max"]), marks.get(int(r["side"]) if p.self_join else 1 - int(r["side"])),
        n.get(int(r["side"]), 0), p.lateness_us)]
    if not gone:
        return []
    u.engine.delete(run.batches, f"batch_id IN ({', '.join(map(str, gone))}) OR (kind = '{MUTABLE}' AND unit < {u.id})")
    drop = [f"({c})" for s in p.sides if (c := tuple_bound(p, prog, s, "ts", "seq", keep=False))]
    if drop:
        u.engine.delete(run.tuples, " OR ".join(drop))
    return gone


#: tuples per file of ``<output>_state/tuples`` (a window's oldest file is rewritten when part of it expires)
TUPLE_FILE_ROWS = 100_000


def _runs(tuples: pa.Table) -> list[pa.Table]:
    """``tuples`` by (side, seq), cut into runs of at most ``TUPLE_FILE_ROWS`` of one side."""
    side = np.asarray(tuples.column("side").to_numpy(zero_copy_only=False), np.int64)
    seq = np.asarray(tuples.column("seq").to_numpy(zero_copy_only=False), np.int64)
    order = np.lexsort((seq, side))
    t = tuples.take(pa.array(order))
    s = side[order]
    cuts = [0, *(np.flatnonzero(s[1:] != s[:-1]) + 1).tolist(), t.num_rows]
    out: list[pa.Table] = []
    for a, b in itertools.pairwise(cuts):
        out += [t.slice(x, min(b, x + TUPLE_FILE_ROWS) - x) for x in range(a, b, TUPLE_FILE_ROWS)]
    return out


# seq of each new tuple: its rank by (ts, id) in its side after the earlier units' count

def _tuples(records: pa.Table, before: dict[int, int], unit: int) -> pa.Table:
    side = np.asarray(records.column("side").to_numpy(zero_copy_only=False), np.int64)
    ids = np.asarray(records.column("id").to_numpy(zero_copy_only=False), np.int64)
    ts = records.column("ts").cast(pa.timestamp("us", tz="UTC"))
    us = np.asarray(ts.cast(pa.int64()).to_numpy(zero_copy_only=False), np.int64)
    order = np.lexsort((ids, us, side))
    s_sorted = side[order]
    start = np.flatnonzero(np.r_[True, s_sorted[1:] != s_sorted[:-1]]) if side.size else np.zeros(0, np.int64)
    rank = np.arange(side.size, dtype=np.int64) - np.repeat(start, np.diff(np.r_[start, side.size]))
    seq = np.empty(side.size, np.int64)
    seq[order] = rank + np.where(s_sorted == 0, before.get(0, 0), before.get(1, 0))
    return pa.table({"side": records.column("side").cast(pa.int8()), "id": records.column("id").cast(pa.int64()),
                     "ts": ts, "seq": pa.array(seq), "unit": pa.array(np.full(side.size, unit, np.int64))})


def run(spark: Any, run_: IneqRun) -> dict[str, Any]:
    u = run_.open_unit(spark)
    if u is None:
        return {"unit": None}
    b = u.id
    state = u.work("state", keep_unit=True)
    before = counts(u.engine.progress().meta)
    merge = u.work("merge").to_pylist()[0]
    tuples = _tuples(u.records, before, b)
    sides = np.asarray(tuples.column("side").to_numpy(zero_copy_only=False), np.int64)
    got = {int(s): int((sides == s).sum()) for s in np.unique(sides)}
    n = {str(s): before.get(s, 0) + got.get(s, 0) for s in run_.params().sides}
    # state that expires part by part goes one part per file, so expiry drops files without rewriting
    # the rest: each batch (and mutable part) alone, the tuples per side in runs of TUPLE_FILE_ROWS
    batches = delta.write_parts(run_.batches, [state.slice(i, 1) for i in range(state.num_rows)]) or state
    tuples_parts = delta.write_parts(run_.tuples, _runs(tuples)) or tuples
    pieces = [("pairs", staged_pairs(u), run_.output), ("stats", u.work("stats", keep_unit=True), run_.tables.stats),
              ("batches", batches, run_.batches), ("tuples", tuples_parts, run_.tuples)]
    res = u.engine.publish(u.unit, pieces, meta={"count": n, "next_batch": int(merge["next_batch"])})
    return {**res, "expired_batches": _expire(u, run_)}  # type: ignore[no-any-return]
