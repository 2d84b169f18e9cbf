"""Streaming HyperCube stage 2, dispatch (Section 3.2): the unit's (side, key) counts enter the
heavy-hitter summary; the dispatcher classifies heavy and light keys, compares each heavy key's
grid with its desired sides (factor-2 rule) and plans the migration steps, whose volume - copies
of held tuples sent to tasks they were not on - is counted on the held tuples of the keys that
change. To ``<output>_work``: ``dispatch`` (the new dispatcher), ``sketch`` and ``grids`` (rows
``publish`` appends to the state)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.hypercube.common import HyperCubeRun, dispatcher_of, held_of
from simjoin.core.hypercube.route import moved_copies
from simjoin.core.hypercube.sketch import Summary, counters_for, merge_all
from simjoin.io.rows import rows_table
from simjoin.log import get_logger
from simjoin.operators.hypercube import batch_counts
from simjoin.pipeline.context import StageContext

log = get_logger("simjoin.hypercube")

SKETCH_SCHEMA = "side byte, k long, count long, n long, ts_max long"
DISPATCH_SCHEMA = "dispatcher string, migrated long, heavy int, n long"
GRID_SCHEMA = ("k long, p_r int, p_s int, est_r long, est_s long, desired_r double, desired_s double, "
               "tasks array<long>, workers array<int>, actions string, migrated long")


def _summary(rows: list[Any], cap: int) -> Summary:
    if not rows:
        return Summary.empty(cap)
    live = [r for r in rows if r["k"] is not None]  # an empty summary keeps one row for its n
    return Summary(cap, np.array([r["side"] for r in live], np.int8), np.array([r["k"] for r in live], np.int64),
                   np.array([r["count"] for r in live], np.int64), int(rows[0]["n"]))


def previous_summary(u: Any, run: HyperCubeRun, now_us: int) -> Summary:
    """Whole history: the running summary of the last unit. Window: the merge of the summaries of
    the units whose newest tuple is inside the window."""
    cap = counters_for(run.cfg.eps)
    t = u.read_state(run.state("sketch"), [("unit", "<", int(u.id))])
    rows = [] if t is None else t.to_pylist()
    if run.window_us <= 0:
        last = max((int(r["unit"]) for r in rows), default=None)
        return _summary([r for r in rows if int(r["unit"]) == last], cap)
    per: dict[int, list[Any]] = {}
    for r in rows:
        if int(r["ts_max"]) > now_us - run.window_us:
            per.setdefault(int(r["unit"]), []).append(r)
    return merge_all(cap, (_summary(rs, cap) for _, rs in sorted(per.items())))


def _held_keys(run: HyperCubeRun, u: Any, keys: list[int]) -> Any:
    """(side, id, k) of the held tuples of ``keys``, as a pyarrow Table, or None."""
    h = held_of(run, u)
    return None if h is None else h.filter(pc.is_in(h.column("k"), pa.array(keys, pa.int64()))).select(
        ["side", "id", "k"])


def run(ctx: StageContext) -> dict[str, Any]:
    run_: HyperCubeRun = ctx.run
    u = ctx.unit
    prog = u.progress()
    before = dispatcher_of(run_, prog.meta)
    cap = counters_for(run_.cfg.eps)
    recs = u.records
    ts_max = int(pc.max(recs.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())).as_py())
    prev = previous_summary(u, run_, ts_max)
    s, k, c, n = batch_counts(recs, cap + 1, prev.keys())
    batch = Summary.of(cap, s, k, c, n)
    est = prev.merge(batch)
    if run_.cfg.strategy == "phj":
        after, steps, desired = before, [], {}
    else:
        after, steps, desired = before.plan(est)
    changed = sorted({st.key for st in steps})
    moved: dict[int, int] = {}
    if changed:
        rows = _held_keys(run_, u, changed)
        for key in changed:
            if rows is None or rows.num_rows == 0:
                moved[key] = 0
                continue
            kk = rows.column("k").to_numpy()
            m = kk == key
            moved[key] = moved_copies(before.grids.get(key), after.grids.get(key),
                                      rows.column("side").to_numpy()[m], rows.column("id").to_numpy()[m], key, run_.p)
    for st in steps:
        log.info("hypercube unit %d: key %d %s %s -> %s", u.id, st.key, st.action, st.before, st.after)
    # the summary this unit leaves: whole history the running one; with a window its own
    keep = est if run_.window_us <= 0 else batch
    sketch_rows: list[tuple[Any, ...]] = [(int(a), int(b), int(cn), int(keep.n), ts_max)
                   for a, b, cn in zip(keep.side, keep.key, keep.count, strict=True)]
    if not sketch_rows:
        sketch_rows = [(0, None, 0, int(keep.n), ts_max)]
    grid_rows = []
    for key in sorted(after.grids):
        g = after.grids[key]
        dr, ds = desired.get(key, (float("nan"), float("nan")))
        grid_rows.append((key, g.p_r, g.p_s, int(est.estimate(0, np.array([key]))[0]),
                          int(est.estimate(1, np.array([key]))[0]), float(dr), float(ds),
                          [int(t) for t in g.tasks.ravel()], [int(w) for w in after.worker_of(g.tasks.ravel())],
                          ",".join(st.action for st in steps if st.key == key), int(moved.get(key, 0))))
    for key in changed:  # keys that turned light
        if key not in after.grids:
            grid_rows.append((key, 0, 0, int(est.estimate(0, np.array([key]))[0]),
                              int(est.estimate(1, np.array([key]))[0]), float("nan"), float("nan"), [], [],
                              "light", int(moved.get(key, 0))))
    migrated = int(sum(moved.values()))
    run_.keep(f"hypercube_dispatcher_{u.id}", after)
    work = {"sketch": rows_table(sketch_rows, SKETCH_SCHEMA), "grids": rows_table(grid_rows, GRID_SCHEMA),
            "dispatch": rows_table([(json.dumps(after.to_json()), migrated, len(after.grids), int(est.n))],
                                   DISPATCH_SCHEMA)}
    return {"unit": u.id, "heavy": len(after.grids), "steps": len(steps), "migrated": migrated, "n": int(est.n),
            "work": work}


def dispatcher(run_: HyperCubeRun, u: Any) -> Any:
    """The unit's dispatcher (kept in this process, else read from the dispatch work table)."""
    from simjoin.core.hypercube.dispatch import Dispatcher

    key = f"hypercube_dispatcher_{u.id}"
    if key not in run_.frames:
        run_.keep(key, Dispatcher.from_json(json.loads(dispatch_row(u)["dispatcher"])))
    return run_.frames[key]


def dispatch_row(u: Any) -> dict[str, Any]:
    """The unit's ``dispatch`` work row (dispatcher, migrated, heavy, n)."""
    return u.work("dispatch").to_pylist()[0]  # type: ignore[no-any-return]
