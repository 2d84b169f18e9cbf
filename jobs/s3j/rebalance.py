"""S3J stage 7, rebalance (Section 8.3, Algorithm 1, plus workset splitting): between micro-batches,
from the per-workset load statistics of this unit (the monitoring window: Definition 5 load,
rows, bytes), decide where each workset runs next.

Nothing changes unless a worker deviates more than ``--rebalance-trigger`` x the average load
(20 % by default). Then ``simjoin.core.metric.rebalance`` runs Algorithm 1 over (workset, part)
units - irremovables, moves by removal benefit, targets by addition benefit, an ignore list,
benefit = DI reduction - ``--migration-cost`` x bytes - and, with ``--rebalance split``, first
splits every workset heavier than the average worker load across workers. The new assignment is
appended to ``<output>_state/assignment`` in one Delta commit, tagged with this unit: that table
is the savepoint, and the next unit routes by it (``jobs.s3j.join``). Results are identical with
and without rebalancing. The decision (DI, max/avg worker load before and after, units moved,
worksets split, bytes migrated) goes to ``<output>_work/rebalance``; ``publish`` appends it to
the stats table. Rerunning the stage for the same unit writes nothing twice.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow.compute as pc

from jobs.s3j.common import S3JRun, assignment_arrow, state_arrow
from jobs.s3j.stats import ROW_BYTES, STATS_SCHEMA, stats_row
from simjoin.contracts import RowKind
from simjoin.core.metric import Assignment, rebalance
from simjoin.io.rows import rows_table
from simjoin.pipeline.context import StageContext

ASSIGNMENT_SCHEMA = "partition int, workset_id long, part long, parts long, worker int, unit long"


def run(ctx: StageContext) -> dict[str, Any]:
    run_: S3JRun = ctx.run
    u = ctx.unit
    cfg = run_.cfg
    if cfg.algorithm != "s3j" or cfg.rebalance == "off":
        return {"unit": u.id, "rebalance": "off"}
    ws, prev, homes = _inputs(run_, u)
    if not ws:
        return {"unit": u.id, "work": {"rebalance": rows_table([], STATS_SCHEMA)},
                "fired": False}
    res, assignment, out = decide(cfg, u.id, u.dim, ws, prev, homes)
    if assignment:
        u.append_once("assignment", assignment, ASSIGNMENT_SCHEMA, run_.assignment)
    return {**res, "work": {"rebalance": rows_table(out, STATS_SCHEMA)}}


def _inputs(run_: S3JRun, u: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, list[dict[str, Any]]]:
    """:func:`decide`'s inputs: the per-workset loads, the assignment in force and the worksets'
    home workers."""
    c, m = u.work("counters"), u.work("members")
    c = c.filter(pc.equal(c.column("kind"), int(RowKind.WORKSET)))
    agg = (c.group_by(["partition", "workset_id"]).aggregate([("load", "sum"), ("n_inner", "max"), ("worker", "min")])
           .rename_columns(["partition", "workset_id", "load", "rows", "worker"])
           .sort_by([("partition", "ascending"), ("workset_id", "ascending")]))
    if not agg.num_rows:
        return [], None, []
    new_c = m.filter(pc.equal(m.column("kind"), int(RowKind.CENTROID))).select(["partition", "workset_id", "worker"])
    a = assignment_arrow(run_, u)
    prev = None if a is None else a.to_pylist()
    cent = state_arrow(u, run_.centroids, ["partition", "workset_id", "worker"])
    homes = [] if cent is None else cent.to_pylist()
    return agg.to_pylist(), prev, [*homes, *new_c.to_pylist()]


def decide(cfg: Any, unit: int, dim: int, ws: list[Any], prev_rows: list[Any] | None, home_rows: list[Any]
           ) -> tuple[dict[str, Any], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Algorithm 1 for one unit: ``ws`` its per-workset loads (``partition, workset_id, load,
    rows, worker``, ordered), ``prev_rows`` the assignment in force (or None), ``home_rows`` the
    centroid state's ``partition, workset_id, worker`` (a workset's worker when the assignment
    does not name it). Returns the result, the new assignment's rows (``ASSIGNMENT_SCHEMA``;
    none unless it fired) and the stats rows."""
    P = int(cfg.workers)
    prev = Assignment.empty() if prev_rows is None else _assignment(prev_rows)
    homes: dict[tuple[int, int], int] = {}
    keys = {(int(r["partition"]), int(r["workset_id"])) for r in ws}
    for r in home_rows:
        k = (int(r["partition"]), int(r["workset_id"]))
        if k in keys:
            homes[k] = int(r["worker"])
    p = np.array([int(r["partition"]) for r in ws], np.int64)
    g = np.array([int(r["workset_id"]) for r in ws], np.int64)
    load = np.array([float(r["load"]) for r in ws])
    size = np.array([int(r["rows"]) * (8 * dim + ROW_BYTES) for r in ws], np.float64)
    home = np.array([homes.get((int(a), int(b)), int(r["worker"])) for a, b, r in zip(p, g, ws)], np.int64)
    res = rebalance(p, g, load, size, home, P, previous=prev, trigger=float(cfg.rebalance_trigger),
                    migration_factor=float(cfg.migration_cost), split=cfg.rebalance == "split")
    rows: list[tuple[Any, ...]] = []
    if res.fired:
        a = res.assignment
        rows = [(int(a.partition[i]), int(a.workset_id[i]), int(a.part[i]), int(a.parts[i]), int(a.worker[i]), unit)
                for i in range(len(a))]
    L0, L1 = res.load_before, res.load_after
    avg = float(L0.mean()) if L0.size else 0.0
    out = [stats_row(
        pipeline="s3j", seconds=0.0, level="rebalance", algorithm=cfg.algorithm, unit=unit, load=float(L0.sum()),
        load_imbalance=res.imbalance_before, imbalance_after=res.imbalance_after, max_worker_load=float(L0.max()),
        max_worker_load_after=float(L1.max()), moved=res.moved, split=res.split, bytes_migrated=res.bytes_migrated,
        worksets=int(p.shape[0]), load_after=float(L1.sum()))]
    out += [stats_row(pipeline="s3j", seconds=0.0, level="rebalance_worker", algorithm=cfg.algorithm, unit=unit,
                      worker=k, load=float(L0[k]), load_after=float(L1[k])) for k in range(P)]
    ratio = (float(L1.max()) / avg) if avg > 0 else 1.0
    return ({"unit": unit, "fired": res.fired, "imbalance_before": res.imbalance_before,
             "imbalance_after": res.imbalance_after, "max_over_avg_after": ratio, "moved": res.moved,
             "split": res.split, "bytes_migrated": res.bytes_migrated}, rows, out)


def _assignment(rows: list[Any]) -> Assignment:
    return Assignment.from_arrays([r["partition"] for r in rows], [r["workset_id"] for r in rows],
                                  [r["part"] for r in rows], [r["parts"] for r in rows], [r["worker"] for r in rows])
