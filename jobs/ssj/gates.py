"""Quality gates of the set-similarity join (Great Expectations): on the token records, and on
the joined pairs before they are published. Gates write nothing."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

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
    df = job.frame("pairs", lambda: delta.read_table(spark, job.tables.staging)
                   .filter(F.col("run_id") == job.run_id))
    # similarities are in [θ, 1]; the tolerance only absorbs float rounding of the score itself
    res = run_suite(df, "ssj_pairs", pairs_expectations("similarity", job.cfg.threshold - 1e-9, 1.0 + 1e-9,
                                                        self_join=not job.rs))
    return {"table": job.tables.staging, "expectations": res.evaluated}
