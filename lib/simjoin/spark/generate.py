"""Synthetic input tables, generated in parallel: one Spark task per chunk of
``simjoin.core.datagen.CHUNK_ROWS`` rows, each a vectorized numpy draw inside ``mapInArrow``."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from simjoin.core import datagen

__all__ = ["sets_df", "vectors_df", "ineq_df", "keys_df", "aqi_df"]

TS = pa.timestamp("us", tz="UTC")


def _chunked(spark: SparkSession, rows: int, schema: str,
             make: Callable[[int, int], pa.RecordBatch]) -> DataFrame:
    bounds = datagen.chunk_bounds(rows)
    if not bounds:
        return spark.createDataFrame([], schema)
    parts = spark.createDataFrame([(s, e) for s, e in bounds], "start long, stop long").repartition(len(bounds))

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            for s, e in zip(b.column("start").to_pylist(), b.column("stop").to_pylist()):
                yield make(int(s), int(e))

    return parts.mapInArrow(fn, schema)


def sets_df(spark: SparkSession, rows: int, seed: int, universe: int = 20_000, avg_len: int = 12,
            dup_frac: float = 0.25, lengths: str = "zipf", dist: str = "uniform") -> DataFrame:
    """id, text: ``datagen.gen_sets`` (``lengths`` in ``datagen.SET_LENGTHS``, ``dist`` in
    ``datagen.SET_DISTS``)."""
    if lengths not in datagen.SET_LENGTHS:
        raise ValueError(f"invalid lengths {lengths!r}: allowed {', '.join(datagen.SET_LENGTHS)}")
    if dist not in datagen.SET_DISTS:
        raise ValueError(f"invalid dist {dist!r} for sets: allowed {', '.join(datagen.SET_DISTS)}")

    def make(s: int, e: int) -> pa.RecordBatch:
        ids, texts = datagen.gen_sets(s, e, seed, universe=universe, avg_len=avg_len, dup_frac=dup_frac,
                                      lengths=lengths, dist=dist)
        return pa.RecordBatch.from_arrays([pa.array(ids), texts], ["id", "text"])

    return _chunked(spark, rows, "id long, text string", make)


def vectors_df(spark: SparkSession, rows: int, dim: int, dist: str, rate: float, seed: int, drift: str = "none",
               drift_period: float = 60.0, drift_after: int = 2) -> DataFrame:
    """id, ts, vector; ``drift`` (``datagen.VECTOR_DRIFTS``) makes the distribution move with ts, one
    step per ``drift_period`` seconds (``datagen.gen_drift_vectors``)."""
    if dist not in datagen.VECTOR_DISTS:
        raise ValueError(f"invalid dist {dist!r}: allowed {', '.join(datagen.VECTOR_DISTS)}")
    if drift not in datagen.VECTOR_DRIFTS:
        raise ValueError(f"invalid drift {drift!r}: allowed {', '.join(datagen.VECTOR_DRIFTS)}")

    def make(s: int, e: int) -> pa.RecordBatch:
        x = datagen.gen_vectors(s, e, dim, dist, seed, drift=drift, rate=rate, period=drift_period,
                                after=drift_after)
        vec = pa.ListArray.from_arrays(pa.array(np.arange(0, x.size + 1, dim, dtype=np.int32)), pa.array(x.ravel()))
        ts = pa.array(datagen.timestamps_us(s, e, rate), TS)
        return pa.RecordBatch.from_arrays([pa.array(np.arange(s, e, dtype=np.int64)), ts, vec],
                                          ["id", "ts", "vector"])

    return _chunked(spark, rows, "id long, ts timestamp, vector array<double>", make)


def ineq_df(spark: SparkSession, rows: int, dist: str, seed: int, rate: float = 100.0) -> DataFrame:
    if dist not in datagen.INEQ_DISTS:
        raise ValueError(f"invalid dist {dist!r}: allowed {', '.join(datagen.INEQ_DISTS)}")

    def make(s: int, e: int) -> pa.RecordBatch:
        a, b = datagen.gen_ineq(s, e, dist, seed)
        ts = pa.array(datagen.timestamps_us(s, e, rate), TS)
        return pa.RecordBatch.from_arrays([pa.array(np.arange(s, e, dtype=np.int64)), ts, pa.array(a), pa.array(b)],
                                          ["id", "ts", "a", "b"])

    return _chunked(spark, rows, "id long, ts timestamp, a double, b double", make)


def keys_df(spark: SparkSession, rows: int, alpha: float, domain: int, seed: int, rate: float = 100.0) -> DataFrame:
    def make(s: int, e: int) -> pa.RecordBatch:
        k = datagen.gen_keys(s, e, alpha, domain, seed)
        ids = np.arange(s, e, dtype=np.int64)
        payload = pa.array([f"p{i}" for i in ids.tolist()], pa.string())
        ts = pa.array(datagen.timestamps_us(s, e, rate), TS)
        return pa.RecordBatch.from_arrays([pa.array(ids), ts, pa.array(k), payload], ["id", "ts", "k", "payload"])

    return _chunked(spark, rows, "id long, ts timestamp, k long, payload string", make)


def aqi_df(spark: SparkSession, rows: int, domain: int, seed: int, rate: float = 100.0) -> DataFrame:
    """Air-quality readings (``datagen.gen_aqi``): id, ts, station, pm25, pm10."""
    def make(s: int, e: int) -> pa.RecordBatch:
        st, pm25, pm10 = datagen.gen_aqi(s, e, domain, seed)
        ts = pa.array(datagen.timestamps_us(s, e, rate), TS)
        return pa.RecordBatch.from_arrays([pa.array(np.arange(s, e, dtype=np.int64)), ts, pa.array(st),
                                           pa.array(pm25), pa.array(pm10)], ["id", "ts", "station", "pm25", "pm10"])

    return _chunked(spark, rows, "id long, ts timestamp, station long, pm25 double, pm10 double", make)
