"""The micro-batch runner: availableNow over a Delta source, state in Delta, idempotent output,
and a crash in the middle of a batch that a rerun repairs without duplicates or gaps."""

import datetime as dt

import pytest
from pyspark.sql import functions as F

from simjoin.spark import delta
from simjoin.spark.runner import assign_count_windows, assign_windows, run_microbatches

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _append(spark, path, lo, hi):
    rows = [(i, T0 + dt.timedelta(seconds=i)) for i in range(lo, hi)]
    spark.createDataFrame(rows, "id long, ts timestamp").write.format("delta").mode("append").save(path)


class Boom(RuntimeError):
    pass


def test_crash_mid_batch_then_rerun_has_no_duplicates_and_no_gaps(spark, tmp_path):
    src, out, ckpt = str(tmp_path / "src"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    state = {"seen": str(tmp_path / "state_seen")}
    _append(spark, src, 0, 100)
    crash = {"armed": True}

    def handler(batch, ctx):
        # piece 1: even ids, piece 2: odd ids; the crash comes after piece 1 is committed
        ctx.write_output(batch.filter("id % 2 = 0"), out, piece="even")
        if crash["armed"]:
            raise Boom("killed in the middle of the batch")
        ctx.write_output(batch.filter("id % 2 = 1"), out, piece="odd")
        agg = batch.agg(F.lit("all").alias("k"), F.count("*").alias("n"))
        prev = ctx.state("seen")
        if prev is not None:
            agg = agg.join(prev.withColumnRenamed("n", "n0"), "k", "left").select(
                "k", (F.col("n") + F.coalesce(F.col("n0"), F.lit(0))).alias("n"))
        ctx.save_state("seen", agg, ["k"])

    with pytest.raises(Exception, match="killed in the middle"):
        run_microbatches(spark, src, ckpt, "crashy", handler, state)
    half = delta.read_table(spark, out)
    assert half.count() == 50 and half.filter("id % 2 = 1").count() == 0  # partial output exists

    crash["armed"] = False
    s1 = run_microbatches(spark, src, ckpt, "crashy", handler, state)
    assert s1.batches == [0] and s1.rows == 100  # the same batch replayed
    got = delta.read_table(spark, out)
    assert got.count() == 100 and got.select("id").distinct().count() == 100
    assert sorted(r.id for r in got.collect()) == list(range(100))

    _append(spark, src, 100, 130)  # new data: only it is processed on the next run
    s2 = run_microbatches(spark, src, ckpt, "crashy", handler, state)
    assert s2.batches == [1] and s2.rows == 30
    got = delta.read_table(spark, out)
    assert got.count() == 130 and got.select("id").distinct().count() == 130
    assert delta.read_table(spark, state["seen"]).first()["n"] == 130
    s3 = run_microbatches(spark, src, ckpt, "crashy", handler, state)  # nothing new
    assert s3.batches == [] and delta.read_table(spark, out).count() == 130


def test_time_windows_tumbling_and_sliding(spark):
    df = spark.createDataFrame([(i, T0 + dt.timedelta(seconds=i)) for i in range(0, 120, 10)], "id long, ts timestamp")
    tumbling = assign_windows(df, 60)
    assert tumbling.count() == 12
    assert tumbling.select("window_start").distinct().count() == 2
    sliding = assign_windows(df, 60, 30)
    # each row is in two 60 s windows sliding by 30 s
    assert sliding.count() == 24
    row = sliding.filter("id = 40").orderBy("window_start").collect()
    assert [r.window_start.replace(tzinfo=None) for r in row] == [
        dt.datetime(2026, 1, 1, 0, 0, 0), dt.datetime(2026, 1, 1, 0, 0, 30)]
    with pytest.raises(ValueError, match="allowed"):
        assign_windows(df, 60, 90)


def test_count_windows(spark):
    df = spark.createDataFrame([(i, T0 + dt.timedelta(seconds=i)) for i in range(10)], "id long, ts timestamp")
    t = assign_count_windows(df, 4)
    assert sorted((r.id, r.window_id) for r in t.collect()) == [(i, i // 4) for i in range(10)]
    s = assign_count_windows(df, 4, 2)
    ids_in_w1 = sorted(r.id for r in s.filter("window_id = 1").collect())
    assert ids_in_w1 == [2, 3, 4, 5]
    assert s.filter("id = 0").count() == 1 and s.filter("id = 5").count() == 2
