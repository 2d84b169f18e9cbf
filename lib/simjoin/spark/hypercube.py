"""Spark adapter of Streaming HyperCube (Qiu, Papadias & Yi, EDBT'19).

The algorithm lives in ``simjoin.core.hypercube``; this module moves its arrays:

* :func:`batch_counts` - a micro-batch's top (side, key) counts for the heavy-hitter summary (a
  top-k query: the Misra-Gries merge needs no more).
* :func:`copies` - every tuple's copies (task, worker) under a dispatcher, computed with numpy
  inside ``mapInArrow``.
* :func:`join` - copies routed by worker through ``simjoin.spark.routing.route_to_tasks`` (each
  worker one Spark partition, its tasks logically apart inside it), and every worker's local hash
  join (the core's numba kernel) in ``mapInArrow``: ``PAIR`` rows, or per-key ``COUNTER`` rows
  with ``--count-only``, and one ``STATS`` row per worker.
* :func:`loads` - the copies each worker holds under a dispatcher, and PHJ's per-worker tuples.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from simjoin.contracts import RowKind
from simjoin.core.hypercube.dispatch import Dispatcher
from simjoin.core.hypercube.join import local_counts, local_join
from simjoin.core.hypercube.route import phj_loads, route
from simjoin.spark.routing import route_to_tasks

__all__ = ["TUPLE_COLUMNS", "JOIN_SCHEMA", "batch_counts", "copies", "join", "loads"]

#: A tuple as the join sees it: side (0 R, 1 S), id, ts in microseconds, key, new in this unit.
TUPLE_COLUMNS = ("side", "id", "ts_us", "k", "new")
COPY_ARROW = pa.schema([("side", pa.int64()), ("id", pa.int64()), ("ts_us", pa.int64()), ("k", pa.int64()),
                        ("new", pa.int64()), ("task", pa.int64()), ("worker", pa.int64())])
COPY_SCHEMA = "side long, id long, ts_us long, k long, new long, task long, worker long"
JOIN_ARROW = pa.schema([("kind", pa.int8()), ("left_id", pa.int64()), ("right_id", pa.int64()), ("k", pa.int64()),
                        ("ts_us", pa.int64()), ("pairs", pa.int64()), ("worker", pa.int32()),
                        ("received", pa.int64()), ("new_copies", pa.int64()), ("tasks", pa.int64()),
                        ("seconds", pa.float64())])
JOIN_SCHEMA = ("kind byte, left_id long, right_id long, k long, ts_us long, pairs long, worker int, received long, "
               "new_copies long, tasks long, seconds double")


def _col(t: pa.Table | pa.RecordBatch, c: str) -> np.ndarray:
    return np.ascontiguousarray(t.column(c).to_numpy(zero_copy_only=False), dtype=np.int64)


def batch_counts(records: DataFrame, top: int, also: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The ``top`` largest (side, key) counts of ``records`` plus the counts of keys in ``also``
    (the summary's keys), and the number of records."""
    c = records.groupBy("side", "k").agg(F.count("*").alias("n")).cache()
    try:
        n = int(c.agg(F.sum("n")).first()[0] or 0)  # type: ignore[index]
        big = c.orderBy(F.desc("n"), "side", "k").limit(int(top))
        part = big if also.size == 0 else big.unionByName(c.where(F.col("k").isin([int(k) for k in also])))
        t = part.distinct().toArrow()
    finally:
        c.unpersist()
    return (_col(t, "side").astype(np.int8), _col(t, "k"), _col(t, "n"), n)


def copies(tuples: DataFrame, disp: Dispatcher) -> DataFrame:
    """``tuples`` (``TUPLE_COLUMNS``) with one row per copy: its task and worker."""
    state = disp.to_json()

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        d = Dispatcher.from_json(state)
        for b in batches:
            if b.num_rows == 0:
                continue
            cols = {c: _col(b, c) for c in TUPLE_COLUMNS}
            c = route(cols["side"], cols["id"], cols["k"], d)
            yield pa.RecordBatch.from_arrays([pa.array(cols[n][c.row]) for n in TUPLE_COLUMNS]
                                             + [pa.array(c.task), pa.array(c.worker)], schema=COPY_ARROW)

    return tuples.select(*TUPLE_COLUMNS).mapInArrow(task, COPY_SCHEMA)


