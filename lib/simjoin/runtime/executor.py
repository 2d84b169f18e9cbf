"""The executors' protocol and the in-process executor (docs/architecture.md, "Executors").

A stage is a function of Arrow data. Where its tasks run, and how a unit's tables are read and
written, is its executor's business, chosen once per run or unit (``simjoin.runtime.placement``)
and recorded with it:

- :class:`InProcessExecutor`: a thread pool of this process, tables read and written with
  ``deltalake`` (local tables only). No JVM.
- ``simjoin.spark.executor.SparkExecutor``: the same task functions in one ``mapInArrow`` Spark job
  per fan-out (each task alone in its partition), tables through Spark's Delta I/O where
  ``deltalake`` cannot reach them.

Both give the same pyarrow Table of the same schema, in ascending task order, for the same input:
no stage branches on its executor (``tests/spark/test_executors.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np
import pyarrow as pa

from simjoin.io.rows import aggregate_table

__all__ = ["Executor", "InProcessExecutor", "TaskFn", "task_groups", "take_rows", "map_tasks", "task_table",
           "where_rows", "conform", "aggregate_table"]

R = TypeVar("R")
#: A task function: a task's rows in, its output batches out.
TaskFn = Callable[[pa.Table], Iterable[pa.RecordBatch]]


@runtime_checkable
class Executor(Protocol):
    """Where a stage's tasks run and through what its tables are read and written."""

    #: ``in_process`` or ``spark``
    name: str
    #: why this executor runs the unit or run (recorded in its stats)
    reason: str

    def map_tasks(self, t: pa.Table, task: np.ndarray, fn: TaskFn, schema: pa.Schema,
                  name: str = "task") -> pa.Table:
        """``fn`` per task id of ``task`` (one per row of ``t``; a task gets its rows in their
        order), its batches as one Table of ``schema`` in ascending task order."""

    def read(self, path: str, where: Any = None, columns: Sequence[str] | None = None) -> pa.Table | None:
        """The table at ``path`` (``where``: ``(column, op, value)`` filters), None when there is none."""

    def overwrite(self, t: pa.Table, path: str) -> None:
        """Replace the whole table at ``path`` by ``t``."""

    # A batch run's data spread over partitions (``Parts``: the in-process executor's list of
    # pyarrow Tables, the Spark executor's DataFrame). Every function a stage hands these is a
    # function of Arrow data, and both executors call it alike.

    #: how many tasks run at once (a shuffle's default number of tasks)
    parallelism: int
    #: whether its frames (:meth:`frame`: pyarrow Tables) are validated in the warm gate server
    gate_server: bool

    def scan(self, path: str, columns: Sequence[str], version: int | None = None, where: Any = None,
             appended_since: int | None = None, rename: Mapping[str, str] | None = None,
             literals: Mapping[str, int] | None = None) -> Any:
        """The ``columns`` of the Delta table at ``path`` (at ``version``; ``where``: ``(column,
        op, value)`` filters), as partitions, renamed by ``rename``, with ``literals`` (column ->
        an int32 constant) after them. With ``appended_since``, a boolean ``_appended`` last: the
        row is in a data file that version ``appended_since`` did not have (exact when the
        commits since only appended)."""

    def frame(self, parts: Any) -> Any:
        """What a quality gate validates: a pyarrow Table (on Spark, a DataFrame above
        ``simjoin.spark.executor.FRAME_ROWS`` rows)."""

    def unit_budget(self, memory_gb: float | None = None) -> Any:
        """Memory per task and task slots (``simjoin.runtime.placement.UnitBudget``)."""

    def from_arrow(self, t: pa.Table) -> Any:
        """A driver-side table as partitions."""

    def map(self, parts: Any, fn: PartFn, schema: pa.Schema) -> Any:
        """``fn(rows, partition number)`` on every partition (its rows as one Table), into ``schema``."""

    def shuffle(self, parts: Any, split: SplitFn, n: int, fn: PartFn, schema: pa.Schema,
                order: Sequence[int] | None = None) -> Any:
        """Rows routed to ``n`` tasks, then ``fn(task's rows, task)`` per task that got rows, into
        ``schema``: ``split(rows, partition number)`` gives each partition's (task per output row,
        output rows); a
        row may go to several tasks. ``order``: the tasks in the order to start them (the
        costliest first), where the executor starts them itself."""

    def select(self, parts: Any, columns: Sequence[str], where: Any = None) -> Any:
        """``columns`` of the rows where every ``(column, op, value)`` of ``where`` holds (ops
        ``= != < <= > >=``): done by the executor itself (Arrow compute; Spark SQL over a cached
        frame), no task function."""

    def aggregate(self, parts: Any, keys: Sequence[str], aggs: Mapping[str, str]) -> pa.Table:
        """The rows grouped by ``keys`` (nulls group together), each ``column -> sum|max`` of
        ``aggs`` over its group, in this process: done by the executor itself (Arrow's group-by;
        Spark's aggregation, which sums within each partition before its shuffle)."""

    def union(self, parts: Sequence[Any]) -> Any:
        """The partitions of all of ``parts``."""

    def collect(self, parts: Any) -> pa.Table:
        """Every partition's rows, in this process."""

    def count(self, parts: Any) -> int:
        """The number of rows."""

    def persist(self, parts: Any) -> Any:
        """``parts`` computed once and kept for several reads (until :meth:`release`)."""

    def release(self, parts: Any) -> None:
        """Forget what :meth:`persist` (or :meth:`persist_many`) kept."""

    def persist_many(self, parts: Any, fn: ManyFn, schemas: Sequence[pa.Schema]) -> list[Any]:
        """``fn(rows, partition number)`` on every partition, giving one table per schema of
        ``schemas``; the result is one set of partitions per schema (numbered as ``parts``),
        computed in one pass and kept together: releasing one releases them all."""

    def write(self, parts: Any, path: str, partition: Mapping[str, Any], merge_schema: bool = False) -> None:
        """Replace the rows of ``partition`` (column -> value, added to the rows) in the Delta table
        at ``path`` by ``parts`` (a new table is partitioned by those columns)."""


