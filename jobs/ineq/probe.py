"""Inequality join stage 2, probe (SPO-Join Section 5): the unit's new tuples probe every live
immutable PO-Join batch (IEJoin bit-array scan) and the mutable part (per-attribute bitsets,
ANDed) of the other role, in parallel - one task of the unit's executor per worker's batch list - and are joined
among themselves. Every probe ends with the exact window test, so a coarse expiry never shows.
Pairs and per-batch counters go to ``<output>_work/probed``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.ineq.common import IneqRun, new_tuples
from simjoin.core.inequality.spo import MUTABLE
from simjoin.spark.inequality import probe
from simjoin.spark.routing import take_rows


def live_state(run: IneqRun, u: Any) -> pa.Table | None:
    """The state a unit probes: every batch committed before it, and each side's latest mutable
    part; kept for the unit's later stages in this process."""
    key = _key(u)
    if key not in run.frames:
        run.keep(key, _live_state(u.read_state(run.batches, [("unit", "<", int(u.id))])))
    return run.frames[key]  # type: ignore[no-any-return]


def _key(u: Any) -> str:
    return f"ineq_state_{u.id}"


def probed_state(run: IneqRun, u: Any) -> pa.Table | None:
    """The state this unit's probe read (``live_state``), when it ran in this process; else None."""
    return run.frames.get(_key(u))  # type: ignore[no-any-return]


def _live_state(st: pa.Table | None) -> pa.Table | None:
    if st is None or not st.num_rows:
        return None
    side = np.asarray(st.column("side").to_numpy(zero_copy_only=False), np.int64)
    units = np.asarray(st.column("unit").to_numpy(zero_copy_only=False), np.int64)
    mutable = np.asarray(pc.equal(st.column("kind").cast(pa.string()), MUTABLE).to_numpy(zero_copy_only=False), bool)
    keep = ~mutable
    for s in np.unique(side[mutable]).tolist():
        mine = mutable & (side == s)
        keep |= mine & (units == units[mine].max())
    return take_rows(st, np.flatnonzero(keep))  # the kept rows' blobs in place, not copied


def run(spark: Any, run_: IneqRun) -> dict[str, Any]:
    u = run_.open_unit(spark)
    if u is None:
        return {"unit": None}
    new = new_tuples(spark, run_, u)
    out = probe(live_state(run_, u), new, run_.params(), u.map_tasks)
    return {"unit": u.id, "probed": u.write_work(out, "probed"), "new": {s: len(t) for s, t in new.items()}}
