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
from simjoin.spark.routing import map_tasks, route_to_tasks

__all__ = ["TUPLE_COLUMNS", "JOIN_SCHEMA", "batch_counts", "batch_counts_arrow", "copies", "copies_of", "join",
           "join_arrow", "worker_join", "loads", "loads_arrow"]

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


def batch_counts_arrow(records: pa.Table, top: int, also: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                               int]:
    """:func:`batch_counts` on a pyarrow Table (the in-process executor): the same rows."""
    side, k = _col(records, "side"), _col(records, "k")
    if side.size == 0:
        z = np.zeros(0, np.int64)
        return z.astype(np.int8), z, z, 0
    pairs, n = np.unique(np.stack([side, k], axis=1), axis=0, return_counts=True)
    order = np.lexsort((pairs[:, 1], pairs[:, 0], -n))  # count descending, then side, then key
    keep = np.zeros(n.size, bool)
    keep[order[: int(top)]] = True
    keep |= np.isin(pairs[:, 1], np.asarray(also, np.int64))
    return pairs[keep, 0].astype(np.int8), pairs[keep, 1], n[keep].astype(np.int64), int(side.size)


def copies_of(b: pa.Table | pa.RecordBatch, d: Dispatcher) -> pa.RecordBatch:
    """``TUPLE_COLUMNS`` rows with one row per copy under ``d``: its task and worker."""
    cols = {c: _col(b, c) for c in TUPLE_COLUMNS}
    c = route(cols["side"], cols["id"], cols["k"], d)
    return pa.RecordBatch.from_arrays([pa.array(cols[n][c.row]) for n in TUPLE_COLUMNS]
                                      + [pa.array(c.task), pa.array(c.worker)], schema=COPY_ARROW)


def copies(tuples: DataFrame, disp: Dispatcher) -> DataFrame:
    """``tuples`` (``TUPLE_COLUMNS``) with one row per copy: its task and worker."""
    state = disp.to_json()

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        d = Dispatcher.from_json(state)
        for b in batches:
            if b.num_rows:
                yield copies_of(b, d)

    return tuples.select(*TUPLE_COLUMNS).mapInArrow(task, COPY_SCHEMA)


def worker_join(tb: pa.Table, window_us: int, count_only: bool) -> list[pa.RecordBatch]:
    """One worker's local joins over its copies (``COPY_ARROW`` rows of one worker): ``PAIR``
    rows, or per-key ``COUNTER`` rows with ``count_only``, and its ``STATS`` row - the task both
    executors run per worker."""
    if tb.num_rows == 0:
        return []
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
    got = [pa.RecordBatch.from_arrays([c.slice(a, step) for c in out + rest], schema=JOIN_ARROW)
           for a in range(0, n, step)]
    got.append(pa.RecordBatch.from_pylist([{
        "kind": int(RowKind.STATS), "left_id": None, "right_id": None, "k": None, "ts_us": None, "pairs": pairs,
        "worker": w, "received": int(tb.num_rows), "new_copies": int(cols["new"].sum()),
        "tasks": int(np.unique(cols["task"]).size), "seconds": secs}], schema=JOIN_ARROW))
    return got


def join(tuples: DataFrame, disp: Dispatcher, window_us: int, count_only: bool) -> DataFrame:
    """Each worker's local joins over its copies (see the module docstring)."""
    p = disp.p
    routed = route_to_tasks(copies(tuples, disp), "worker", p)

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        bs = list(batches)
        tb = pa.Table.from_batches(bs, schema=COPY_ARROW) if bs else COPY_ARROW.empty_table()
        # one worker per partition (route_to_tasks); should Spark ever put two in one, each is its own task
        for got in map_tasks(tb, _col(tb, "worker"), lambda t: worker_join(t, window_us, count_only), "worker"):
            yield from got

    return routed.mapInArrow(task, JOIN_SCHEMA)


def join_arrow(tuples: pa.Table, disp: Dispatcher, window_us: int, count_only: bool) -> pa.Table:
    """:func:`join` on the in-process executor: the same copies and the same per-worker task on
    a thread pool (``simjoin.spark.routing.map_tasks``)."""
    if tuples.num_rows == 0:
        return JOIN_ARROW.empty_table()
    cp = pa.Table.from_batches([copies_of(tuples, disp)])
    got = map_tasks(cp, _col(cp, "worker"), lambda t: worker_join(t, window_us, count_only), "hypercube-join")
    return pa.Table.from_batches([b for bs in got for b in bs], schema=JOIN_ARROW)


def _worker_loads(b: pa.Table | pa.RecordBatch, d: Dispatcher, p: int) -> tuple[np.ndarray, np.ndarray]:
    s, i, k = _col(b, "side"), _col(b, "id"), _col(b, "k")
    return np.bincount(route(s, i, k, d).worker, minlength=p)[:p], phj_loads(k, p)


def loads_arrow(held: pa.Table, disp: Dispatcher) -> tuple[np.ndarray, np.ndarray]:
    """:func:`loads` on a pyarrow Table (side, id, k)."""
    if held.num_rows == 0:
        return np.zeros(disp.p, np.int64), np.zeros(disp.p, np.int64)
    ours, phj = _worker_loads(held, disp, disp.p)
    return ours.astype(np.int64), phj.astype(np.int64)


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
                o, h = _worker_loads(b, d, p)
                ours += o
                phj += h
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
