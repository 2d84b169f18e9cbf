"""Streaming HyperCube (Qiu, Papadias & Yi, EDBT'19) over Arrow, for both executors.

The algorithm lives in ``simjoin.core.hypercube``; this module moves its arrays:

* :func:`batch_counts` - a micro-batch's top (side, key) counts for the heavy-hitter summary (a
  top-k query: the Misra-Gries merge needs no more).
* :func:`copies_of` - every tuple's copies (task, worker) under a dispatcher.
* :func:`join` - the copies grouped by worker, and every worker's local hash join (the core's
  numba kernel, :func:`worker_join`) as one task of the unit's executor (``OpenUnit.map_tasks``:
  a thread pool, or a Spark job with each worker alone in its partition): ``PAIR`` rows, or
  per-key ``COUNTER`` rows with ``--count-only``, and one ``STATS`` row per worker.
* :func:`loads` - the copies each worker holds under a dispatcher, and PHJ's per-worker tuples.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np
import pyarrow as pa

from simjoin.contracts import RowKind
from simjoin.core.hypercube.dispatch import Dispatcher
from simjoin.core.hypercube.join import local_counts, local_join
from simjoin.core.hypercube.route import phj_loads, route
from simjoin.core.unique import unique

__all__ = ["TUPLE_COLUMNS", "JOIN_ARROW", "batch_counts", "copies_of", "join", "worker_join", "loads"]

#: A tuple as the join sees it: side (0 R, 1 S), id, ts in microseconds, key, new in this unit.
TUPLE_COLUMNS = ("side", "id", "ts_us", "k", "new")
COPY_ARROW = pa.schema([("side", pa.int64()), ("id", pa.int64()), ("ts_us", pa.int64()), ("k", pa.int64()),
                        ("new", pa.int64()), ("task", pa.int64()), ("worker", pa.int64())])
JOIN_ARROW = pa.schema([("kind", pa.int8()), ("left_id", pa.int64()), ("right_id", pa.int64()), ("k", pa.int64()),
                        ("ts_us", pa.int64()), ("pairs", pa.int64()), ("worker", pa.int32()),
                        ("received", pa.int64()), ("new_copies", pa.int64()), ("tasks", pa.int64()),
                        ("seconds", pa.float64())])


def _col(t: pa.Table | pa.RecordBatch, c: str) -> np.ndarray:
    return np.ascontiguousarray(t.column(c).to_numpy(zero_copy_only=False), dtype=np.int64)


def batch_counts(records: pa.Table, top: int, also: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The ``top`` largest (side, key) counts of ``records`` plus the counts of keys in ``also``
    (the summary's keys), and the number of records."""
    side, k = _col(records, "side"), _col(records, "k")
    if side.size == 0:
        z = np.zeros(0, np.int64)
        return z.astype(np.int8), z, z, 0
    ss, ks, ns = [], [], []
    for s in (0, 1):  # one 1-D unique per side (a 2-column unique sorts rows as bytes: 10x as slow)
        u, c = np.unique(k[side == s], return_counts=True)
        ss.append(np.full(u.size, s, np.int64))
        ks.append(u)
        ns.append(c)
    ps, pk, n = np.concatenate(ss), np.concatenate(ks), np.concatenate(ns)
    order = np.lexsort((pk, ps, -n))  # count descending, then side, then key
    keep = np.zeros(n.size, bool)
    keep[order[: int(top)]] = True
    keep |= np.isin(pk, np.asarray(also, np.int64))
    return ps[keep].astype(np.int8), pk[keep], n[keep].astype(np.int64), int(side.size)


def copies_of(b: pa.Table | pa.RecordBatch, d: Dispatcher) -> pa.RecordBatch:
    """``TUPLE_COLUMNS`` rows with one row per copy under ``d``: its task and worker."""
    cols = {c: _col(b, c) for c in TUPLE_COLUMNS}
    c = route(cols["side"], cols["id"], cols["k"], d)
    return pa.RecordBatch.from_arrays([pa.array(cols[n][c.row]) for n in TUPLE_COLUMNS]
                                      + [pa.array(c.task), pa.array(c.worker)], schema=COPY_ARROW)


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
        "tasks": int(unique(cols["task"]).size), "seconds": secs}], schema=JOIN_ARROW))
    return got


def join(tuples: pa.Table, disp: Dispatcher, window_us: int, count_only: bool, map_tasks: Any) -> pa.Table:
    """Each worker's local joins over its copies (see the module docstring). ``map_tasks``: the
    unit's executor (``OpenUnit.map_tasks``)."""
    if tuples.num_rows == 0:
        return JOIN_ARROW.empty_table()
    cp = pa.Table.from_batches([copies_of(tuples, disp)])
    return map_tasks(cp, _col(cp, "worker"), functools.partial(worker_join, window_us=window_us,
                                                               count_only=count_only),
                     JOIN_ARROW, "hypercube-join")


def _worker_loads(b: pa.Table | pa.RecordBatch, d: Dispatcher, p: int) -> tuple[np.ndarray, np.ndarray]:
    s, i, k = _col(b, "side"), _col(b, "id"), _col(b, "k")
    return np.bincount(route(s, i, k, d).worker, minlength=p)[:p], phj_loads(k, p)


def loads(held: pa.Table, disp: Dispatcher) -> tuple[np.ndarray, np.ndarray]:
    """Copies each worker holds under ``disp`` (the paper's load) and tuples per worker under
    PHJ, over the tuples ``held`` (side, id, k)."""
    if held.num_rows == 0:
        return np.zeros(disp.p, np.int64), np.zeros(disp.p, np.int64)
    ours, phj = _worker_loads(held, disp, disp.p)
    return ours.astype(np.int64), phj.astype(np.int64)