#: A partition's function: its rows and its number (a task's: its rows and the task) -> rows.
PartFn = Callable[[pa.Table, int], pa.Table]
#: A partition's function with several outputs: its rows and its number -> one table per output.
ManyFn = Callable[[pa.Table, int], Sequence[pa.Table]]
#: A shuffle's split of one partition: (the task of each output row, the output rows).
SplitFn = Callable[[pa.Table, int], tuple[np.ndarray, pa.Table]]


def task_groups(task: Any) -> list[tuple[int, np.ndarray]]:
    """Each task id of ``task`` (one per row), ascending, with the positions of its rows in row
    order: how both executors cut a table into its tasks' shares."""
    task = np.asarray(task)
    by = np.argsort(task, kind="stable")
    ids, start = np.unique(task[by], return_index=True)
    bounds = [*start.tolist(), int(task.size)]
    return [(int(u), by[bounds[i]:bounds[i + 1]]) for i, u in enumerate(ids.tolist())]


#: ``take_rows`` slices at most this many runs of consecutive rows; more are gathered by ``take``
SLICE_RUNS = 4096


def take_rows(t: pa.Table, idx: np.ndarray) -> pa.Table:
    """``t.take(idx)``, without copying when ``idx`` is a few runs of consecutive rows: the runs as
    zero-copy slices. A table of a few large rows (serialized indexes) is routed or filtered in
    place; a table of many small rows in random order is gathered as by ``take``."""
    idx = np.asarray(idx, np.int64)
    if idx.size == 0:
        return t.slice(0, 0)
    cut = np.flatnonzero(np.diff(idx) != 1) + 1
    if cut.size >= SLICE_RUNS:
        return t.take(pa.array(idx))
    starts = [0, *cut.tolist()]
    ends = [*cut.tolist(), int(idx.size)]
    return pa.concat_tables([t.slice(int(idx[a]), b - a) for a, b in zip(starts, ends, strict=True)])


def map_tasks(t: pa.Table, task: np.ndarray, fn: Callable[[pa.Table], R], name: str = "task") -> list[R]:
    """The in-process executor's ``groupBy(task).applyInArrow``: ``fn`` on the rows of each task
    (``task``: a task id per row of ``t``; rows keep their order), task ids ascending, on a thread
    pool of at most one thread per core. The Spark executor runs the same ``fn`` per task."""
    from concurrent.futures import ThreadPoolExecutor

    if t.num_rows == 0:
        return []
    groups = [take_rows(t, at) for _, at in task_groups(task)]
    if len(groups) == 1:
        return [fn(groups[0])]
    with ThreadPoolExecutor(min(len(groups), os.cpu_count() or 1), thread_name_prefix=name) as pool:
        return list(pool.map(fn, groups))


