"""Routing rows to Spark partitions by a task column, one task per partition.

``repartition(n, col)`` hashes with Murmur3 (seed 42, like Spark's ``hash()``), so two small task
ids can share a partition while another partition stays empty. :func:`route_to_tasks` instead
gives task p a key whose hash lands in partition p: every task is alone in its own partition.
SSJ routes its units (Fier & Freytag's n x m units), the inequality join its PO-Join batch lists
(one per worker) and Streaming HyperCube its tasks' workers this way.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from simjoin.core.hashing import spark_hash_long
from simjoin.core.unique import unique
from simjoin.runtime.executor import TaskFn, task_groups

__all__ = ["spark_hash_long", "partition_keys", "route_to_tasks", "spark_task_table"]



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
    conversion, and a shuffle of a few rows); the result is the in-process executor's
    (``simjoin.runtime.executor.task_table``), in the same order."""
    if t.num_rows == 0:
        return schema.empty_table()
    groups = task_groups(task)
    slot: list[int] = []
    seq: list[int] = []
    blob: list[bytes] = []
    for i, (_, at) in enumerate(groups):
        for k, b in enumerate(_chunks(t.take(pa.array(at)))):
            slot.append(i)
            seq.append(k)
            blob.append(b)
    return _run_slots(spark, slot, seq, blob, len(groups), fn, schema)


#: Set to "0" to keep every task result in Spark's own result path (no shared result folder).
RESULT_FILES_ENV = "SIMJOIN_TASK_RESULT_FILES"
#: task results this process has read from the result folder (how tests see which path ran)
files_read = 0


def _result_folder() -> tuple[str, str] | None:
    """A private folder (0700; in memory where the system has ``/dev/shm``) for task results, and
    the random token of the marker file in it; None when turned off."""
    import secrets
    import tempfile

    if os.environ.get(RESULT_FILES_ENV, "1") == "0":
        return None
    shm = "/dev/shm"
    folder = tempfile.mkdtemp(prefix="simjoin-results-", dir=shm if os.path.isdir(shm) and os.access(shm, os.W_OK)
                              else None)
    token = secrets.token_hex(16)
    with open(os.path.join(folder, "marker"), "w") as fh:
        fh.write(token)
    return folder, token


def _shared(where: tuple[str, str] | None) -> str | None:
    """The result folder, when this task sees it (the executor shares the driver's file system:
    local mode, a worker on the same host), else None: the result then travels through Spark."""
    if where is None:
        return None
    folder, token = where
    try:
        with open(os.path.join(folder, "marker")) as fh:
            return folder if fh.read() == token else None
    except OSError:
        return None


def _run_slots(spark: Any, slot: list[int], seq: list[int], blob: list[bytes], n: int, fn: TaskFn,
               schema: pa.Schema) -> pa.Table:
    """Each slot's rows (``blob``: IPC messages) through ``fn`` in one Spark job. A task writes its
    output as an Arrow IPC file into the driver's private result folder when it can see it, and
    answers with the file's name: a large result (millions of pairs) never sits in the driver JVM's
    heap as one Spark task result (13M pairs of one task exhausted a 4 GB heap). A task that cannot
    see the folder (a worker on another host) answers with the IPC messages themselves."""
    global files_read
    import shutil
    import uuid

    from simjoin.spark.session import arrow_frame

    df = arrow_frame(spark, pa.table({"slot": pa.array(slot, pa.int64()), "seq": pa.array(seq, pa.int64()),
                                      "blob": pa.array(blob, pa.binary())}))
    where = _result_folder()
    out_schema = pa.schema([("slot", pa.int64()), ("seq", pa.int64()), ("blob", pa.binary()), ("file", pa.string())])

    def part(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        bs = [b for b in batches if b.num_rows]
        if not bs:
            return
        folder = _shared(where)
        got = pa.Table.from_batches(bs).sort_by([("slot", "ascending"), ("seq", "ascending")])
        slots = np.asarray(got.column("slot").to_numpy(), np.int64)
        blobs = got.column("blob").to_pylist()
        for s in unique(slots).tolist():
            mine = pa.concat_tables([_unipc(blobs[j]) for j in np.flatnonzero(slots == s).tolist()])
            out = pa.Table.from_batches([b.cast(schema) if b.schema != schema else b for b in fn(mine)],
                                        schema=schema)
            if folder is not None:
                path = os.path.join(folder, f"{s}-{uuid.uuid4().hex}.arrow")
                with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, schema) as w:
                    w.write_table(out)
                yield pa.RecordBatch.from_pydict({"slot": [s], "seq": [0], "blob": [None], "file": [path]},
                                                 schema=out_schema)
                continue
            for k, b in enumerate(_chunks(out)):
                yield pa.RecordBatch.from_pydict({"slot": [s], "seq": [k], "blob": [b], "file": [None]},
                                                 schema=out_schema)

    try:
        got = route_to_tasks(df, "slot", n).mapInArrow(part, "slot long, seq long, blob binary, file string").toArrow()
        got = got.sort_by([("slot", "ascending"), ("seq", "ascending")])
        parts = []
        for b, f in zip(got.column("blob").to_pylist(), got.column("file").to_pylist(), strict=True):
            if f is not None:
                if where is None or os.path.dirname(f) != where[0]:  # read only what this job's folder holds
                    raise RuntimeError(f"a task answered with a result file outside its folder: {f}")
                with pa.OSFile(f, "rb") as src:  # read, not mapped: the folder goes below
                    parts.append(pa.ipc.open_file(src).read_all())
                files_read += 1
            else:
                parts.append(_unipc(b))
        return pa.concat_tables(parts).cast(schema) if parts else schema.empty_table()
    finally:
        if where is not None:
            shutil.rmtree(where[0], ignore_errors=True)
