"""Stage: publish the gated pairs of this run to the output table (its run_id partition). An
incremental run publishes its base run's pairs with the new ones (``jobs.ssj.increment``)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.ssj import increment
from jobs.ssj.common import SSJRun
from simjoin.log import get_logger
from simjoin.spark import delta, pins

log = get_logger("simjoin.ssj")
COLS = increment.PAIR_COLS


def run(spark: SparkSession, job: SSJRun) -> dict[str, Any]:
    """Copy the gated pairs (kept by the join in this process, else the staging table) to the output,
    with the base run's pairs for an incremental run; then record the count and mark the run published."""
    from jobs.ssj.gates import staged_pairs

    inc = increment.load(spark, job)
    if inc.in_process:
        return _run_in_process(spark, job, inc, staged_pairs(spark, job, inc))
    staged = staged_pairs(spark, job, inc).select(*COLS)
    out, n = increment.published(spark, job, inc, staged), None  # unique by (left_id, right_id): gate_pairs
    if not inc.incremental and "pairs" in job.frames:  # the join kept them persisted: count before the write
        n = staged.count()
    with delta.in_order():  # the pairs, then their count (a base for later runs), then "published"
        delta.overwrite_partition(out.withColumn("run_id", F.lit(job.run_id)), job.output, job.part)
        if n is None:
            n = delta.read_table(spark, job.output).filter(F.col("run_id") == job.run_id).count()
        increment.write(spark, job, inc, pairs=n)
        pins.mark_published(spark, job.tables.runs, job.run_id)
    new = staged.count() if inc.incremental else n
    log.info("ssj publish: %d pairs -> %s (%s)", n, job.output,
             f"{new} new on top of run {inc.base_run}" if inc.incremental else "full join")
    return {"pairs": n, "new_pairs": new, "mode": inc.mode, "base_run": inc.base_run, "table": job.output,
            "run_id": job.run_id}


def _run_in_process(spark: Any, job: SSJRun, inc: increment.Increment, staged: Any) -> dict[str, Any]:
    """The publish stage without Spark: the same commits, in the same order, with deltalake."""
    out = increment.published(spark, job, inc, staged)
    n = out.num_rows
    with delta.in_order():  # the pairs, then their count (a base for later runs), then "published"
        delta.overwrite_partition_arrow(spark, out, job.output, job.part)
        increment.write(spark, job, inc, pairs=n)
        pins.mark_published(spark, job.tables.runs, job.run_id)
    new = staged.num_rows if inc.incremental else n
    log.info("ssj publish: %d pairs -> %s (%s)", n, job.output,
             f"{new} new on top of run {inc.base_run}" if inc.incremental else "full join")
    return {"pairs": n, "new_pairs": new, "mode": inc.mode, "base_run": inc.base_run, "table": job.output,
            "run_id": job.run_id, "executor": inc.executor}
