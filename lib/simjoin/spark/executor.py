"""The Spark executor (``simjoin.runtime.executor``): a stage's tasks in one ``mapInArrow`` Spark
job per fan-out, each task alone in its partition (``routing.spark_task_table``); tables read with
``deltalake`` where it can and with Spark where it cannot (not local, a feature it lacks), and
written likewise (``simjoin.spark.delta``).

A batch run's partitioned data is :class:`Packed`: a DataFrame of one row per partition, its
rows one Arrow IPC value. ``map`` is one ``mapInArrow`` whose function gets each partition as a
pyarrow Table and its number; ``shuffle`` packs each task's share of a partition as one value and
moves those values (a few rows, not one per record) so that each task is alone in its partition
(``routing.partition_keys``); ``persist`` keeps the packed values; ``scan`` of a local table reads
its data files in the tasks with pyarrow; ``write`` of a local table writes its files in the
tasks from the packed values. No pass converts a record to a Spark row and back: on 2 cores such
conversions cost several times the work of the ssj steps themselves."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from simjoin.operators.setsim import binary, pack, unpacked
from simjoin.runtime.executor import (
    ManyFn,
    PartFn,
    SplitFn,
    TaskFn,
    aggregate_table,
    conform,
    take_rows,
    task_groups,
    where_rows,
)

__all__ = ["SparkExecutor", "Packed", "packed"]


@dataclass(frozen=True)
class SparkExecutor:
    """The Spark executor over a session or a ``LazySpark`` (started only when a Spark job runs: a
    unit whose tables deltalake reads starts no session to read them)."""

    spark: Any = field(repr=False)
    reason: str = ""
    name: str = "spark"
    #: its frames up to ``FRAME_ROWS`` rows are pyarrow Tables, validated in the warm gate server
    gate_server: bool = True

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
             literals: Mapping[str, int] | None = None) -> Packed:
        """A local table deltalake reads: its data files read by the tasks with pyarrow, straight
        into packed partitions (no Spark rows). Else Spark's read, packed."""
        from pyspark.sql import functions as F

        from simjoin.spark import delta, pins

        got = _file_scan(self.spark, path, columns, version, where, appended_since, rename, literals)
        if got is not None:
            return got
        df = delta.read_table(self.spark, path, version=version)
        for c, op, v in where or ():
            col = F.col(c)
            df = df.where(col.isin(list(v)) if op == "in" else getattr(col, delta.OPS[op])(v))
        if appended_since is not None:
            df = pins.appended(self.spark, path, df, appended_since)
        cols = [F.col(c).alias((rename or {}).get(c, c)) for c in columns]
        cols += [F.lit(int(v)).cast("int").alias(k) for k, v in (literals or {}).items()]
        return packed(df.select(*cols, *(["_appended"] if appended_since is not None else [])))

    def frame(self, parts: Any) -> Any:
        """A pyarrow Table (validated in the warm gate server, as in process) when it has at most
        ``FRAME_ROWS`` rows, else a DataFrame of its rows (validated by Spark)."""
        p = packed(parts)
        got, n = [], 0
        for r in p.df.select("n", "rows").toLocalIterator():  # one job; stops once it is too large
            n += int(r["n"])
            if n > FRAME_ROWS:
                return p.rows()
            got.append(conform(pa.ipc.open_stream(pa.py_buffer(r["rows"])).read_all(), p.schema))
        return pa.concat_tables(got) if got else p.schema.empty_table()

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

    def from_arrow(self, t: pa.Table) -> Packed:
        from simjoin.runtime.executor import slices
        from simjoin.spark.session import arrow_frame

        got = [b for i, s in enumerate(slices(t)) for b in _blobs(i, s)]
        return Packed(arrow_frame(self.spark, pa.Table.from_batches(got, PACKED_ARROW)), t.schema)

    def map(self, parts: Any, fn: PartFn, schema: pa.Schema) -> Packed:
        """Lazy: consecutive maps run in one Python pass (the next shuffle, collect, count,
        persist or write runs them), each partition's rows through every function in turn."""
        return packed(parts).then(fn, schema)

    def shuffle(self, parts: Any, split: SplitFn, n: int, fn: PartFn, schema: pa.Schema,
                order: Sequence[int] | None = None) -> Packed:
        from simjoin.spark.routing import partition_keys

        keys = partition_keys(max(1, n))

        p = packed(parts)
        steps, read = p.steps, p.read

        def route(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for part, rows in read(batches):
                rows = _apply(steps, rows, part)
                if rows.num_rows == 0:
                    continue
                task, out = split(rows, part)
                if out.num_rows == 0:
                    continue
                for u, at in task_groups(task):
                    for b in _blobs(u, take_rows(out, at)):
                        yield b.append_column("pkey", pa.array([int(keys[u % len(keys)])], pa.int64()))

        routed = p.source.mapInArrow(route, PACKED_DDL + ", pkey long").repartition(max(1, n), "pkey")
        # each task's pieces are one partition (numbered by the task): fn runs on it lazily
        return Packed(routed.drop("pkey"), p.schema).then(fn, schema)

    def select(self, parts: Any, columns: Sequence[str], where: Any = None) -> Packed:
        p = packed(parts)
        out = pa.schema([p.schema.field(c) for c in columns])
        return self.map(p, lambda t, _: where_rows(t, where).select(list(columns)), out)

    def aggregate(self, parts: Any, keys: Sequence[str], aggs: Mapping[str, str]) -> pa.Table:
        """Each partition aggregated in its task, the partitions' results in this process."""
        p = packed(parts)
        out = pa.schema([*(p.schema.field(k) for k in keys),
                         *(pa.field(c, _agg_type(p.schema.field(c).type, f)) for c, f in aggs.items())])
        return aggregate_table(self.collect(self.map(p, lambda t, _: aggregate_table(t, keys, aggs), out)), keys, aggs)

    def union(self, parts: Sequence[Any]) -> Packed:
        """The partitions of all of ``parts``, numbered apart (the i-th's numbers + i * 2^26)."""
        from pyspark.sql import functions as F

        ps = [packed(p) for p in parts]
        schema = ps[0].schema
        out = None
        for i, p in enumerate(ps):
            if p.schema != schema:
                p = self.map(p, lambda t, _: t, schema)
            df = p.df.withColumn("part", F.col("part") + F.lit(i << UNION_SHIFT)) if i else p.df
            out = df if out is None else out.union(df)
        return Packed(out, schema)

    def collect(self, parts: Any) -> pa.Table:
        p = packed(parts)
        got = p.df.select("rows").toArrow()
        tables = [unpacked(b) for b in got.column("rows")]
        return pa.concat_tables([conform(t, p.schema) for t in tables]) if tables else p.schema.empty_table()

    def count(self, parts: Any) -> int:
        """The rows: each packed partition carries its count, so persisted partitions are counted
        without a Python task."""
        from pyspark.sql import functions as F

        got = packed(parts).df.agg(F.sum("n").alias("n")).collect()[0]["n"]
        return int(got or 0)

    def persist(self, parts: Any) -> Packed:
        from pyspark import StorageLevel

        p = packed(parts)
        return Packed(p.df.persist(StorageLevel.MEMORY_AND_DISK_DESER), p.schema)

    def release(self, parts: Any) -> None:
        p = packed(parts)
        (p.cache if p.cache is not None else p.df).unpersist()

    def persist_many(self, parts: Any, fn: ManyFn, schemas: Sequence[pa.Schema]) -> list[Packed]:
        """One ``mapInArrow`` pass whose packed rows of output j are numbered part + j << ``MANY_SHIFT``,
        persisted once; each output is a view of it (a filter and a subtraction in the JVM: reading
        one, e.g. a count or a collect of a small output, runs no Python task)."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        p = packed(parts)
        steps, outs, read = p.steps, list(schemas), p.read

        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for part, rows in read(batches):
                rows = _apply(steps, rows, part)
                got = fn(rows, part) if rows.num_rows else [s.empty_table() for s in outs]
                for j, (t, s) in enumerate(zip(got, outs, strict=True)):
                    yield from _blobs(part + (j << MANY_SHIFT), conform(t, s))

        cache = p.source.mapInArrow(run, PACKED_DDL).persist(StorageLevel.MEMORY_AND_DISK_DESER)
        part = F.col("part")
        return [Packed(cache.where(F.shiftright(part, MANY_SHIFT) == j)
                       .withColumn("part", part - F.lit(j << MANY_SHIFT)), s, cache=cache)
                for j, s in enumerate(outs)]

    def write(self, parts: Any, path: str, partition: Mapping[str, Any], merge_schema: bool = False) -> None:
        from pyspark.sql import functions as F

        from simjoin.spark import delta

        p = packed(parts)

        def rows() -> Any:
            df = p.rows()
            for k, v in partition.items():
                if k not in p.schema.names:
                    df = df.withColumn(k, F.lit(v))
            return df

        if p.load is not None:  # read by a Python pass of its own
            p = Packed(p.df, p.schema)
        steps = p.steps
        delta.overwrite_packed(p.source, p.schema, rows, path, partition, merge_schema=merge_schema,
                               transform=(lambda t, part: _apply(steps, t, part)) if steps else None)


#: ``frame`` hands a quality gate a pyarrow Table up to this many rows, a DataFrame above
FRAME_ROWS = 4_000_000
#: a packed value's rows are cut so that each is about at most this many bytes
BLOB_BYTES = 64 << 20
#: ``union`` numbers the partitions of its i-th input apart by i << this
UNION_SHIFT = 26
#: ``persist_many`` numbers the partitions of its j-th output apart by j << this
MANY_SHIFT = 48
#: a packed partition (``Packed``): its number, its rows, the rows as one Arrow IPC value
PACKED_DDL = "part long, n long, rows binary"
PACKED_ARROW = pa.schema([("part", pa.int64()), ("n", pa.int64()), ("rows", pa.binary())])


@dataclass(frozen=True)
class Packed:
    """A batch run's partitions on Spark: a DataFrame of one row per partition (``PACKED_DDL``;
    a large one cut into a few rows of the same number), its rows one Arrow IPC value of
    ``schema``. A task function gets a partition as one pyarrow Table without any conversion of
    Spark rows, a shuffle moves a few values, a persisted run keeps a few values per partition,
    and a count needs no Python."""

    #: the packed rows before ``steps``
    source: Any = field(repr=False)
    schema: pa.Schema
    #: functions still to run on each partition, in turn, with their output schema (lazy maps)
    steps: tuple[tuple[PartFn, pa.Schema], ...] = ()
    #: the persisted DataFrame this is a view of (``persist_many``): what ``release`` forgets
    cache: Any = field(default=None, repr=False)
    #: what turns ``source``'s rows into partitions when they are not packed rows (a scan's
    #: groups of files: read by the first Python pass over them, with its steps)
    load: Callable[[Iterator[pa.RecordBatch]], Iterator[tuple[int, pa.Table]]] | None = field(default=None,
                                                                                               repr=False)

    @property
    def read(self) -> Callable[[Iterator[pa.RecordBatch]], Iterator[tuple[int, pa.Table]]]:
        """What gives the partitions (number, rows before ``steps``) of a Spark partition of
        ``source`` (a function a task runs: it holds no DataFrame)."""
        return self.load or _parts

    @property
    def df(self) -> Any:
        """The packed rows (``steps`` run in one ``mapInArrow``)."""
        if not self.steps and self.load is None:
            return self.source
        steps, read = self.steps, self.read

        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for part, rows in read(batches):
                yield from _blobs(part, _apply(steps, rows, part))

        return self.source.mapInArrow(run, PACKED_DDL)

    def then(self, fn: PartFn, schema: pa.Schema) -> Packed:
        """``fn`` on each partition after ``steps`` (lazily), into ``schema``."""
        return Packed(self.source, schema, (*self.steps, (fn, schema)), load=self.load)

    def repartition(self, n: int) -> Packed:
        """The same partitions spread over ``n`` Spark partitions."""
        return Packed(self.df.repartition(max(1, n), "part"), self.schema)

    def rows(self) -> Any:
        """A DataFrame of the rows themselves (what Spark writes and validates)."""
        schema, steps, read = self.schema, self.steps, self.read

        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for part, rows in read(batches):
                yield from conform(_apply(steps, rows, part), schema).to_batches()

        return self.source.mapInArrow(run, _ddl(schema))


def packed(parts: Any) -> Packed:
    """``parts`` as packed partitions: a DataFrame of rows is packed (each Spark partition one
    partition, numbered by Spark's partition number x 1024 + its piece)."""
    if isinstance(parts, Packed):
        return parts
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(parts.schema, timezone="UTC")

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = _rows(batches)
        if rows is not None:
            yield from _blobs(_partition() * 1024, rows, split=True)

    return Packed(parts.mapInArrow(run, PACKED_DDL), schema)


def _file_scan(spark: Any, path: str, columns: Sequence[str], version: int | None, where: Any,
               appended_since: int | None, rename: Mapping[str, str] | None,
               literals: Mapping[str, int] | None) -> Packed | None:
    """:meth:`SparkExecutor.scan` of a local table by the tasks: the data files of ``version``
    (those ``where`` can match), in groups of about ``PARTITION_ROWS`` rows, each group read by
    one task with pyarrow (the groups spread over at most twice the executors' task slots of Spark
    partitions). None when the table is not local or deltalake cannot read it (a reader feature
    it lacks, a file it names otherwise than its log): Spark reads it."""
    from urllib.parse import unquote

    from deltalake import DeltaTable

    from simjoin.io.tables import local_dir
    from simjoin.runtime.executor import PARTITION_ROWS
    from simjoin.spark.routing import partition_keys
    from simjoin.spark.session import arrow_frame

    local = local_dir(path)
    if local is None:
        return None
    try:
        dt = DeltaTable(local, version=version) if version is not None else DeltaTable(local)
        meta = dt.metadata()
        if (set(columns) & set(meta.partition_columns)
                or meta.configuration.get("delta.columnMapping.mode", "none") != "none"):
            return None  # a column not in the files as named: Spark reads it
        ds = dt.to_pyarrow_dataset()
        # the partition columns' conditions pick the files (exactly: a file holds one value of
        # each), the others' pick the files by their statistics and then the rows
        cond = _expression(where)
        rows_cond = _expression([w for w in where or () if w[0] not in set(meta.partition_columns)])
        frags = list(ds.get_fragments(filter=cond)) if cond is not None else list(ds.get_fragments())
        adds = dt.get_add_actions(flatten=True)
        rows_of = dict(zip((unquote(f) for f in adds.column("path").to_pylist()),
                           adds.column("num_records").to_pylist(), strict=True))
        if any(f.path not in rows_of for f in frags):
            return None
        old = None
        if appended_since is not None:
            was = DeltaTable(local, version=appended_since).get_add_actions(flatten=True)
            old = {unquote(f) for f in was.column("path").to_pylist()}
        schema = ds.schema
    except Exception:  # a reader feature deltalake lacks, a version it cannot load: Spark reads it
        return None
    names = [(rename or {}).get(c, c) for c in columns]
    out = pa.schema([*(pa.field(n, schema.field(c).type) for n, c in zip(names, columns, strict=True)),
                     *(pa.field(k, pa.int32()) for k in literals or {}),
                     *([pa.field("_appended", pa.bool_())] if old is not None else [])])
    groups: list[list[int]] = []
    size = 0
    for i, f in enumerate(frags):  # consecutive files, about PARTITION_ROWS rows per group
        n = int(rows_of[f.path] or 0)
        if not groups or size + n > PARTITION_ROWS:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += n
    if not groups:
        groups = [[]]
    k = max(1, min(len(groups), 2 * SparkExecutor(spark).parallelism))  # the executors' task slots, twice
    keys = partition_keys(k)
    df = arrow_frame(spark, pa.table({"group": pa.array(range(len(groups)), pa.int64()),
                                      "pkey": pa.array([int(keys[g % k]) for g in range(len(groups))], pa.int64())}))
    files = [(f, f.path not in old if old is not None else None) for f in frags]
    consts = dict(literals or {})

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, pa.Table]]:
        from simjoin.runtime.executor import slices

        for b in batches:
            for g in b.column("group").to_pylist():
                parts = []
                for i in groups[g]:
                    f, new = files[i]
                    t = f.to_table(columns=list(columns), filter=rows_cond)
                    t = pa.table({n: t.column(c) for n, c in zip(names, columns, strict=True)})
                    for c, v in consts.items():
                        t = t.append_column(c, pa.array(np.full(t.num_rows, v, np.int32)))
                    if new is not None:
                        t = t.append_column("_appended", pa.array(np.full(t.num_rows, new)))
                    parts.append(conform(t, out))
                t = pa.concat_tables(parts) if parts else out.empty_table()
                for i, piece in enumerate(slices(t, PARTITION_ROWS, parts=1)):
                    yield g * 1024 + i, piece

    # the groups are read by the first pass over them (with that pass's functions: no Python
    # pass of their own, no packed copy of the rows read)
    return Packed(df.repartition(k, "pkey"), out, load=read)


