"""Quality gates of the set-similarity join (Great Expectations): on the token records, and on
the joined pairs before they are published. Gates write nothing."""

from __future__ import annotations

from typing import Any

from jobs.ssj import increment
from jobs.ssj.common import SSJRun
from simjoin.operators.setsim import RECORD_COLUMNS
from simjoin.pipeline.context import StageContext
from simjoin.quality.gates import Expect, columns_expectations, pairs_expectations, run_suite


def records(spark: Any, job: SSJRun, inc: increment.Increment) -> Any:
    """This run's token records (the executor's partitions): kept by the tokenize stage of this
    process, else read from its table."""
    ex = job.executor(spark, inc)
    return job.frame("records", lambda: ex.scan(job.tables.tokens, list(RECORD_COLUMNS),
                                                 where=[("run_id", "=", job.run_id)]))


def staged_pairs(spark: Any, job: SSJRun, inc: increment.Increment) -> Any:
    """This run's staged pairs (the executor's partitions): kept by the join of this process, else
    read from the staging table."""
    ex = job.executor(spark, inc)
    return job.frame("pairs", lambda: ex.scan(job.tables.staging, list(increment.PAIR_COLS),
                                              where=[("run_id", "=", job.run_id)]))


def _use_gate_server(ex: Any) -> None:
    """Where the executor's frames are validated: a pyarrow Table in the warm gate server (started
    if none runs: an Airflow gate task then never imports Great Expectations), a DataFrame here."""
    from simjoin.quality.gates import preload

    preload(process=ex.gate_server)


def tokens(ctx: StageContext) -> dict[str, Any]:
    spark, job = ctx.session, ctx.run
    inc = increment.load(spark, job)
    ex = job.executor(spark, inc)
    _use_gate_server(ex)
    df = ex.frame(records(spark, job, inc))
    expect = columns_expectations({"rid": "LongType", "id": "LongType", "length": "IntegerType"},
                                  not_null=["rid", "id", "tokens", "length"])
    expect += [Expect.of("ExpectColumnValuesToBeUnique", column="rid"),
               Expect.of("ExpectCompoundColumnsToBeUnique", column_list=["side", "id"]),
               Expect.of("ExpectColumnValuesToBeBetween", column="length", min_value=1)]
    res = run_suite(df, "ssj_tokens", expect)
    return {"table": job.tables.tokens, "expectations": res.evaluated}


def pairs(ctx: StageContext) -> dict[str, Any]:
    """The staged pairs meet the pair contract; an incremental run's published partition - its base
    run's pairs with the new ones - holds no pair twice (suite ``ssj_published``)."""
    spark, job = ctx.session, ctx.run
    inc = increment.load(spark, job)
    ex = job.executor(spark, inc)
    _use_gate_server(ex)
    staged = staged_pairs(spark, job, inc)
    # similarities are in [θ, 1]; the tolerance only absorbs float rounding of the score itself
    res = run_suite(ex.frame(staged), "ssj_pairs", pairs_expectations("similarity", job.cfg.threshold - 1e-9,
                                                                      1.0 + 1e-9, self_join=not job.rs))
    n = res.evaluated
    if inc.incremental:
        unique = Expect.of("ExpectCompoundColumnsToBeUnique", column_list=["left_id", "right_id"])
        n += run_suite(ex.frame(increment.published(spark, job, inc, staged)), "ssj_published", [unique]).evaluated
    return {"table": job.tables.staging, "expectations": n}
