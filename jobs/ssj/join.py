"""Stage 3: the distributed join. Each plan unit runs as its own task of the run's executor with a
local PPJoin (``simjoin.operators.setsim_steps.join_units``); pairs go to the staging table, one
stats row per unit to the stats table. An incremental run (``jobs.ssj.increment``) stages only the
pairs with an appended record."""

from __future__ import annotations

from typing import Any

from jobs.ssj import increment, placement
from jobs.ssj.common import SSJRun
from jobs.ssj.optimize import load_plan
from simjoin.contracts import STATS_COMMON_SCHEMA
from simjoin.log import get_logger
from simjoin.operators import setsim_steps as steps
from simjoin.pipeline.context import StageContext
from simjoin.spark import delta

log = get_logger("simjoin.ssj")
STATS_SCHEMA = ("unit int, records_indexed long, records_probed long, candidates long, verified long, results long, "
                "wall_seconds double, task_partition int, node int, modgroup int, est_cost double, "
                "est_ram_bytes long, actual_cost double, run_id string, " + STATS_COMMON_SCHEMA
                + ", cpu_seconds double")
STAT_COLS = [c.split()[0] for c in STATS_SCHEMA.split(", ")]


def stats_rows(job: SSJRun, plan: Any, unit_stats: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """One stats row per plan unit (``STATS_SCHEMA``): its counters summed over an increment's
    blocks, completed with the plan's estimates."""
    got: dict[int, list] = {}
    for st in unit_stats:
        now = [st["unit"], *(st[k] for k in STAT_COLS[1:8]), st["cpu_seconds"]]
        have = got.get(st["unit"])
        got[st["unit"]] = now if have is None else [
            *have[:1], *(x + int(y) for x, y in zip(have[1:6], now[1:6])),
            have[6] + float(now[6]), have[7], have[8] + float(now[8])]
    stat_rows = []
    for u in plan.units:
        g = got.get(u.unit)
        vals = [int(x) for x in g[1:6]] if g else [0] * 5
        wall, cpu = (float(g[6]), float(g[8])) if g else (0.0, 0.0)
        stat_rows.append((u.unit, *vals, wall, int(g[7]) if g else None, u.node, u.modgroup,
                          float(u.est_cost), int(u.est_ram_bytes), float(vals[2]), job.run_id, "ssj", wall, cpu))
    return stat_rows


def run(ctx: StageContext) -> dict[str, Any]:
    """Run every unit; write the stats table and this run's staging pairs; keep the pairs for the
    gate and the publish stage of this process."""
    spark, job = ctx.session, ctx.run
    from jobs.ssj.gates import records as read_records

    plan = load_plan(spark, job)
    inc = increment.load(spark, job)
    inc = placement.for_join(spark, job, inc)  # a killed in-process join goes on on Spark
    ex = job.executor(spark, inc)
    records = read_records(spark, job, inc)
    kept = []
    if inc.incremental:  # only the pairs with an appended record: R-S joins against all records
        parts, unit_stats = [], []
        for block in steps.increment_blocks(ex, records, job.rs):
            pairs, st, res = steps.join_units(ex, block, plan, True)
            parts.append(pairs)
            unit_stats += st
            kept.append(res)
        pairs = ex.union(parts)
        if not job.rs:
            pairs = ex.persist(steps.self_pairs(ex, pairs))
            kept.append(pairs)
    else:
        pairs, unit_stats, res = steps.join_units(ex, records, plan, job.rs)
        kept.append(res)
    stat_rows = stats_rows(job, plan, unit_stats)
    delta.overwrite_rows(spark, stat_rows, STATS_SCHEMA, job.tables.stats, job.part, merge_schema=True)
    ex.write(pairs, job.tables.staging, job.part)
    job.keep("pairs", pairs)
    job.keep("join_results", kept)
    n_pairs = ex.count(pairs) if inc.incremental and not job.rs else None
    return summarize(stat_rows, inc, n_pairs)


def summarize(stat_rows: list[tuple[Any, ...]], inc: increment.Increment, n_pairs: int | None) -> dict[str, Any]:
    """The join's log lines (one per unit) and result; ``n_pairs``: the staged pairs, when not the
    units' results summed (an incremental self-join drops the repeats)."""
    rows: list[dict[str, Any]] = [dict(zip(STAT_COLS, r)) for r in stat_rows]
    for row in rows:
        log.info("ssj unit %d (node %d, modgroup %d): indexed %d probed %d candidates %d results %d in %.2fs "
                 "(%.2fs CPU)", row["unit"], row["node"], row["modgroup"], row["records_indexed"],
                 row["records_probed"], row["candidates"], row["results"], row["wall_seconds"], row["cpu_seconds"])
    walls = [row["wall_seconds"] for row in rows]
    cpus = [row["cpu_seconds"] for row in rows if row["records_indexed"] or row["records_probed"]]
    if n_pairs is None:
        n_pairs = sum(r["results"] for r in rows)
    out = {"pairs": int(n_pairs), "mode": inc.mode, "units": len(rows), "executor": inc.executor,
           "candidates": int(sum(row["candidates"] for row in rows)),
           "slowest_unit_s": float(max(walls, default=0.0)), "fastest_unit_s": float(min(walls, default=0.0)),
           "slowest_unit_cpu_s": float(max(cpus, default=0.0)), "fastest_unit_cpu_s": float(min(cpus, default=0.0))}
    return out
