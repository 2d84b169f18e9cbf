"""Routing rows to Spark partitions by a task column, one task per partition.

``repartition(n, col)`` hashes with Murmur3 (seed 42, like Spark's ``hash()``), so two small task
ids can share a partition while another partition stays empty. :func:`route_to_tasks` instead
gives task p a key whose hash lands in partition p: every task is alone in its own partition.
SSJ routes its units (Fier & Freytag's n x m units), the inequality join its PO-Join batch lists
(one per worker) and Streaming HyperCube its tasks' workers this way.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from simjoin.core.hashing import spark_hash_long

__all__ = ["spark_hash_long", "partition_keys", "route_to_tasks", "map_tasks", "task_table", "spark_task_table"]

R = TypeVar("R")


def partition_keys(n: int) -> np.ndarray:
    """For each partition p in [0, n): a long key k with pmod(hash(k), n) == p, so that
    ``repartition(n, key)`` (Murmur3, seed 42, like ``hash()``) puts unit p alone in partition p."""
    keys = np.full(n, -1, np.int64)
    start = 0
    while (keys < 0).any():
        cand = np.arange(start, start + max(64, 8 * n), dtype=np.int64)
        part = np.mod(spark_hash_long(cand).astype(np.int64), n)
        for p in np.flatnonzero(keys < 0):
            hit = cand[part == p]
            if hit.size:
                keys[p] = hit[0]
        start += cand.size
    return keys


def route_to_tasks(df: DataFrame, task_col: str, n: int) -> DataFrame:
    """``df`` shuffled into ``n`` partitions with the rows of task p (``task_col`` in [0, n)) in
    partition p alone."""
    n = max(1, int(n))
    keys = F.array(*[F.lit(int(k)) for k in partition_keys(n)])
    return (df.withColumn("_route", F.element_at(keys, (F.col(task_col) % n).cast("int") + 1))
            .repartition(n, "_route").drop("_route"))


def map_tasks(t: pa.Table, task: np.ndarray, fn: Callable[[pa.Table], R], name: str = "task") -> list[R]:
    """The in-process executor's ``groupBy(task).applyInArrow``: ``fn`` on the rows of each task
    (``task``: a task id per row of ``t``; rows keep their order), task ids ascending, on a thread
    pool of at most one thread per core. The Spark executor runs the same ``fn`` per task."""
    from concurrent.futures import ThreadPoolExecutor

    task = np.asarray(task)
    if t.num_rows == 0:
        return []
    order = np.argsort(task, kind="stable")
    ids, start = np.unique(task[order], return_index=True)
    rows = t.take(pa.array(order))
    bounds = [*start.tolist(), int(task.size)]
    groups = [rows.slice(bounds[i], bounds[i + 1] - bounds[i]) for i in range(ids.size)]
    if len(groups) == 1:
        return [fn(groups[0])]
    with ThreadPoolExecutor(min(len(groups), os.cpu_count() or 1), thread_name_prefix=name) as pool:
        return list(pool.map(fn, groups))


#: A task function of the unit runner: a task's rows in, its output batches out.
TaskFn = Callable[[pa.Table], Iterable[pa.RecordBatch]]


def task_table(t: pa.Table, task: np.ndarray, fn: TaskFn, schema: pa.Schema, name: str = "task") -> pa.Table:
    """The in-process executor: ``fn`` per task on a thread pool (:func:`map_tasks`), its
    batches as one Table of ``schema`` in ascending task order."""
    got = map_tasks(t, task, lambda g: list(fn(g)), name)
    return pa.Table.from_batches([b for bs in got for b in bs], schema=schema)


#: rows per Arrow IPC message a task's input or output travels in (``spark_task_table``)
TASK_CHUNK_ROWS = 1 << 20


def _ipc(t: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return bytes(sink.getvalue())


def _unipc(b: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(b)).read_all()


def _chunks(t: pa.Table) -> list[bytes]:
    return [_ipc(t.slice(a, TASK_CHUNK_ROWS)) for a in range(0, max(1, t.num_rows), TASK_CHUNK_ROWS)]


def spark_task_table(spark: Any, t: pa.Table, task: np.ndarray, fn: TaskFn, schema: pa.Schema,
                     name: str = "task") -> pa.Table:
    """The Spark executor: the same ``fn`` per task in one Spark job, each task alone in its Spark
    partition (:func:`route_to_tasks`). A task's rows travel to it, and its batches back, as Arrow
    IPC messages (a few rows of ``(slot, seq, blob)``, not one Spark row per record: no row
    conversion, and a shuffle of a few rows); the result is :func:`task_table`'s, in the same
    order."""
    task = np.asarray(task)
    if t.num_rows == 0:
        return schema.empty_table()
    order = np.argsort(task, kind="stable")
    ids, start = np.unique(task[order], return_index=True)
    rows = t.take(pa.array(order))
    bounds = [*start.tolist(), int(task.size)]
    slot: list[int] = []
    seq: list[int] = []
    blob: list[bytes] = []
    for i in range(ids.size):
        for k, b in enumerate(_chunks(rows.slice(bounds[i], bounds[i + 1] - bounds[i]))):
            slot.append(i)
            seq.append(k)
            blob.append(b)
    return _run_slots(spark, slot, seq, blob, int(ids.size), fn, schema)


def _run_slots(spark: Any, slot: list[int], seq: list[int], blob: list[bytes], n: int, fn: TaskFn,
               schema: pa.Schema) -> pa.Table:
    from simjoin.spark.session import arrow_frame

    df = arrow_frame(spark, pa.table({"slot": pa.array(slot, pa.int64()), "seq": pa.array(seq, pa.int64()),
                                      "blob": pa.array(blob, pa.binary())}))

    def part(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        bs = [b for b in batches if b.num_rows]
        if not bs:
            return
        got = pa.Table.from_batches(bs).sort_by([("slot", "ascending"), ("seq", "ascending")])
        slots = np.asarray(got.column("slot").to_numpy(), np.int64)
        blobs = got.column("blob").to_pylist()
        for s in np.unique(slots).tolist():
            mine = pa.concat_tables([_unipc(blobs[j]) for j in np.flatnonzero(slots == s).tolist()])
            out = pa.Table.from_batches([b.cast(schema) if b.schema != schema else b for b in fn(mine)],
                                        schema=schema)
            for k, b in enumerate(_chunks(out)):
                yield pa.RecordBatch.from_pydict({"slot": [s], "seq": [k], "blob": [b]},
                                                 schema=pa.schema([("slot", pa.int64()), ("seq", pa.int64()),
                                                                   ("blob", pa.binary())]))

    got = route_to_tasks(df, "slot", n).mapInArrow(part, "slot long, seq long, blob binary").toArrow()
    got = got.sort_by([("slot", "ascending"), ("seq", "ascending")])
    return pa.concat_tables([_unipc(b) for b in got.column("blob").to_pylist()]).cast(schema)
