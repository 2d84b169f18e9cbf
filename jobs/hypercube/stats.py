"""Streaming HyperCube stage 5, statistics: per worker - copies received this micro-batch (new
and held), tasks, output, join seconds, and the load it holds afterwards under the unit's grids
(the paper's load: tuple copies) beside the tuples plain hashing (PHJ) would give it; per unit -
the maximum of each, the optimal bound N/p + sqrt(OUT/p) over the held tuples (N tuples, OUT the
join size of the held tuples), the replication factor, migrated copies and heavy keys; per heavy
key - its grid p_R x p_S and the copies its migration moved. To
``<output>_work/stats``; ``publish`` appends them to ``<output>_stats``."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.hypercube.common import HyperCubeRun, dispatcher_of, held_of, live_mask
from jobs.hypercube.dispatch import dispatch_row, dispatcher
from simjoin.contracts import STATS_COMMON_SCHEMA, RowKind
from simjoin.core.hypercube.stream import optimal_bound
from simjoin.core.unique import unique
from simjoin.io.rows import rows_table
from simjoin.operators.hypercube import loads
from simjoin.pipeline.context import StageContext
from simjoin.runtime.event_time import epoch_us, on_time_max

STATS_SCHEMA = (STATS_COMMON_SCHEMA + ", level string, unit long, worker int, tuples_in long, received long, "
                "new_copies long, tasks long, load long, phj_load long, held long, out_pairs double, bound double, "
                "replication double, migrated long, heavy_keys int, result_pairs long, quarantined long, k long, "
                "p_r int, p_s int")


def _measure(run_: HyperCubeRun, u: Any, disp: Any, full: bool = False) -> tuple[Any, ...]:
    """(per-worker STATS rows, loads, PHJ loads, tuples held, join size of the held, quarantined,
    tuples in, grid rows) of a unit. The held tuples' measures come from the last unit's
    (:func:`_carried`) when nothing can have changed them, else (or with ``full``) from every
    held tuple."""
    j = u.work("joined")
    st = {int(r["worker"]): r for r in j.filter(pc.equal(j.column("kind"), int(RowKind.STATS))).to_pylist()}
    cols = ["side", "id", "k", "ts"]
    recs = u.records.select(cols)
    recs = recs.cast(pa.schema([(c, pa.int8() if c == "side" else recs.schema.field(c).type) for c in cols]))
    carried = None if full else _carried(run_, u, disp, recs, sum(int(r["pairs"]) for r in st.values()))
    if carried is not None:
        ours, phj, n_held, out = carried
    else:
        ours, phj, n_held, out = _held_measures(run_, u, disp, recs, cols)
    qt = u.read_state(run_.tables.quarantine, [("unit", "=", int(u.id))], ["unit"])
    q = 0 if qt is None else qt.num_rows
    return st, ours, phj, n_held, out, q, u.records.num_rows, u.work("grids").to_pylist()


def _held_measures(run_: HyperCubeRun, u: Any, disp: Any, recs: pa.Table, cols: list[str]) -> tuple[Any, ...]:
    """(loads, PHJ loads, tuples held, join size) over every tuple held after the unit."""
    h = held_of(run_, u)
    now = recs if h is None else pa.concat_tables([h.select(cols).cast(recs.schema), recs])
    if run_.window_us > 0:  # the tuples still live after this unit: the event time its publish commits
        ts = recs.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_numpy(zero_copy_only=False)
        side = np.asarray(recs.column("side").to_numpy(zero_copy_only=False), np.int64)
        due = epoch_us(dt.datetime.now(dt.UTC))
        after = u.time.projected({int(s): on_time_max(ts[side == s], due) for s in unique(side).tolist()})
        now = now.filter(pa.array(live_mask(run_, after, now)))
    ours, phj = loads(now, disp)
    k = np.asarray(now.column("k").to_numpy(zero_copy_only=False), np.int64)
    side = np.asarray(now.column("side").to_numpy(zero_copy_only=False), np.int64)
    _, inv = np.unique(k, return_inverse=True)
    r_n = np.bincount(inv, weights=(side == 0), minlength=inv.max() + 1 if inv.size else 0)
    s_n = np.bincount(inv, weights=(side == 1), minlength=inv.max() + 1 if inv.size else 0)
    return ours, phj, int(now.num_rows), float((r_n * s_n).sum())


def _routing(d: Any) -> tuple[Any, ...]:
    """What decides where a tuple's copies go: p, the grids and the heavy tasks' workers."""
    j = d.to_json()
    return j["p"], j["grids"], j["task_worker"]


def _carried(run_: HyperCubeRun, u: Any, disp: Any, recs: pa.Table, pairs: int) -> tuple[Any, ...] | None:
    """The held tuples' measures from the last unit's (``held`` in the progress meta, written by
    publish) plus this unit's tuples, when they are exactly what a full pass would give: no
    window (no tuple expires), the last unit is this one's predecessor, and its dispatcher routes
    every held tuple as this unit's does (no grid or heavy-task worker changed). Then the loads
    are the last ones plus this unit's copies, and the join size the last one plus the pairs this
    unit's join produced (an incremental join yields each pair of the held tuples exactly once).
    None otherwise: per-unit cost then grows with the held tuples."""
    if run_.window_us > 0:
        return None
    meta = u.progress().meta
    prev = meta.get("held")
    if not prev or int(prev.get("unit", -1)) != int(u.id) - 1 or len(prev.get("ours", [])) != disp.p:
        return None
    if _routing(dispatcher_of(run_, meta)) != _routing(disp):
        return None
    ours, phj = loads(recs, disp)
    return (np.asarray(prev["ours"], np.int64) + ours, np.asarray(prev["phj"], np.int64) + phj,
            int(prev["n"]) + recs.num_rows, float(prev["out"]) + float(pairs))


def held_meta(u: Any) -> dict[str, Any]:
    """The unit's held measures as the next unit's :func:`_carried` reads them (from the stats
    work table): its id, tuples held, join size, loads and PHJ loads per worker."""
    rows = u.work("stats").to_pylist()
    unit = next(r for r in rows if r["level"] == "unit")
    workers = sorted((r for r in rows if r["level"] == "worker"), key=lambda r: int(r["worker"]))
    return {"unit": int(u.id), "n": int(unit["held"]), "out": float(unit["out_pairs"]),
            "ours": [int(r["load"]) for r in workers], "phj": [int(r["phj_load"]) for r in workers]}


def run(ctx: StageContext) -> dict[str, Any]:
    run_: HyperCubeRun = ctx.run
    u = ctx.unit
    disp = dispatcher(run_, u)
    p = run_.p
    d = dispatch_row(u)
    st, ours, phj, n_held, out, q, tuples_in, grids = _measure(run_, u, disp)
    bound = optimal_bound(n_held, int(out), p)
    pairs = sum(int(r["pairs"]) for r in st.values())
    rep = float(ours.sum()) / n_held if n_held else 0.0
    secs = [float(r["seconds"]) for r in st.values()]
    rows: list[tuple[Any, ...]] = [(
        "hypercube", max(secs, default=0.0), "unit", u.id, None, tuples_in,
        sum(int(r["received"]) for r in st.values()), sum(int(r["new_copies"]) for r in st.values()),
        sum(int(r["tasks"]) for r in st.values()), int(ours.max()), int(phj.max()), n_held, out, bound, rep,
        int(d["migrated"]), int(d["heavy"]), pairs, q, None, None, None)]
    for w in range(p):
        r = st.get(w)
        rows.append(("hypercube", float(r["seconds"]) if r else 0.0, "worker", u.id, w, None,
                     int(r["received"]) if r else 0, int(r["new_copies"]) if r else 0, int(r["tasks"]) if r else 0,
                     int(ours[w]), int(phj[w]), None, None, None, None, None, None,
                     int(r["pairs"]) if r else 0, None, None, None, None))
    for g in grids:  # each heavy key's grid (0 x 0: it turned light)
        rows.append(("hypercube", 0.0, "grid", u.id, None, None, None, None, g["p_r"] * g["p_s"], None, None, None,
                     None, None, None, int(g["migrated"]), None, None, None, int(g["k"]), int(g["p_r"]), int(g["p_s"])))
    return {"unit": u.id, "work": {"stats": rows_table(rows, STATS_SCHEMA)}, "unit_pairs": pairs,
            "max_load": int(ours.max()),
            "phj_max_load": int(phj.max()), "bound": bound, "replication": rep, "migrated": int(d["migrated"]),
            "heavy": int(d["heavy"]),
            "tuples_in": tuples_in, "quarantined": q}
