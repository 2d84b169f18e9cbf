"""S2J stage 2, join: adapt to the workload (Section 3.2), shed, then join (Sections 3.3-4).

1. **Adapt.** τ = w / W with w the most tuples the window holds at once while the micro-batch
   arrives (stored and new; ``adapt.window_load``), over m workers. Sustained τ > τ2 adds
   workers and sustained τ < τ0 releases them (back to about τ*); τ > τ1 sheds a fraction SR of
   the incoming tuples (linear or quadratic model). The tuple-block size ς solves Problem 1.
2. **Shed.** The shed tuples (deterministic by hash, so a retry sheds the same ones) go to
   ``DIR/_work/shed`` and, at publish, to ``DIR/_shed``: processed plus shed is the input.
3. **Join.** The micro-batch is read once; the tasks' pre-selection drops tuples no task can use;
   every live block goes to its worker's task on the unit's executor (a thread, or a Spark
   task); blocks keep their worker, those of released workers and new blocks go to the
   least-loaded, and a worker more than ς tuples above another hands blocks over. A worker reads
   each of its blocks once for every join task.
4. **Blocks.** The kept tuples, cut into blocks of ς, go to ``DIR/_work/blocks``.

Statistics for the unit (τ, workers, shed ratio and count, ς, input scans, latency), per worker
(load, blocks, seconds) and per task (pairs, candidates) go to ``DIR/_work/stats``.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.s2j.common import S2JRun, dead_mask
from simjoin.contracts import STATS_COMMON_SCHEMA, RowKind
from simjoin.core.s2j.adapt import assign_blocks, decide, shed_mask, window_load
from simjoin.core.s2j.join import Block
from simjoin.core.s2j.operator import cut_blocks
from simjoin.io.rows import rows_table
from simjoin.log import get_logger
from simjoin.operators.s2j import block_table, join, read_new
from simjoin.pipeline.context import StageContext
from simjoin.runtime.event_time import epoch_us, on_time_max

log = get_logger("simjoin.s2j")

STATS_SCHEMA = (STATS_COMMON_SCHEMA + ", level string, unit long, worker int, task string, tau double, workers int, "
                "shed_ratio double, shed long, block_size long, input_scans int, tasks int, tuples_in long, "
                "processed long, live long, blocks long, candidates long, pairs long, latency_s double, scaled int")
DECISION_SCHEMA = "workers int, high int, low int, next_block long, shed long"
SHED_SCHEMA = "side byte, id long, ts timestamp, tau double, shed_ratio double"


def _live_blocks(run_: S2JRun, u: Any, time: Any) -> tuple[Any, list[dict[str, Any]]]:
    """The live blocks (a pyarrow Table in ``block_id`` order; None when there are none) and their
    rows (block_id, side, worker, n, ts_min, ts_max)."""
    p = run_.params()
    cols = ["block_id", "side", "worker", "n", "ts_min", "ts_max"]
    t = u.read_state(run_.blocks, [("unit", "<", int(u.id))])
    if t is None or not t.num_rows:
        return None, []
    t = t.filter(pa.array(~dead_mask(p, time, t))).sort_by("block_id")
    return (t if t.num_rows else None), t.select(cols).to_pylist()


def run(ctx: StageContext) -> dict[str, Any]:
    run_: S2JRun = ctx.run
    u = ctx.unit
    t0 = time.perf_counter()
    p, cfg = run_.params(), run_.cfg
    meta = u.progress().meta
    new = read_new(u.records, p)  # the one scan of the micro-batch, shared by every task
    input_scans = 1
    # dead blocks wait for the periodic delete; nothing reads them
    state, live_rows = _live_blocks(run_, u, u.time)
    # the event time once this unit is in, by the engine's rule (a row dated after the publish time
    # never advances a mark; it is not yet, so these marks are at most the ones publish commits):
    # blocks at or before its expiry bounds are dropped at publish
    due = epoch_us(dt.datetime.now(dt.UTC))
    bounds = u.time.projected({s: on_time_max(t.ts, due) for s, t in new.items()}).expiry_bounds_us(
        p.window_us, p.self_join, p.sides)
    gone = [int(r["block_id"]) for r in live_rows
            if int(r["side"]) in bounds and int(r["ts_max"]) <= bounds[int(r["side"])]]
    live = sum(int(r["n"]) for r in live_rows)
    incoming = sum(len(t) for t in new.values())
    workers = int(meta.get("workers") or run_.initial_workers())
    load = window_load(np.concatenate([t.ts for t in new.values()]),
                       [(int(r["ts_min"]), int(r["ts_max"]), int(r["n"])) for r in live_rows], p.window_us)
    d = decide(live, incoming, workers, cfg.capacity, run_.thresholds(), cfg.alpha, int(meta.get("high", 0)),
               int(meta.get("low", 0)), cfg.min_block, load)
    if d.scaled:
        log.info("s2j: unit %d: tau %.2f -> %s to %d workers", u.id, d.tau, "up" if d.scaled > 0 else "down",
                 d.workers)
    # shed (deterministic), then pre-selection
    sides = sorted(new)
    all_side = np.concatenate([np.full(len(new[s]), s, np.int64) for s in sides])
    all_id = np.concatenate([new[s].id for s in sides])
    shed = shed_mask(all_side, all_id, d.shed)
    kept, shed_rows, off = {}, [], 0
    for s in sides:
        m = shed[off:off + len(new[s])]
        off += len(new[s])
        shed_rows += [(s, int(i), int(t)) for i, t in zip(new[s].id[m], new[s].ts[m])]
        k = new[s].take(np.flatnonzero(~m))
        kept[s] = k.take(np.flatnonzero(p.admit(s, k)))
    processed = incoming - len(shed_rows)
    if shed_rows:
        log.info("s2j: unit %d: tau %.2f > tau1, shedding %d of %d tuples (SR %.3f)", u.id, d.tau, len(shed_rows),
                 incoming, d.shed_ratio)
    # the shed table exists from the first unit on (empty while nothing is shed: a monitoring
    # query finds it), so the work table is handed over when it will be published
    work: dict[str, pa.Table] = {}
    if shed_rows or not u.table_exists(run_.tables.shed):
        n_shed = len(shed_rows)
        sh = pa.table({"side": pa.array([r[0] for r in shed_rows], pa.int8()),
                       "id": pa.array([r[1] for r in shed_rows], pa.int64()),
                       "ts": pa.array([r[2] for r in shed_rows], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                       "tau": pa.array(np.full(n_shed, d.tau, np.float64)),
                       "shed_ratio": pa.array(np.full(n_shed, d.shed_ratio, np.float64))})
        work["shed"] = sh
    # blocks -> workers (existing, then the new ones); a new block the other stream already left behind is not kept
    next_block = int(meta.get("next_block", 0))
    fresh = [(s, Block(t).index(p.index_columns(s))) for s in sides for t in cut_blocks(kept[s], d.block_size)]
    fresh = [(s, b) for s, b in fresh if not (s in bounds and b.ts_max <= bounds[s])]
    sizes = [int(r["n"]) for r in live_rows] + [len(b) for _, b in fresh]
    current = [int(r["worker"]) for r in live_rows] + [-1] * len(fresh)
    assign = assign_blocks(sizes, current, d.workers, d.block_size)
    moved = sum(1 for a, c in zip(assign, current) if c >= 0 and a != c)
    rows = [(next_block + i, s, assign[len(live_rows) + i], b) for i, (s, b) in enumerate(fresh)]
    blocks = None
    if state is not None:  # state rows in block_id order, as live_rows
        blocks = state.set_column(state.column_names.index("worker"), "worker",
                                  pa.array(assign[:len(live_rows)], pa.int32()))
    joined = join(blocks, kept, p, u.map_tasks)
    work["joined"] = joined
    work["blocks"] = block_table(rows)
    st = joined.filter(pc.equal(joined.column("kind"), int(RowKind.STATS))).to_pylist()
    secs = time.perf_counter() - t0
    loads = [0] * d.workers
    nblocks = [0] * d.workers
    for n, w in zip(sizes, assign):
        loads[w] += n
        nblocks[w] += 1
    wsecs: dict[int, float] = {}
    per_task: dict[int, list[int]] = {}
    for r in st:
        wsecs[int(r["worker"])] = wsecs.get(int(r["worker"]), 0.0) + float(r["seconds"])
        if int(r["task"]) >= 0:
            c = per_task.setdefault(int(r["task"]), [0, 0])
            c[0] += int(r["candidates"])
            c[1] += int(r["pairs"])
    pairs = sum(c[1] for c in per_task.values())
    cand = sum(c[0] for c in per_task.values())
    out: list[tuple[Any, ...]] = [(
        "s2j", secs, "unit", u.id, None, None, d.tau, d.workers, d.shed_ratio, len(shed_rows), d.block_size,
        input_scans, len(p.tasks), incoming, processed, live, len(live_rows) + len(fresh), cand, pairs, secs,
        d.scaled)]
    for w in range(d.workers):
        out.append(("s2j", wsecs.get(w, 0.0), "worker", u.id, w, None, None, d.workers, None, None, None, None, None,
                    None, None, loads[w], nblocks[w], None, None, None, None))
    for i, t in enumerate(p.tasks):
        c = per_task.get(i, [0, 0])
        out.append(("s2j", None, "task", u.id, None, t.name, None, None, None, None, None, None, None, None, None,
                    None, None, c[0], c[1], None, None))
    dec = [(d.workers, d.high, d.low, next_block + len(fresh), len(shed_rows))]
    work["stats"] = rows_table(out, STATS_SCHEMA)
    work["decision"] = rows_table(dec, DECISION_SCHEMA)
    return {"work": work, "unit": u.id, "tau": d.tau, "workers": d.workers, "shed": len(shed_rows),
            "shed_ratio": d.shed_ratio,
            "block_size": d.block_size, "tuples_in": incoming, "processed": processed, "pairs": pairs,
            "moved_blocks": moved, "new_blocks": len(fresh), "expired_blocks": len(gone), "live": live,
            "high": d.high, "low": d.low,
            "next_block": next_block + len(fresh), "seconds": secs}
