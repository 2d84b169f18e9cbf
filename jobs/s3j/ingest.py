"""S3J stage 1, ingest: the engine reads what arrived in the stream(s) since the last run; this
module's ``prepare`` applies S3J's own rules to each micro-batch and assigns its windows.

The engine quarantines null or unreadable ``id``/``ts`` and future rows. Here, bad rows go to
``<output>_quarantine`` with a reason too: a null vector or element, NaN or inf, a wrong
dimension, a zero vector under angular or cosine, a duplicate (side, id) - inside the batch,
earlier in this unit, or already in a still-open window - and records of a window the
watermark has closed (late). Good rows become one row per window they fall in (tumbling: one;
sliding: size / slide) and are staged as the new unit.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

import pyarrow as pa

from jobs.s3j.common import S3JRun, read_state
from simjoin.contracts import Role
from simjoin.quality.quarantine import Rule, split_quarantine, vector_rules, zero_vector
from simjoin.spark import delta
from simjoin.spark.engine import BatchInfo, Prepared, _aware, assign_windows

PAYLOAD = {"vector": lambda t: isinstance(t, T.ArrayType) and isinstance(
    t.elementType, (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType, T.DecimalType))}
PAYLOAD_TEXT = "vector array<double>"


def _seen(spark: SparkSession, run: S3JRun, info: BatchInfo) -> DataFrame | None:
    """(side, id) of records in still-open windows, or staged earlier in this unit."""
    if info.local:  # the keys only, read with deltalake (no Spark job, no vectors)
        import pyarrow.compute as pc

        js = delta.read_arrow(run.join_state, [("unit", "<", int(info.unit))], ["side", "id", "role", "window_end"])
        if js is not None:
            keep = pc.not_equal(js.column("role"), int(Role.BUFFER))
            wm = info.progress.watermark
            if wm is not None:
                keep = pc.and_(keep, pc.greater(js.column("window_end").cast(pa.timestamp("us", tz="UTC")),
                                                pa.scalar(_aware(wm), pa.timestamp("us", tz="UTC"))))
            js = js.filter(keep).select(["side", "id"])
        return run.engine(spark).seen(info, js)  # type: ignore[no-any-return]
    live = read_state(spark, run.join_state, info.unit)
    if live is not None:
        live = live.where(F.col("role") != int(Role.BUFFER))
        wm = info.progress.watermark
        if wm is not None:  # rows of windows the watermark closed may linger until a window ends
            live = live.where(F.col("window_end") > F.lit(wm))
    return run.engine(spark).seen(info, live)  # type: ignore[no-any-return]


def preparer(spark: SparkSession, run: S3JRun) -> Any:
    dims: dict[str, int | None] = {"dim": None}

    def prepare(df: DataFrame, info: BatchInfo) -> Prepared:
        dim = info.progress.meta.get("dim") or dims["dim"]
        if dim is None:
            top = (df.where(F.col("vector").isNotNull()).groupBy(F.size("vector").alias("d")).count()
                   .orderBy(F.desc("count"), "d").first())
            dim = int(top["d"]) if top is not None and top["d"] > 0 else None
        dims["dim"] = dim
        rules = [Rule(F.col("vector").isNull(), "null vector"), *vector_rules("vector", dim)]
        if run.cfg.metric in ("angular", "cosine"):
            rules.append(zero_vector("vector", f"{run.cfg.metric} distance is undefined"))
        dup = F.row_number().over(Window.partitionBy("side", "id").orderBy("ts", "vector")) > 1
        rules.append(Rule(dup, F.concat(F.lit("duplicate id "), F.col("id").cast("string"))))
        seen = _seen(spark, run, info)
        if seen is not None:
            df = df.join(seen, ["side", "id"], "left")
            rules.append(Rule(F.col("_seen").isNotNull(),
                              F.concat(F.lit("duplicate id "), F.col("id").cast("string"), F.lit(" (seen earlier)"))))
        res = split_quarantine(df, rules, table=f"{run.output} micro-batch {info.batch_id}", lazy=info.local)
        good = res.good.drop("_seen") if seen is not None else res.good
        win = assign_windows(good, run.window_s, run.slide_s)
        wm = info.progress.watermark
        late_c = F.lit(False) if wm is None else F.col("window_end") <= F.lit(wm)
        win = win.withColumn("_late", late_c)
        late = win.where("_late").select(
            "id", "ts", "ts_raw", "vector", "side",
            F.concat(F.lit("late: window starting "), F.col("window_start").cast("string"),
                     F.lit(f" closed at watermark {wm}")).alias("reason")).dropDuplicates(["side", "id"])
        staged = win.where(~F.col("_late")).drop("_late", "ts_raw")
        bad = res.bad.drop("_seen") if seen is not None else res.bad
        return Prepared(staged, bad.select("id", "ts", "ts_raw", "vector", "side", "reason").unionByName(late),
                        meta={"dim": dim} if dim else {})

    return prepare


def run(spark: SparkSession, run_: S3JRun) -> dict[str, Any]:
    """Stage everything that arrived since the last run as one unit (or resume the open one)."""
    return run_.engine(spark).ingest(  # type: ignore[no-any-return]
        preparer(spark, run_), PAYLOAD, PAYLOAD_TEXT, casts={"vector": "array<double>"})