def _expression(where: Any) -> Any:
    """``where`` (``(column, op, value)``, ops ``= != < <= > >= in``) as a pyarrow expression."""
    import pyarrow.dataset as pds

    ops = {"=": "__eq__", "==": "__eq__", "!=": "__ne__", "<": "__lt__", "<=": "__le__", ">": "__gt__",
           ">=": "__ge__"}
    cond = None
    for c, op, v in where or ():
        e = pds.field(c).isin(list(v)) if op == "in" else getattr(pds.field(c), ops[op])(v)
        cond = e if cond is None else cond & e
    return cond


def _apply(steps: Sequence[tuple[PartFn, pa.Schema]], rows: pa.Table, part: int) -> pa.Table:
    """A partition's rows through each step in turn (as in process, a function never sees an
    empty partition: it gives no rows)."""
    for fn, schema in steps:
        rows = conform(fn(rows, part), schema) if rows.num_rows else schema.empty_table()
    return rows


def _parts(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, pa.Table]]:
    """Each packed partition of a Spark partition's packed rows, its pieces joined, in part order."""
    got: dict[int, list[pa.Table]] = {}
    for b in batches:
        for part, blob in zip(b.column("part").to_pylist(), b.column("rows"), strict=True):
            got.setdefault(int(part), []).append(unpacked(blob))
    for part in sorted(got):
        ts = got.pop(part)
        yield part, ts[0] if len(ts) == 1 else pa.concat_tables(ts)


