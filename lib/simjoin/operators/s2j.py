"""The S2J operator (``simjoin.core.s2j``) over Arrow, for both executors: it ships tuple blocks
and the micro-batch's tuples to the workers and pairs back, and holds no join rule of its own.

* **Blocks** (``BLOCK_ARROW``, the Delta table ``DIR/_state/blocks``): one row per tuple block,
  its ids as an array (the duplicate-id check reads them) and its arrays with their sort orders
  as one blob, so a worker never re-sorts a stored block.
* **Join** (:func:`join`): every live block goes to the task of its worker on the unit's executor
  (``OpenUnit.map_tasks``: a thread pool, or a Spark job with each worker alone in its
  partition), together with the micro-batch's tuples, read once and carried in the task's
  closure. A task (:func:`worker_pairs`) reads each of its blocks once and runs every join task on
  it (source sharing); one task also joins the new tuples among themselves. The kernels are the
  core's numba loops; pairs leave as Arrow arrays, with one ``STATS`` row per (block, join task).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from simjoin.contracts import RowKind
from simjoin.core.inequality.spo import Tuples
from simjoin.core.s2j.join import Block
from simjoin.core.s2j.operator import S2JParams, TaskPairs, join_new, join_stored, make_tuples

__all__ = ["BLOCK_ARROW", "JOIN_ARROW", "read_new", "block_table", "join", "worker_pairs"]

BLOCK_ARROW = pa.schema([("block_id", pa.int64()), ("side", pa.int8()), ("worker", pa.int32()), ("n", pa.int64()),
                         ("ts_min", pa.int64()), ("ts_max", pa.int64()), ("ids", pa.list_(pa.int64())),
                         ("blob", pa.binary())])
JOIN_ARROW = pa.schema([("kind", pa.int8()), ("task", pa.int32()), ("left_id", pa.int64()),
                        ("right_id", pa.int64()), ("ts", pa.int64()), ("worker", pa.int32()),
                        ("block_id", pa.int64()), ("stored", pa.int64()), ("candidates", pa.int64()),
                        ("pairs", pa.int64()), ("seconds", pa.float64())])
NEW_BLOCK = -1


def _np(t: pa.Table, c: str, dtype: Any) -> np.ndarray:
    return np.ascontiguousarray(t.column(c).to_numpy(zero_copy_only=False), dtype=dtype)


def read_new(records: pa.Table, p: S2JParams) -> dict[int, Tuples]:
    """The micro-batch's staged tuples per side, read once (projected to the tasks' columns)."""
    cols = sorted({c for s in p.sides for c in p.columns(s)})
    t = pa.table({"side": records.column("side").cast(pa.int32()), "id": records.column("id"),
                  "ts": records.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()),
                  **{c: records.column(c) for c in cols}})
    side = _np(t, "side", np.int64)
    # each column in its staged type (``simjoin.spark.exact_types``): integers stay int64, compared exactly
    # (a long's nulls - the other side's rows of a column only one side has - as 0, never through float64)
    t = pa.table({c: t.column(c).fill_null(0) if pa.types.is_integer(t.schema.field(c).type) else t.column(c)
                  for c in t.column_names})
    kinds = {c: np.int64 if pa.types.is_integer(t.schema.field(c).type) else np.float64 for c in cols}
    out = {}
    for s in p.sides:
        m = side == s
        out[s] = make_tuples(_np(t, "id", np.int64)[m], _np(t, "ts", np.int64)[m],
                             {c: _np(t, c, kinds[c])[m] for c in p.columns(s)})
    return out


def block_table(rows: list[tuple[int, int, int, Block]]) -> pa.Table:
    """New blocks ``(block_id, side, worker, block)`` as a pyarrow Table of ``BLOCK_ARROW``."""
    data = [{"block_id": b, "side": s, "worker": w, "n": len(k), "ts_min": k.ts_min, "ts_max": k.ts_max,
             "ids": k.tuples.id.tolist(), "blob": k.to_bytes()} for b, s, w, k in rows]
    return pa.Table.from_pylist(data, schema=BLOCK_ARROW)


def _batch(tp: TaskPairs, worker: int, block_id: int) -> pa.RecordBatch:
    n = int(tp.left_id.shape[0])
    return pa.RecordBatch.from_arrays(
        [pa.array(np.full(n, int(RowKind.PAIR), np.int8)), pa.array(np.full(n, tp.task, np.int32)),
         pa.array(tp.left_id), pa.array(tp.right_id), pa.array(tp.ts), pa.array(np.full(n, worker, np.int32)),
         pa.array(np.full(n, block_id, np.int64)), pa.nulls(n, pa.int64()), pa.nulls(n, pa.int64()),
         pa.nulls(n, pa.int64()), pa.nulls(n, pa.float64())], schema=JOIN_ARROW)


#: the block rows a worker's task reads: the live blocks, and one pseudo-block for the new tuples
WORK_ARROW = pa.schema([("block_id", pa.int64()), ("side", pa.int8()), ("worker", pa.int32()), ("n", pa.int64()),
                        ("blob", pa.binary())])


def worker_pairs(rows: pa.Table | pa.RecordBatch, new: dict[int, Tuples], p: S2JParams) -> Iterator[pa.RecordBatch]:
    """A worker's task, on both executors: each of its blocks (``WORK_ARROW`` rows) read once and
    joined with the new tuples for every join task (source sharing); the pseudo-block
    ``NEW_BLOCK`` joins the new tuples among themselves. ``PAIR`` batches, and per (block, task) a
    ``STATS`` row."""
    for r in rows.to_pylist():
        w, bid = int(r["worker"]), int(r["block_id"])
        t0 = time.perf_counter()
        if bid == NEW_BLOCK:
            found, stored = list(join_new(p, new)), sum(len(t) for t in new.values())
        else:
            block = Block.from_bytes(r["blob"])
            found, stored = list(join_stored(p, block, int(r["side"]), new)), len(block)
        secs = time.perf_counter() - t0
        per: dict[int, list[int]] = {}
        for tp in found:
            n = int(tp.left_id.shape[0])
            if n:
                yield _batch(tp, w, bid)
            c = per.setdefault(tp.task, [0, 0])
            c[0] += tp.candidates
            c[1] += n
        yield pa.RecordBatch.from_pylist([{
            "kind": int(RowKind.STATS), "task": k, "worker": w, "block_id": bid, "stored": stored,
            "candidates": c[0], "pairs": c[1], "seconds": secs / max(1, len(per))}
            for k, c in sorted(per.items())] or [{
            "kind": int(RowKind.STATS), "task": -1, "worker": w, "block_id": bid, "stored": stored,
            "candidates": 0, "pairs": 0, "seconds": secs}], schema=JOIN_ARROW)


def join(blocks: pa.Table | None, new: dict[int, Tuples], p: S2JParams, map_tasks: Any) -> pa.Table:
    """Pairs of every task between the live blocks (``WORK_ARROW``; the ``worker`` column is the
    block's worker this micro-batch) and the new tuples, plus the new tuples among themselves:
    ``PAIR`` rows, and per (block, task) a ``STATS`` row. ``map_tasks``: the unit's executor
    (``OpenUnit.map_tasks``)."""
    pseudo = pa.Table.from_pylist([{"block_id": NEW_BLOCK, "side": 0, "worker": 0, "n": 0, "blob": None}],
                                  schema=WORK_ARROW)
    rows = pseudo if blocks is None else pa.concat_tables([blocks.select(WORK_ARROW.names).cast(WORK_ARROW), pseudo])
    return map_tasks(rows, _np(rows, "worker", np.int64), functools.partial(worker_pairs, new=new, p=p), JOIN_ARROW,
                     "s2j-join")
