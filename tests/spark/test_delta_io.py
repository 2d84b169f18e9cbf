import pytest
from pyspark.sql import functions as F

from simjoin.spark import delta


def test_overwrite_partition_is_idempotent_and_time_travel(spark, tmp_table):
    p = tmp_table("parts")
    df = spark.range(10).withColumn("run_id", F.lit("r1"))
    delta.overwrite_partition(df, p, {"run_id": "r1"})
    delta.overwrite_partition(df, p, {"run_id": "r1"})  # retried task: same rows, not twice
    delta.overwrite_partition(spark.range(3).withColumn("run_id", F.lit("r2")), p, {"run_id": "r2"})
    t = delta.read_table(spark, p)
    assert t.count() == 13
    assert t.filter("run_id = 'r1'").count() == 10
    assert delta.read_table(spark, p, version=0).count() == 10
    assert delta.latest_version(spark, p) == 2
    ops = [r["operation"] for r in delta.history(spark, p).orderBy("version").collect()]
    assert ops == ["WRITE", "WRITE", "WRITE"]


def test_append_idempotent_skips_replayed_txn(spark, tmp_table):
    p = tmp_table("app")
    delta.append_idempotent(spark.range(5), p, "pipe/out", 0)
    delta.append_idempotent(spark.range(5), p, "pipe/out", 0)  # replay of batch 0
    delta.append_idempotent(spark.range(5, 8), p, "pipe/out", 1)
    assert delta.read_table(spark, p).count() == 8


def test_merge_upserts_state(spark, tmp_table):
    p = tmp_table("state")
    delta.merge(spark.createDataFrame([(1, "a"), (2, "b")], "k long, v string"), p, ["k"])
    delta.merge(spark.createDataFrame([(2, "B"), (3, "c")], "k long, v string"), p, ["k"])
    rows = sorted(tuple(r) for r in delta.read_table(spark, p).collect())
    assert rows == [(1, "a"), (2, "B"), (3, "c")]


def test_missing_table_and_bad_version(spark, tmp_table):
    with pytest.raises(FileNotFoundError, match="no Delta table"):
        delta.read_table(spark, tmp_table("nothing"))
    p = tmp_table("v")
    delta.overwrite(spark.range(2), p)
    with pytest.raises(ValueError, match="allowed >= 0"):
        delta.read_table(spark, p, version=-1)


def test_background_writes_complete_and_raise(spark, tmp_table):
    a, b = tmp_table("bg_a"), tmp_table("bg_b")
    with delta.background_writes():
        delta.overwrite_partition(spark.range(7).withColumn("run_id", F.lit("r")), a, {"run_id": "r"})
        delta.overwrite_partition(spark.range(3).withColumn("run_id", F.lit("r")), b, {"run_id": "r"})
    assert delta.read_table(spark, a).count() == 7 and delta.read_table(spark, b).count() == 3
    with pytest.raises(ValueError, match="partition columns"):
        with delta.background_writes():
            delta.overwrite_partition(spark.range(3), b, {"run_id": "r"})  # checked before submitting
    bad = spark.range(3).withColumn("run_id", F.lit("r")).selectExpr("id", "run_id", "IF(id = 1, CAST(raise_error('boom') AS long), id) AS x")
    with pytest.raises(Exception, match="boom"):
        with delta.background_writes():
            delta.overwrite_partition(bad, tmp_table("bg_c"), {"run_id": "r"})