def _blobs(part: int, t: pa.Table, split: bool = False) -> Iterator[pa.RecordBatch]:
    """``t`` as packed rows of partition ``part``: pieces of at most about ``BLOB_BYTES`` each
    (``split``: each piece a partition of its own, ``part`` + its number, of at most
    ``PARTITION_ROWS`` rows: how a scanned Spark partition becomes in-process-sized partitions)."""
    from simjoin.runtime.executor import PARTITION_ROWS

    n = t.num_rows
    # a table with a dictionary column (a tokenized partition) stays whole: its pieces would each
    # carry a dictionary of their own
    whole = t.nbytes <= BLOB_BYTES or any("dictionary" in str(f.type) for f in t.schema)
    step = max(1, n) if whole else max(1, int(n * BLOB_BYTES / max(1, t.nbytes)))
    if split:
        step = min(step, PARTITION_ROWS)
    for k, a in enumerate(range(0, max(1, n), step)):
        piece = t.slice(a, step)
        yield pa.RecordBatch.from_arrays([pa.array([part + (k if split else 0)], pa.int64()),
                                          pa.array([piece.num_rows], pa.int64()), binary([pack(piece)])],
                                         schema=PACKED_ARROW)


def _agg_type(t: pa.DataType, fn: str) -> pa.DataType:
    if fn == "sum":
        if pa.types.is_floating(t):
            return pa.float64()
        return pa.uint64() if pa.types.is_unsigned_integer(t) else pa.int64()
    return t


def _rows(batches: Iterator[pa.RecordBatch]) -> pa.Table | None:
    bs = [b for b in batches if b.num_rows]
    return pa.Table.from_batches(bs) if bs else None


def _partition() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx else 0


def _ddl(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
