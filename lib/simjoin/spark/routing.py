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


def spark_task_table(spark: Any, t: pa.Table, task: np.ndarray, fn: TaskFn, schema: pa.Schema,
                     name: str = "task") -> pa.Table:
    """The Spark executor: the same ``fn`` per task inside ``mapInArrow``, each task alone in its
    Spark partition (:func:`route_to_tasks`), in one Spark job; the batches come back in the
    same order as :func:`task_table`'s."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from simjoin.spark.session import arrow_frame

    task = np.asarray(task)
    if t.num_rows == 0:
        return schema.empty_table()
    ids = np.unique(task)
    dense = np.searchsorted(ids, task).astype(np.int64)  # partition i holds the i-th task id
    cols = t.column_names
    df = arrow_frame(spark, t.append_column("_task", pa.array(task.astype(np.int64)))
                     .append_column("_slot", pa.array(dense)))
    routed = route_to_tasks(df, "_slot", int(ids.size))

    def part(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        bs = [b for b in batches if b.num_rows]
        if not bs:
            return
        tb = pa.Table.from_batches(bs)
        for got in map_tasks(tb.select(cols), np.asarray(tb.column("_task").to_numpy()), lambda g: list(fn(g)), name):
            for b in got:
                yield b.cast(schema) if b.schema != schema else b

    out = routed.mapInArrow(part, from_arrow_schema(schema, prefer_timestamp_ntz=False)).toArrow()
    return out.cast(schema) if out.schema != schema else out
