"""S3J stage 1, ingest: the engine reads what arrived in the stream(s) since the last run; this
module's ``prepare`` applies S3J's own rules to each micro-batch and assigns its windows.

The engine quarantines null or unreadable ``id``/``ts`` and future rows. Here, bad rows go to
``<output>_quarantine`` with a reason too: a null vector or element, NaN or inf, a wrong
dimension, a zero vector under angular or cosine, a duplicate (side, id) - inside the batch,
earlier in this unit, or already in a still-open window - and records of a window that ended
at or before the watermark less ``--allowed-lateness`` (``Progress.closed_watermark``): late.
A record of a window still open is staged whatever its ts order (docs/operations.md,
"Lateness"). Good rows become one row per window they fall in (tumbling: one; sliding: size /
slide) and are staged as the new unit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.s3j.common import S3JRun, read_state
from simjoin.contracts import Role
from simjoin.core.metric.stream import window_copies
from simjoin.quality.quarantine import (
    ArrowRule,
    Rule,
    first_by,
    split_quarantine,
    split_quarantine_arrow,
    vector_rules,
    vector_rules_arrow,
    zero_vector,
    zero_vector_arrow,
)
from simjoin.spark import delta
from simjoin.spark.engine import BatchInfo, Prepared, assign_windows, aware, epoch_us, spark_ts_string

PAYLOAD = {"vector": lambda t: isinstance(t, T.ArrayType) and isinstance(
    t.elementType, (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType, T.DecimalType))}
PAYLOAD_TEXT = "vector array<double>"
US = pa.timestamp("us", tz="UTC")


def _closed_text(info: BatchInfo) -> str:
    """The tail of a late row's reason: where windows close (the watermark less the allowed
    lateness, ``Progress.closed_watermark``)."""
    p = info.progress
    if not p.lateness_s:
        return f" closed at watermark {p.watermark}"
    return f" closed at watermark {p.closed_watermark} ({p.watermark} less --allowed-lateness {p.lateness_s:g}s)"


def _live_keys(run: S3JRun, info: BatchInfo) -> pa.Table | None:
    """(side, id) of the join state's records in still-open windows, read with deltalake (no
    Spark job, no vectors)."""
    js = delta.read_arrow(run.join_state, [("unit", "<", int(info.unit))], ["side", "id", "role", "window_end"])
    if js is None:
        return None
    keep = pc.not_equal(js.column("role"), int(Role.BUFFER))
    wm = info.progress.closed_watermark
    if wm is not None:  # rows of windows the watermark closed may linger until a window ends
        keep = pc.and_(keep, pc.greater(js.column("window_end").cast(US), pa.scalar(aware(wm), US)))
    return js.filter(keep).select(["side", "id"])


def _seen(spark: SparkSession, run: S3JRun, info: BatchInfo) -> DataFrame | None:
    """(side, id) of records in still-open windows, or staged earlier in this unit."""
    if info.local:
        return run.engine(spark).seen(info, _live_keys(run, info))  # type: ignore[no-any-return]
    live = read_state(spark, run.join_state, info.unit)
    if live is not None:
        live = live.where(F.col("role") != int(Role.BUFFER))
        wm = info.progress.closed_watermark
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
        wm = info.progress.closed_watermark
        late_c = F.lit(False) if wm is None else F.col("window_end") <= F.lit(wm)
        win = win.withColumn("_late", late_c)
        late = win.where("_late").select(
            "id", "ts", "ts_raw", "vector", "side",
            F.concat(F.lit("late: window starting "), F.col("window_start").cast("string"),
                     F.lit(_closed_text(info))).alias("reason")).dropDuplicates(["side", "id"])
        staged = win.where(~F.col("_late")).drop("_late", "ts_raw")
        bad = res.bad.drop("_seen") if seen is not None else res.bad
        return Prepared(staged, bad.select("id", "ts", "ts_raw", "vector", "side", "reason").unionByName(late),
                        meta={"dim": dim} if dim else {})

    return prepare


def _vector_key(v: Any) -> tuple[Any, ...]:
    """Spark's ascending order of array<double>: a null array first, then element by element
    (a null element first, NaN after every number), a prefix before a longer array."""
    if v is None:
        return (0,)
    return (1, tuple((0, 0, 0.0) if e is None else (1, 1, 0.0) if e != e else (1, 0, e) for e in v))


def preparer_arrow(spark: SparkSession, run: S3JRun) -> Any:
    """``preparer``'s twin on pyarrow Tables (a micro-batch staged through the driver): the same
    rules, reasons, windows and late rows, with the Arrow rules of ``simjoin.quality.quarantine``
    and the core's ``window_copies`` for the windows."""
    dims: dict[str, int | None] = {"dim": None}
    size_us = round(run.window_s * 1e6)
    slide_us = round((run.slide_s or run.window_s) * 1e6)

    def prepare(t: pa.Table, info: BatchInfo) -> Prepared:
        dim = info.progress.meta.get("dim") or dims["dim"]
        vec = t.column("vector")
        if dim is None:
            lens = pc.list_value_length(vec).drop_null().to_numpy(zero_copy_only=False)
            if lens.size:
                cnt = np.bincount(lens.astype(np.int64))
                top = int(np.flatnonzero(cnt == cnt.max())[0])  # the most frequent, then the smallest
                dim = top if top > 0 else None
        dims["dim"] = dim
        rules = [ArrowRule(lambda x: np.asarray(x.column("vector").is_null().to_numpy(zero_copy_only=False)),
                           "null vector"), *vector_rules_arrow("vector", dim)]
        if run.cfg.metric in ("angular", "cosine"):
            rules.append(zero_vector_arrow("vector", f"{run.cfg.metric} distance is undefined"))
        side = np.asarray(t.column("side").to_numpy(zero_copy_only=False), np.int64)
        ids = np.asarray(t.column("id").to_numpy(zero_copy_only=False), np.int64)
        ts = np.asarray(t.column("ts").cast(US).cast(pa.int64()).to_numpy(zero_copy_only=False), np.int64)
        dup = first_by([side, ids], [ts], tie=lambda i: _vector_key(vec[i].as_py()))
        rules.append(ArrowRule(lambda x: dup, lambda x, rows: [f"duplicate id {ids[i]}" for i in rows.tolist()]))
        keys = run.engine(spark).seen_keys(info, _live_keys(run, info))
        if keys is not None:
            seen = np.zeros(t.num_rows, bool)
            ks, ki = keys.column("side").to_numpy(), keys.column("id").to_numpy()
            for sd in np.unique(ks):
                seen |= (side == sd) & np.isin(ids, ki[ks == sd])
            rules.append(ArrowRule(lambda x: seen, lambda x, rows: [f"duplicate id {ids[i]} (seen earlier)"
                                                                     for i in rows.tolist()]))
        good, bad = split_quarantine_arrow(t, rules)
        g_ts = np.asarray(good.column("ts").cast(US).cast(pa.int64()).to_numpy(zero_copy_only=False), np.int64)
        rec, start = window_copies(g_ts, size_us, slide_us)
        win = good.take(pa.array(rec))
        win = (win.append_column("window_start", pa.array(start).cast(US))
               .append_column("window_end", pa.array(start + size_us).cast(US)))
        wm = info.progress.closed_watermark
        late = np.zeros(win.num_rows, bool) if wm is None else (start + size_us) <= epoch_us(wm)
        lt = win.filter(pa.array(late))
        if lt.num_rows:  # one row per late record (its first late window)
            first = ~first_by([lt.column("side").to_numpy(), lt.column("id").to_numpy()],
                              [np.arange(lt.num_rows)])
            lt = lt.filter(pa.array(first))
            why = [f"late: window starting {spark_ts_string(int(w))}{_closed_text(info)}"
                   for w in lt.column("window_start").cast(pa.int64()).to_pylist()]
            lt = lt.select(["id", "ts", "ts_raw", "vector", "side"]).append_column("reason", pa.array(why, pa.string()))
        staged = win.filter(pa.array(~late)).drop_columns(["ts_raw"])
        out_bad = bad.select(["id", "ts", "ts_raw", "vector", "side", "reason"])
        if lt.num_rows:
            out_bad = pa.concat_tables([out_bad, lt.cast(out_bad.schema)])
        return Prepared(staged, out_bad, meta={"dim": dim} if dim else {})

    return prepare


def run(spark: SparkSession, run_: S3JRun) -> dict[str, Any]:
    """Stage everything that arrived since the last run as one unit (or resume the open one)."""
    return run_.engine(spark).ingest(  # type: ignore[no-any-return]
        preparer(spark, run_), PAYLOAD, PAYLOAD_TEXT, casts={"vector": "array<double>"},
        prepare_arrow=preparer_arrow(spark, run_))
