"""Quality gates of the set-similarity join (Great Expectations): on the token records, and on
the joined pairs before they are published. Gates write nothing."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.ssj import increment
from jobs.ssj.common import SSJRun
from simjoin.operators import setsim as O
from simjoin.quality.gates import Expect, columns_expectations, pairs_expectations, run_suite
from simjoin.spark import delta


def records(spark: SparkSession, job: SSJRun, inc: increment.Increment) -> Any:
    """This run's token records: kept by the tokenize stage of this process, else read from its table
    (with deltalake on the in-process path)."""
    if inc.in_process:
        return job.frame("records", lambda: delta.read_arrow_any(
            spark, job.tables.tokens, [("run_id", "=", job.run_id)], list(O.RECORD_COLUMNS)))
    return job.frame("records", lambda: delta.read_table(spark, job.tables.tokens)
                     .filter(F.col("run_id") == job.run_id))


def staged_pairs(spark: SparkSession, job: SSJRun, inc: increment.Increment) -> Any:
    """This run's staged pairs: kept by the join of this process, else read from the staging table."""
    if inc.in_process:
        return job.frame("pairs", lambda: delta.read_arrow_any(
            spark, job.tables.staging, [("run_id", "=", job.run_id)], list(increment.PAIR_COLS)))
    return job.frame("pairs", lambda: delta.read_table(spark, job.tables.staging)
                     .filter(F.col("run_id") == job.run_id))


def _use_gate_server(inc: increment.Increment) -> None:
    """On the in-process path the suites run in the warm gate server (started if none runs): an
    Airflow gate task then never imports Great Expectations either."""
    if inc.in_process:
        from simjoin.quality.gates import preload

        preload(process=True)


def tokens(spark: SparkSession, job: SSJRun) -> dict[str, Any]:
    inc = increment.load(spark, job)
    _use_gate_server(inc)
    df = records(spark, job, inc)
    ex = columns_expectations({"rid": "LongType", "id": "LongType", "length": "IntegerType"},
                              not_null=["rid", "id", "tokens", "length"])
    ex += [Expect.of("ExpectColumnValuesToBeUnique", column="rid"),
           Expect.of("ExpectCompoundColumnsToBeUnique", column_list=["side", "id"]),
           Expect.of("ExpectColumnValuesToBeBetween", column="length", min_value=1)]
    res = run_suite(df, "ssj_tokens", ex)
    return {"table": job.tables.tokens, "expectations": res.evaluated}


def pairs(spark: SparkSession, job: SSJRun) -> dict[str, Any]:
    """The staged pairs meet the pair contract; an incremental run's published partition - its base
    run's pairs with the new ones - holds no pair twice (suite ``ssj_published``)."""
    inc = increment.load(spark, job)
    _use_gate_server(inc)
    df = staged_pairs(spark, job, inc)
    # similarities are in [θ, 1]; the tolerance only absorbs float rounding of the score itself
    res = run_suite(df, "ssj_pairs", pairs_expectations("similarity", job.cfg.threshold - 1e-9, 1.0 + 1e-9,
                                                        self_join=not job.rs))
    n = res.evaluated
    if inc.incremental:
        unique = Expect.of("ExpectCompoundColumnsToBeUnique", column_list=["left_id", "right_id"])
        n += run_suite(increment.published(spark, job, inc, df), "ssj_published", [unique]).evaluated
    return {"table": job.tables.staging, "expectations": n}
