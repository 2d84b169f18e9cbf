"""Inequality join stage 2, probe (SPO-Join Section 5): the unit's new tuples probe every live
immutable PO-Join batch (IEJoin bit-array scan) and the mutable part (per-attribute bitsets,
ANDed) of the other role, in parallel - one task of the unit's executor per worker's batch list - and are joined
among themselves. Every probe ends with the exact window test, so a coarse expiry never shows.
Pairs and per-batch counters go to ``<output>_work/probed``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.ineq.common import IneqRun, new_tuples
from simjoin.core.inequality.spo import MUTABLE
from simjoin.core.unique import unique
from simjoin.operators.inequality import probe
from simjoin.pipeline.context import StageContext
from simjoin.runtime.executor import take_rows


def live_state(run: IneqRun, u: Any) -> pa.Table | None:
    """The state a unit probes: every batch committed before it, and each side's latest mutable
    part; kept for the unit's later stages in this process (ingest read it first when it ran here)."""
    return state_before(run, int(u.id), u.read_state)


def state_before(run: IneqRun, unit: int, read: Callable[..., pa.Table | None]) -> pa.Table | None:
    """:func:`live_state` of ``unit``, read with ``read(path, where)`` once per process and unit."""
    key = _key(unit)
    if key not in run.frames:
        run.keep(key, _live_state(read(run.batches, [("unit", "<", unit)])))
    return run.frames[key]  # type: ignore[no-any-return]


def _key(unit: int) -> str:
    return f"ineq_state_{unit}"


def probed_state(run: IneqRun, u: Any) -> pa.Table | None:
    """The state this unit's probe read (``live_state``), when it ran in this process; else None."""
    return run.frames.get(_key(int(u.id)))  # type: ignore[no-any-return]


def live_tuples(st: pa.Table | None) -> pa.Table | None:
    """``(side, id, ts, seq)`` of every tuple the state ``st`` holds: its PO-Join batches' and its
    mutable parts' (each batch's arrays read in place, ``simjoin.core.arrays``)."""
    from simjoin.core.arrays import unpack
    from simjoin.core.inequality.spo import tuples_from_bytes

    if st is None or not st.num_rows:
        return None
    parts: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []
    for b in st.to_batches():
        blobs = {c: b.column(c) for c in ("blob_l", "blob_r", "blob_t")}
        for i, (kind, side) in enumerate(zip(b.column("kind").to_pylist(), b.column("side").to_pylist(), strict=True)):
            if kind == MUTABLE:
                t = tuples_from_bytes(blobs["blob_t"][i].as_buffer())
                parts.append((int(side), t.id, t.ts, t.seq))
                continue
            blob = blobs["blob_l"][i].as_buffer() or blobs["blob_r"][i].as_buffer()  # both roles hold the tuples
            if blob is not None:
                d = unpack(blob)
                parts.append((int(side), d["ids"], d["ts"], d["seq"]))
    if not parts:
        return None
    return pa.table({"side": np.concatenate([np.full(len(x[1]), x[0], np.int64) for x in parts]),
                     "id": np.concatenate([x[1] for x in parts]), "ts": np.concatenate([x[2] for x in parts]),
                     "seq": np.concatenate([x[3] for x in parts])})


def _live_state(st: pa.Table | None) -> pa.Table | None:
    if st is None or not st.num_rows:
        return None
    side = np.asarray(st.column("side").to_numpy(zero_copy_only=False), np.int64)
    units = np.asarray(st.column("unit").to_numpy(zero_copy_only=False), np.int64)
    mutable = np.asarray(pc.equal(st.column("kind").cast(pa.string()), MUTABLE).to_numpy(zero_copy_only=False), bool)
    keep = ~mutable
    for s in unique(side[mutable]).tolist():
        mine = mutable & (side == s)
        keep |= mine & (units == units[mine].max())
    return take_rows(st, np.flatnonzero(keep))  # the kept rows' blobs in place, not copied


def run(ctx: StageContext) -> dict[str, Any]:
    run_: IneqRun = ctx.run
    u = ctx.unit
    new = new_tuples(run_, u)
    out = probe(live_state(run_, u), new, run_.params(), u.map_tasks)
    return {"unit": u.id, "new": {s: len(t) for s, t in new.items()}, "work": {"probed": out}}