def join(tuples: DataFrame, disp: Dispatcher, window_us: int, count_only: bool) -> DataFrame:
    """Each worker's local joins over its copies (see the module docstring)."""
    p = disp.p
    routed = route_to_tasks(copies(tuples, disp), "worker", p)

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        bs = list(batches)
        tb = pa.Table.from_batches(bs, schema=COPY_ARROW) if bs else COPY_ARROW.empty_table()
        if tb.num_rows == 0:
            return
        t0 = time.perf_counter()
        cols = {c: _col(tb, c) for c in COPY_ARROW.names}
        w = int(cols["worker"][0])
        args = (cols["task"], cols["side"], cols["k"], cols["new"], cols["ts_us"], cols["id"], int(window_us))
        if count_only:
            keys, counts = local_counts(*args)
            n = int(keys.shape[0])
            out = [pa.array(np.full(n, int(RowKind.COUNTER), np.int8)), pa.nulls(n, pa.int64()),
                   pa.nulls(n, pa.int64()), pa.array(keys), pa.nulls(n, pa.int64()), pa.array(counts)]
            pairs = int(counts.sum())
        else:
            lid, rid, key, ts = local_join(*args)
            n = int(lid.shape[0])
            out = [pa.array(np.full(n, int(RowKind.PAIR), np.int8)), pa.array(lid), pa.array(rid), pa.array(key),
                   pa.array(ts), pa.nulls(n, pa.int64())]
            pairs = n
        secs = time.perf_counter() - t0
        rest = [pa.array(np.full(n, w, np.int32)), pa.nulls(n, pa.int64()), pa.nulls(n, pa.int64()),
                pa.nulls(n, pa.int64()), pa.nulls(n, pa.float64())]
        step = 1 << 20
        for a in range(0, n, step):
            yield pa.RecordBatch.from_arrays([c.slice(a, step) for c in out + rest], schema=JOIN_ARROW)
        yield pa.RecordBatch.from_pylist([{
            "kind": int(RowKind.STATS), "left_id": None, "right_id": None, "k": None, "ts_us": None, "pairs": pairs,
            "worker": w, "received": int(tb.num_rows), "new_copies": int(cols["new"].sum()),
            "tasks": int(np.unique(cols["task"]).size), "seconds": secs}], schema=JOIN_ARROW)

    return routed.mapInArrow(task, JOIN_SCHEMA)


def loads(held: DataFrame, disp: Dispatcher) -> tuple[np.ndarray, np.ndarray]:
    """Copies each worker holds under ``disp`` (the paper's load) and tuples per worker under
    PHJ, over the tuples ``held`` (side, id, k)."""
    state = disp.to_json()
    p = disp.p

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        d = Dispatcher.from_json(state)
        ours, phj = np.zeros(p, np.int64), np.zeros(p, np.int64)
        for b in batches:
            if b.num_rows:
                s, i, k = _col(b, "side"), _col(b, "id"), _col(b, "k")
                ours += np.bincount(route(s, i, k, d).worker, minlength=p)
                phj += phj_loads(k, p)
        yield pa.RecordBatch.from_arrays([pa.array(np.arange(p, dtype=np.int64)), pa.array(ours), pa.array(phj)],
                                         names=["worker", "load", "phj"])

    got = (held.select(F.col("side").cast("long"), "id", "k")
           .mapInArrow(task, "worker long, load long, phj long")
           .groupBy("worker").agg(F.sum("load").alias("load"), F.sum("phj").alias("phj")).toArrow())
    ours, phj = np.zeros(p, np.int64), np.zeros(p, np.int64)
    w = _col(got, "worker")
    ours[w] = _col(got, "load")
    phj[w] = _col(got, "phj")
    return ours, phj
