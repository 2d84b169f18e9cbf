"""The Spark executor (``simjoin.runtime.executor``): a stage's tasks in one ``mapInArrow`` Spark
job per fan-out, each task alone in its partition (``routing.spark_task_table``); tables read with
``deltalake`` where it can and with Spark where it cannot (not local, a feature it lacks), and
written likewise (``simjoin.spark.delta``).

A batch run's partitioned data (``Parts``) is a DataFrame: ``map`` is one ``mapInArrow`` whose
function sees its partition's rows as one Arrow table and its partition number; ``shuffle`` packs
each task's share of a partition as one Arrow IPC value, moves those values (a few rows, not one
per record) so that each task is alone in its partition (``routing.route_to_tasks``), and runs
the task function there; ``persist`` caches in memory and on disk."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from simjoin.runtime.executor import PartFn, SplitFn, TaskFn, task_groups

__all__ = ["SparkExecutor"]


@dataclass(frozen=True)
class SparkExecutor:
    """The Spark executor over a session or a ``LazySpark`` (started only when a Spark job runs: a
    unit whose tables deltalake reads starts no session to read them)."""

    spark: Any = field(repr=False)
    reason: str = ""
    name: str = "spark"
    gate_server: bool = False

    def map_tasks(self, t: pa.Table, task: np.ndarray, fn: TaskFn, schema: pa.Schema,
                  name: str = "task") -> pa.Table:
        from simjoin.spark import routing

        return routing.spark_task_table(self.spark, t, task, fn, schema, name)

    def read(self, path: str, where: Any = None, columns: Sequence[str] | None = None) -> pa.Table | None:
        from simjoin.spark import delta

        return delta.read_arrow_any(lambda: self.spark, path, where, columns)

    def overwrite(self, t: pa.Table, path: str) -> None:
        from simjoin.spark import delta

        delta.overwrite_arrow(self.spark, t, path)

    @property
    def parallelism(self) -> int:
        try:
            return int(self.spark.sparkContext.defaultParallelism)
        except Exception:  # Spark Connect has no SparkContext: its configured shuffle partitions
            return int(self.spark.conf.get("spark.sql.shuffle.partitions", "8") or 8)

    def scan(self, path: str, columns: Sequence[str], version: int | None = None, where: Any = None,
             appended_since: int | None = None, rename: Mapping[str, str] | None = None,
             literals: Mapping[str, int] | None = None) -> Any:
        from pyspark.sql import functions as F

        from simjoin.spark import delta, pins

        df = delta.read_table(self.spark, path, version=version)
        for c, op, v in where or ():
            col = F.col(c)
            df = df.where(col.isin(list(v)) if op == "in" else getattr(col, delta.OPS[op])(v))
        if appended_since is not None:
            df = pins.appended(self.spark, path, df, appended_since)
        cols = [F.col(c).alias((rename or {}).get(c, c)) for c in columns]
        cols += [F.lit(int(v)).cast("int").alias(k) for k, v in (literals or {}).items()]
        return df.select(*cols, *(["_appended"] if appended_since is not None else []))

    def frame(self, parts: Any) -> Any:
        return parts

    def unit_budget(self, memory_gb: float | None = None) -> Any:
        from simjoin.runtime.placement import unit_budget
        from simjoin.spark.session import is_remote

        spark, remote = self.spark, is_remote(self.spark)

        def conf(key: str, default: str | None = None) -> str | None:
            try:
                return spark.conf.get(key, default)  # type: ignore[no-any-return]
            except Exception:
                return default

        executors = 1 if remote else max(1, len(spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()) - 1)
        return unit_budget(conf, remote, executors, memory_gb)

    def from_arrow(self, t: pa.Table) -> Any:
        from simjoin.spark.session import arrow_frame

        return arrow_frame(self.spark, t)

    def map(self, parts: Any, fn: PartFn, schema: pa.Schema) -> Any:
        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            rows = _rows(batches)
            if rows is not None:
                yield from _conform(fn(rows, _partition()), schema).to_batches()

        return parts.mapInArrow(run, _ddl(schema))

    def shuffle(self, parts: Any, split: SplitFn, n: int, fn: PartFn, schema: pa.Schema,
                order: Sequence[int] | None = None) -> Any:
        from simjoin.operators.setsim import binary, pack, unpacked
        from simjoin.spark.routing import partition_keys

        keys = partition_keys(max(1, n))

        def route(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            rows = _rows(batches)
            if rows is None:
                return
            task, out = split(rows, _partition())
            if out.num_rows == 0:
                return
            groups = task_groups(task)
            blobs = [pack(out.take(pa.array(at))) for _, at in groups]
            t = np.array([u for u, _ in groups], np.int64)
            yield pa.RecordBatch.from_arrays([pa.array(t), pa.array(keys[t % len(keys)]), binary(blobs)],
                                             ["task", "pkey", "rows"])

        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            got: dict[int, list[pa.Table]] = {}
            for b in batches:
                for u, blob in zip(b.column("task").to_pylist(), b.column("rows"), strict=True):
                    got.setdefault(int(u), []).append(unpacked(blob))
            for u in sorted(got):
                yield from _conform(fn(pa.concat_tables(got[u]), u), schema).to_batches()

        routed = parts.mapInArrow(route, "task long, pkey long, rows binary").repartition(max(1, n), "pkey")
        return routed.mapInArrow(run, _ddl(schema))

    def select(self, parts: Any, columns: Sequence[str], where: Any = None) -> Any:
        from pyspark.sql import functions as F

        from simjoin.spark import delta

        for c, op, val in where or ():
            parts = parts.where(getattr(F.col(c), delta.OPS[op])(F.lit(val)))
        return parts.select(*columns)

    def aggregate(self, parts: Any, keys: Sequence[str], aggs: Mapping[str, str]) -> pa.Table:
        from pyspark.sql import functions as F

        fns = {"sum": F.sum, "max": F.max}
        return parts.groupBy(*keys).agg(*[fns[f](c).alias(c) for c, f in aggs.items()]).toArrow()

    def union(self, parts: Sequence[Any]) -> Any:
        out = parts[0]
        for p in parts[1:]:
            out = out.unionByName(p)
        return out

    def collect(self, parts: Any) -> pa.Table:
        return parts.toArrow()

    def count(self, parts: Any) -> int:
        return int(parts.count())

    def persist(self, parts: Any) -> Any:
        from pyspark import StorageLevel

        return parts.persist(StorageLevel.MEMORY_AND_DISK_DESER)

    def release(self, parts: Any) -> None:
        parts.unpersist()

    def write(self, parts: Any, path: str, partition: Mapping[str, Any], merge_schema: bool = False) -> None:
        from pyspark.sql import functions as F

        from simjoin.spark import delta

        for k, v in partition.items():
            if k not in parts.columns:
                parts = parts.withColumn(k, F.lit(v))
        delta.overwrite_partition(parts, path, partition, merge_schema=merge_schema)


def _rows(batches: Iterator[pa.RecordBatch]) -> pa.Table | None:
    bs = [b for b in batches if b.num_rows]
    return pa.Table.from_batches(bs) if bs else None


def _partition() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx else 0


def _conform(t: pa.Table, schema: pa.Schema) -> pa.Table:
    return t if t.schema == schema else t.select(schema.names).cast(schema)


def _ddl(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
