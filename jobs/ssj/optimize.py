"""Stage 2: the optimizer (Fier & Freytag Sec. 2.1-2.5): length statistics and the records' measured
prefix work -> plan table, one row per unit (node, modgroup) with index lengths, probe lengths,
estimated cost and RAM, and one row per (n, m) the search tried with why it was pruned, kept or
chosen."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from jobs.ssj.common import SSJRun
from simjoin.core.setsim import Plan, RamFactors, make_plan, search_plan
from simjoin.core.setsim.work import measured_costs
from simjoin.log import get_logger
from simjoin.operators import setsim as O
from simjoin.operators.setsim_steps import measure_slices, merge_measured
from simjoin.pipeline.context import StageContext
from simjoin.spark import delta

log = get_logger("simjoin.ssj")


def run(ctx: StageContext) -> dict[str, Any]:
    spark, job = ctx.session, ctx.run
    plan = make(spark, job)
    mods = sorted({plan.unit_mod(u) for u in plan.units})
    from jobs.ssj import increment

    return {"units": plan.n_units, "n": plan.n, "m": plan.m, "mods": mods, "deviation": float(plan.deviation),
            "reason": plan.reason, "executor": increment.load(spark, job).executor}


def make(spark: Any, job: SSJRun) -> Plan:
    from jobs.ssj import increment
    from jobs.ssj.gates import records as read_records

    cfg = job.cfg
    inc = increment.load(spark, job)
    rows = job.frame("length_rows", lambda: delta.read_arrow_any(
        spark, job.tables.lengths, [("run_id", "=", job.run_id)], ["length", "count"]).to_pylist())
    rows = sorted(rows, key=lambda r: r["length"])
    lengths = np.array([r["length"] for r in rows], dtype=np.int64)
    counts = np.array([r["count"] for r in rows], dtype=np.int64)
    factors = RamFactors.kernel()
    if cfg.workers is not None or cfg.mod is not None:
        plan = make_plan(lengths, counts, cfg.threshold, cfg.similarity, n=cfg.workers or 1, m=cfg.mod or 1,
                         factors=factors)
        plan = Plan(theta=plan.theta, sim=plan.sim, n=plan.n, m=plan.m, units=plan.units, deviation=plan.deviation,
                    reason=f"set by the user: --workers {cfg.workers or 1} --mod {cfg.mod or 1}")
    else:
        ex = job.executor(spark, inc)
        room = ex.unit_budget(cfg.memory_gb)
        t0 = time.perf_counter()
        n = int(counts.sum())
        if "measures" in job.frames:  # taken by the encode pass of this process's tokenize stage
            work, fraction, results, sampled = merge_measured(job.frames["measures"], cfg.threshold,
                                                              cfg.similarity, job.rs, n)
        else:
            work, fraction, results, sampled = measure_slices(ex, read_records(spark, job, inc), cfg.threshold,
                                                              cfg.similarity, job.rs, n)
        log.info("ssj optimize: slice costs measured in %.1fs: %.3g posting visits (%s of the records), "
                 "%.3g result pairs (from a join of %s of them)", time.perf_counter() - t0, sum(work.values()),
                 "all" if fraction >= 1 else f"{fraction:.1%}", sum(results.values()),
                 "all" if sampled >= 1 else f"{sampled:.1%}")
        costs = measured_costs(lengths, work, results)
        plan = search_plan(lengths, counts, cfg.threshold, cfg.similarity, slots=room.slots,
                           memory_bytes=room.memory_bytes, factors=factors, costs=costs,
                           total_units=cfg.total_units, skew_factor=cfg.skew_factor)
        log.info("ssj optimize: memory per unit %.2f GiB (%s)", room.memory_bytes / 2**30, room.source)
        for c in plan.search:
            log.info("ssj optimize: t=%d n=%d m=%d %s: %s", c.t, c.n, c.m, c.verdict, c.reason)
    delta.overwrite_rows(spark, [(*r, inc.executor, inc.executor_reason, job.run_id) for r in O.plan_rows(plan)],
                         O.PLAN_SCHEMA + ", executor string, executor_reason string, run_id string",
                         job.tables.plan, job.part, merge_schema=True)
    log.info("ssj optimize: n=%d m=%d -> %d units, cost deviation %.2f, %s", plan.n, plan.m, plan.n_units,
             plan.deviation, inc.executor.replace("_", " "))
    return job.keep("plan", plan)  # type: ignore[no-any-return]


def load_plan(spark: Any, job: SSJRun) -> Plan:
    """The plan kept by this process's optimizer, else this run's plan table."""
    if "plan" in job.frames:
        return job.frames["plan"]  # type: ignore[no-any-return]
    rows = delta.read_arrow_any(spark, job.tables.plan, [("run_id", "=", job.run_id)]).to_pylist()
    return O.plan_from_rows(rows)
