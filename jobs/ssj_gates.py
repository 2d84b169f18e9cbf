"""Quality gates of the set-similarity join: on the token records, and on the joined pairs."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.ssj_common import SSJRun
from simjoin.log import get_logger, stage
from simjoin.quality.gates import columns_expectations, pairs_expectations, run_suite
from simjoin.spark import delta

log = get_logger("simjoin.ssj")


def tokens(spark: SparkSession, job: SSJRun, df: DataFrame | None = None) -> None:
    import great_expectations.expectations as gxe

    with stage("ssj gate tokens", log):
        if df is None:
            df = delta.read_table(spark, job.tables.tokens).filter(F.col("run_id") == job.run_id)
        ex = columns_expectations({"rid": "LongType", "id": "LongType", "length": "IntegerType"},
                                  not_null=["rid", "id", "tokens", "length"])
        ex += [gxe.ExpectColumnValuesToBeUnique(column="rid"),
               gxe.ExpectCompoundColumnsToBeUnique(column_list=["side", "id"]),
               gxe.ExpectColumnValuesToBeBetween(column="length", min_value=1)]
        run_suite(df, "ssj_tokens", ex)


def pairs(spark: SparkSession, job: SSJRun, df: DataFrame | None = None) -> None:
    with stage("ssj gate pairs", log):
        if df is None:
            df = delta.read_table(spark, job.tables.staging).filter(F.col("run_id") == job.run_id)
        # similarities are in [θ, 1]; the tolerance only absorbs float rounding of the score itself
        run_suite(df, "ssj_pairs", pairs_expectations("similarity", job.cfg.threshold - 1e-9, 1.0 + 1e-9,
                                                      self_join=not job.rs))