def task_table(t: pa.Table, task: np.ndarray, fn: TaskFn, schema: pa.Schema, name: str = "task") -> pa.Table:
    """The in-process executor: ``fn`` per task on a thread pool (:func:`map_tasks`), its
    batches as one Table of ``schema`` in ascending task order."""
    got = map_tasks(t, task, lambda g: list(fn(g)), name)
    return pa.Table.from_batches([b for bs in got for b in bs], schema=schema)


@dataclass(frozen=True)
class InProcessExecutor:
    """The in-process executor: tasks on a thread pool of this process (:func:`task_table`),
    tables with ``deltalake`` (``simjoin.io.tables``)."""

    reason: str = ""
    name: str = "in_process"
    gate_server: bool = True

    def map_tasks(self, t: pa.Table, task: np.ndarray, fn: TaskFn, schema: pa.Schema,
                  name: str = "task") -> pa.Table:
        return task_table(t, task, fn, schema, name)

    def read(self, path: str, where: Any = None, columns: Sequence[str] | None = None) -> pa.Table | None:
        from simjoin.io import tables

        return tables.read_arrow(path, where, columns)

    def overwrite(self, t: pa.Table, path: str) -> None:
        from simjoin.io import tables

        tables.overwrite_arrow(t, _local(path))

    @property
    def parallelism(self) -> int:
        return threads()

    def scan(self, path: str, columns: Sequence[str], version: int | None = None, where: Any = None,
             appended_since: int | None = None, rename: Mapping[str, str] | None = None,
             literals: Mapping[str, int] | None = None) -> list[pa.Table]:
        from simjoin.io import tables

        if version is None:
            t = tables.read_arrow(path, where, list(columns))
            if t is None:
                raise FileNotFoundError(f"no Delta table at {path}")
        else:
            t = tables.read_version(_local(path), version, list(columns), appended_since)
        names = [(rename or {}).get(c, c) for c in columns]
        out = pa.table({n: t.column(c) for n, c in zip(names, columns, strict=True)})
        for k, v in (literals or {}).items():
            out = out.append_column(k, pa.array(np.full(t.num_rows, v, np.int32)))
        if "_appended" in t.column_names:
            out = out.append_column("_appended", t.column("_appended"))
        return slices(out)

    def frame(self, parts: list[pa.Table]) -> pa.Table:
        return self.collect(parts)

    def unit_budget(self, memory_gb: float | None = None) -> Any:
        """The budget a local Spark session of this configuration would have (so both executors
        plan alike on one machine)."""
        from simjoin.config import SparkConfig, load_config
        from simjoin.runtime.placement import unit_budget

        sc = load_config(SparkConfig, "spark")
        conf = {"spark.master": sc.master if sc.master.startswith("local") else "local[*]",
                "spark.driver.memory": sc.driver_memory}
        return unit_budget(lambda k, d=None: conf.get(k, d), memory_gb=memory_gb)

    def from_arrow(self, t: pa.Table) -> list[pa.Table]:
        return slices(t)

    def map(self, parts: list[pa.Table], fn: PartFn, schema: pa.Schema) -> list[pa.Table]:
        def one(it: tuple[int, pa.Table]) -> pa.Table:
            return conform(fn(it[1], it[0]), schema) if it[1].num_rows else schema.empty_table()

        return pool_map(one, list(enumerate(parts)))

    def shuffle(self, parts: list[pa.Table], split: SplitFn, n: int, fn: PartFn, schema: pa.Schema,
                order: Sequence[int] | None = None) -> list[pa.Table]:
        pieces: dict[int, list[pa.Table]] = {}
        # as on Spark, a function never sees an empty partition
        for task, rows in pool_map(lambda it: split(it[1], it[0]), [(i, t) for i, t in enumerate(parts) if t.num_rows]):
            if rows.num_rows == 0:
                continue
            for u, at in task_groups(task):
                pieces.setdefault(u, []).append(take_rows(rows, at))
        todo = [u for u in (order if order is not None else sorted(pieces)) if u in pieces]
        todo += [u for u in sorted(pieces) if u not in set(todo)]
        done = dict(zip(todo, pool_map(lambda u: fn(pa.concat_tables(pieces[u]), u), todo), strict=True))
        return [conform(done[u], schema) for u in sorted(done)] or [schema.empty_table()]

    def select(self, parts: list[pa.Table], columns: Sequence[str], where: Any = None) -> list[pa.Table]:
        return [where_rows(t, where).select(list(columns)) for t in parts]

    def aggregate(self, parts: list[pa.Table], keys: Sequence[str], aggs: Mapping[str, str]) -> pa.Table:
        return aggregate_table(self.collect(parts), keys, aggs)

    def union(self, parts: Sequence[list[pa.Table]]) -> list[pa.Table]:
        return [t for p in parts for t in p]

    def collect(self, parts: list[pa.Table]) -> pa.Table:
        return pa.concat_tables(parts) if parts else pa.table({})

    def count(self, parts: list[pa.Table]) -> int:
        return sum(t.num_rows for t in parts)

    def persist(self, parts: list[pa.Table]) -> list[pa.Table]:
        return parts

    def release(self, parts: list[pa.Table]) -> None:
        return None

    def persist_many(self, parts: list[pa.Table], fn: ManyFn, schemas: Sequence[pa.Schema]) -> list[list[pa.Table]]:
        def one(it: tuple[int, pa.Table]) -> list[pa.Table]:
            if not it[1].num_rows:
                return [s.empty_table() for s in schemas]
            return [conform(t, s) for t, s in zip(fn(it[1], it[0]), schemas, strict=True)]

        done = pool_map(one, list(enumerate(parts)))
        return [[d[j] for d in done] for j in range(len(schemas))]

    def write(self, parts: list[pa.Table], path: str, partition: Mapping[str, Any], merge_schema: bool = False
              ) -> None:
        from simjoin.io import tables

        t = pa.concat_tables(parts) if len(parts) != 1 else parts[0]
        tables.overwrite_partition_arrow(t, _local(path), partition, merge_schema)


