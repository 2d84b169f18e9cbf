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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np
import pyarrow as pa

__all__ = ["Executor", "InProcessExecutor", "TaskFn", "take_rows", "map_tasks", "task_table"]

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

    task = np.asarray(task)
    if t.num_rows == 0:
        return []
    order = np.argsort(task, kind="stable")
    ids, start = np.unique(task[order], return_index=True)
    bounds = [*start.tolist(), int(task.size)]
    groups = [take_rows(t, order[bounds[i]:bounds[i + 1]]) for i in range(ids.size)]
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

    def map_tasks(self, t: pa.Table, task: np.ndarray, fn: TaskFn, schema: pa.Schema,
                  name: str = "task") -> pa.Table:
        return task_table(t, task, fn, schema, name)

    def read(self, path: str, where: Any = None, columns: Sequence[str] | None = None) -> pa.Table | None:
        from simjoin.io import tables

        return tables.read_arrow(path, where, columns)

    def overwrite(self, t: pa.Table, path: str) -> None:
        from simjoin.io import tables

        local = tables.local_dir(path)
        if local is None:
            raise tables.NotLocal(f"the in-process executor writes local tables only, not {path}")
        tables.overwrite_arrow(t, local)
