"""Streaming HyperCube stage 3, join: the unit's new tuples, and the held tuples of their keys on
the other side, are routed under the unit's dispatcher - a light key's tuple to its task, a heavy
key's R tuple to its grid row, S tuple to its grid column - to the workers (the tasks of the
unit's executor: a thread pool, or one Spark partition each), where every task hash-joins its
copies: new x held and new x new, never held x held again. With a window each pair also needs
|ts_l - ts_r| < W. Pairs (or per-key counts) and per-worker counters go to
``<output>_work/joined``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from jobs.hypercube.common import HyperCubeRun, held_of
from jobs.hypercube.dispatch import dispatcher
from simjoin.operators.hypercube import join
from simjoin.pipeline.context import StageContext


def _tuples(t: pa.Table, new: int) -> pa.Table:
    n = t.num_rows
    return pa.table({"side": t.column("side").cast(pa.int64()), "id": t.column("id").cast(pa.int64()),
                     "ts_us": t.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()),
                     "k": t.column("k").cast(pa.int64()), "new": pa.array(np.full(n, new, np.int64))})


def tuples_to_join(run_: HyperCubeRun, u: Any) -> pa.Table:
    """The unit's new tuples, and the held tuples of their keys on the other side."""
    new = _tuples(u.records, 1)
    h = held_of(run_, u)
    parts = [new]
    if h is not None and h.num_rows:
        # a held tuple of side s matters only if a new tuple of the other side has its key
        from simjoin.core.membership import member_of, staged_index

        side, k = np.asarray(new.column("side")), np.asarray(new.column("k"))
        hs = np.asarray(h.column("side").to_numpy(zero_copy_only=False), np.int64)
        hk = np.asarray(h.column("k").to_numpy(zero_copy_only=False), np.int64)
        # (side, key) a held tuple needs: the other side's new keys, indexed once; each held tuple
        # looked up (no sort of the held tuples)
        want = member_of(hs, hk, staged_index(1 - side, k))
        parts.append(_tuples(h.filter(pa.array(want)), 0))
    return pa.concat_tables(parts)


def run(ctx: StageContext) -> dict[str, Any]:
    run_: HyperCubeRun = ctx.run
    u = ctx.unit
    out = join(tuples_to_join(run_, u), dispatcher(run_, u), run_.window_us, bool(run_.cfg.count_only), u.map_tasks)
    return {"unit": u.id, "work": {"joined": out}}