_COMPARE = {"=": "equal", "==": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal", ">": "greater",
            ">=": "greater_equal"}


def where_rows(t: pa.Table, where: Any) -> pa.Table:
    """The rows of ``t`` where every ``(column, op, value)`` of ``where`` holds."""
    import pyarrow.compute as pc

    for c, op, v in where or ():
        t = t.filter(getattr(pc, _COMPARE[op])(t.column(c), v))
    return t


def _local(path: str) -> str:
    from simjoin.io import tables

    local = tables.local_dir(path)
    if local is None:
        raise tables.NotLocal(f"the in-process executor reads and writes local tables only, not {path}")
    return local


def conform(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """``t`` with the columns of ``schema``, in its order and of its types."""
    return t if t.schema == schema else t.select(schema.names).cast(schema)


#: The rows of one in-process partition (a Spark partition of the input is about this size too).
PARTITION_ROWS = 200_000


def threads() -> int:
    """Worker threads: one per core (the task slots of ``local[*]``)."""
    return max(1, os.cpu_count() or 1)


def slices(t: pa.Table, rows: int = PARTITION_ROWS, parts: int | None = None) -> list[pa.Table]:
    """``t`` cut into consecutive slices (zero-copy) of about ``rows`` rows, at least ``parts`` of
    them (default: one per thread) when ``t`` has that many rows."""
    from itertools import pairwise

    n = t.num_rows
    k = max(1, -(-n // rows), min(n, parts if parts is not None else threads()))
    cuts = np.linspace(0, n, k + 1).astype(np.int64)
    return [t.slice(int(a), int(b - a)) for a, b in pairwise(cuts)] or [t]


T = TypeVar("T")


def pool_map(fn: Callable[[T], R], items: Sequence[T], workers: int | None = None) -> list[R]:
    """``fn`` over ``items`` on a thread pool of at most one thread per core, results in order."""
    from concurrent.futures import ThreadPoolExecutor

    if len(items) <= 1 or (workers or threads()) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(min(len(items), workers or threads()), thread_name_prefix="executor") as pool:
        return list(pool.map(fn, items))
