"""Stage: publish the gated pairs of this run to the output table (its run_id partition). An
incremental run publishes its base run's pairs with the new ones (``jobs.ssj.increment``)."""

from __future__ import annotations

from typing import Any

from jobs.ssj import increment
from simjoin.log import get_logger
from simjoin.pipeline.context import StageContext
from simjoin.spark import delta, pins

log = get_logger("simjoin.ssj")
COLS = increment.PAIR_COLS


def run(ctx: StageContext) -> dict[str, Any]:
    """Copy the gated pairs (kept by the join in this process, else the staging table) to the output,
    with the base run's pairs for an incremental run; then record the count and mark the run published."""
    spark, job = ctx.session, ctx.run
    from jobs.ssj.gates import staged_pairs

    inc = increment.load(spark, job)
    ex = job.executor(spark, inc)
    staged = staged_pairs(spark, job, inc)
    out = increment.published(spark, job, inc, staged)  # unique by (left_id, right_id): gate_pairs
    n = ex.count(out)
    with delta.in_order():  # the pairs, then their count (a base for later runs), then "published"
        ex.write(out, job.output, job.part)
        increment.write(spark, job, inc, pairs=n)
        pins.mark_published(spark, job.tables.runs, job.run_id)
    for kept in [*job.frames.pop("join_results", []), *job.frames.pop("tokenized", [])]:
        if kept is not None:
            ex.release(kept)
    new = ex.count(staged) if inc.incremental else n
    log.info("ssj publish: %d pairs -> %s (%s)", n, job.output,
             f"{new} new on top of run {inc.base_run}" if inc.incremental else "full join")
    return {"pairs": n, "new_pairs": new, "mode": inc.mode, "base_run": inc.base_run, "table": job.output,
            "run_id": job.run_id, "executor": inc.executor}
