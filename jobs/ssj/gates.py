"""Quality gates of the set-similarity join (Great Expectations): on the token records, and on
the joined pairs before they are published. Gates write nothing."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.ssj import increment
from jobs.ssj.common import SSJRun
from simjoin.quality.gates import columns_expectations, pairs_expectations, run_suite
from simjoin.spark import delta


def tokens(spark: SparkSession, job: SSJRun) -> dict[str, Any]:
    from simjoin.quality.gates import expectations

    gxe = expectations()

    df = job.frame("records", lambda: delta.read_table(spark, job.tables.tokens)
                   .filter(F.col("run_id") == job.run_id))
    ex = columns_expectations({"rid": "LongType", "id": "LongType", "length": "IntegerType"},
                              not_null=["rid", "id", "tokens", "length"])
    ex += [gxe.ExpectColumnValuesToBeUnique(column="rid"),
           gxe.ExpectCompoundColumnsToBeUnique(column_list=["side", "id"]),
           gxe.ExpectColumnValuesToBeBetween(column="length", min_value=1)]
    res = run_suite(df, "ssj_tokens", ex)
    return {"table": job.tables.tokens, "expectations": res.evaluated}


def pairs(spark: SparkSession, job: SSJRun) -> dict[str, Any]:
    """The staged pairs meet the pair contract; an incremental run's published partition - its base
    run's pairs with the new ones - holds no pair twice (suite ``ssj_published``)."""
    from simjoin.quality.gates import expectations

    df = job.frame("pairs", lambda: delta.read_table(spark, job.tables.staging)
                   .filter(F.col("run_id") == job.run_id))
    # similarities are in [θ, 1]; the tolerance only absorbs float rounding of the score itself
    res = run_suite(df, "ssj_pairs", pairs_expectations("similarity", job.cfg.threshold - 1e-9, 1.0 + 1e-9,
                                                        self_join=not job.rs))
    n = res.evaluated
    inc = increment.load(spark, job)
    if inc.incremental:
        unique = expectations().ExpectCompoundColumnsToBeUnique(column_list=["left_id", "right_id"])
        n += run_suite(increment.published(spark, job, inc, df), "ssj_published", [unique]).evaluated
    return {"table": job.tables.staging, "expectations": n}
