"""SPO-Join (Aslam et al., *SPO-Join: Efficient Stream Inequality Join*) over Arrow, for both executors.

The algorithm lives in ``simjoin.core.inequality`` (``spo`` holds the pipeline's steps); this
module ships its arrays around:

* **State** (``STATE_SCHEMA``, the Delta table ``<output>_state/batches``): one row per
  immutable PO-Join batch (Section 4.2) and one per side for the mutable part (Section 4.1), each
  with its index serialized (sorted arrays, permutation array, offsets), so a restart resumes
  without re-sorting the window. A stored side joins in one role (two streams: left ``l``,
  right ``r``) or both (self-join: ``blob_l`` and ``blob_r``).
* **Probe** (:func:`probe`, Section 5): the state rows are routed by ``worker`` (batches are
  dealt round-robin, one list per worker) to one task each of the unit's executor
  (``OpenUnit.map_tasks``: a thread pool, or a Spark job with each worker alone in its
  partition); every task (:func:`probe_task`) probes its batches with the unit's new tuples,
  which travel with the task, and one task also joins the new tuples among themselves. The
  inner loops are the core's numba kernels; pairs leave as Arrow arrays.
* **Merge** (``core.inequality.spo.merge_state``, Section 4.2) runs on the driver: the new tuples
  enter the mutable part (a merge of sorted runs, not a re-sort); :func:`state_table` turns the
  rows it returns into a pyarrow Table.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from simjoin.contracts import RowKind
from simjoin.core.inequality.query import parse_query
from simjoin.core.inequality.spo import NEW, IneqParams, Tuples, probe_row
from simjoin.core.inequality.spo import new_tuples as split_new

__all__ = ["STATE_ARROW", "PROBE_ARROW", "new_tuples", "probe", "probe_task", "state_table"]

STATE_ARROW = pa.schema([("batch_id", pa.int64()), ("side", pa.int8()), ("kind", pa.string()),
                         ("worker", pa.int32()), ("n", pa.int64()), ("ts_min", pa.int64()), ("ts_max", pa.int64()),
                         ("seq_min", pa.int64()), ("seq_max", pa.int64()), ("blob_l", pa.binary()),
                         ("blob_r", pa.binary()), ("blob_t", pa.binary())])
PROBE_ARROW = pa.schema([("kind", pa.int8()), ("left_id", pa.int64()), ("right_id", pa.int64()), ("ts", pa.int64()),
                         ("worker", pa.int32()), ("batch_id", pa.int64()), ("stored", pa.int64()),
                         ("probed", pa.int64()), ("seconds", pa.float64())])



def _np(t: pa.Table, c: str, dtype: Any) -> np.ndarray:
    return np.ascontiguousarray(t.column(c).to_numpy(zero_copy_only=False), dtype=dtype)


def _col(t: pa.Table, c: str) -> np.ndarray:
    """A predicate column in its staged type: a long as int64 (its nulls - the other side's rows of a column
    only one side has - as 0, never through float64), anything else float64."""
    col = t.column(c)
    if pa.types.is_integer(col.type):
        return _np(pa.table({c: col.fill_null(0)}), c, np.int64)
    return _np(t, c, np.float64)


def _rows(b: pa.RecordBatch) -> Iterator[dict[str, Any]]:
    """The state rows of ``b`` as dicts, each ``blob_*`` a pyarrow Buffer into ``b`` (None when null):
    the serialized indexes are read in place (``POBatch.from_bytes``), never copied into Python bytes."""
    blobs = [c for c in b.schema.names if c.startswith("blob_")]
    meta = b.select([c for c in b.schema.names if c not in blobs]).to_pylist()
    cols = {c: b.column(c) for c in blobs}
    for i, r in enumerate(meta):
        r.update({c: col[i].as_buffer() for c, col in cols.items()})
        yield r


def probe_task(batches: Iterable[pa.RecordBatch], new: dict[int, Tuples], q_text: str, window: Any,
               self_join: bool) -> Iterator[pa.RecordBatch]:
    """One probe task (of either executor): every state row of ``batches`` (``STATE_ARROW``, or the
    ``NEW`` pseudo row) probed by the new tuples: ``PAIR`` rows and one ``STATS`` row each (its
    ``ts`` column holds the row's pair count), as ``PROBE_ARROW`` batches."""
    q = parse_query(q_text)
    for b in batches:
        for r in _rows(b):
            t0 = time.perf_counter()
            lid, rid, ts, probed = probe_row(q, r, new, window, self_join)
            secs = time.perf_counter() - t0
            n, w, bid = int(lid.shape[0]), int(r["worker"]), int(r["batch_id"])
            if n:
                yield pa.RecordBatch.from_arrays(
                    [pa.array(np.full(n, int(RowKind.PAIR), np.int8)), pa.array(lid), pa.array(rid),
                     pa.array(ts), pa.array(np.full(n, w, np.int32)), pa.array(np.full(n, bid, np.int64)),
                     pa.nulls(n, pa.int64()), pa.nulls(n, pa.int64()), pa.nulls(n, pa.float64())],
                    schema=PROBE_ARROW)
            yield pa.RecordBatch.from_pylist([{
                "kind": int(RowKind.STATS), "left_id": None, "right_id": None, "ts": n, "worker": w,
                "batch_id": bid, "stored": int(r["n"] or 0), "probed": probed, "seconds": secs}],
                schema=PROBE_ARROW)


def probe(state: pa.Table | None, new: dict[int, Tuples], p: IneqParams, map_tasks: Any) -> pa.Table:
    """Every live batch and mutable part probed by the new tuples, plus the new tuples joined
    among themselves (a ``NEW`` row): ``PAIR`` rows and one ``STATS`` row per state row (its
    ``ts`` column holds the row's pair count). The state rows are routed by ``worker`` to
    ``p.workers`` tasks, each :func:`probe_task` on the unit's executor (``map_tasks``:
    ``OpenUnit.map_tasks``)."""
    pseudo = pa.Table.from_pylist([{"batch_id": -1, "side": 0, "kind": NEW, "worker": 0, "n": 0}], schema=STATE_ARROW)
    rows = pseudo if state is None else pa.concat_tables([state.select(STATE_ARROW.names).cast(STATE_ARROW), pseudo])
    rows = rows.set_column(rows.schema.get_field_index("blob_t"), "blob_t", pa.nulls(rows.num_rows, pa.binary()))
    n = max(1, int(p.workers))
    task_of = np.asarray(rows.column("worker").to_numpy(zero_copy_only=False), np.int64) % n
    return map_tasks(rows, task_of, functools.partial(_probe_rows, new=new, q_text=p.where, window=p.window,
                                                      self_join=p.self_join), PROBE_ARROW, "ineq-probe")


def _probe_rows(t: pa.Table, new: dict[int, Tuples], q_text: str, window: Any,
                self_join: bool) -> Iterator[pa.RecordBatch]:
    return probe_task(t.to_batches(), new, q_text, window, self_join)


def new_tuples(records: pa.Table, p: IneqParams, counts: dict[int, int]) -> dict[int, Tuples]:
    """The unit's staged records as the core's new tuples per side (``spo.new_tuples``)."""
    cols = sorted({c for s in p.sides for c in p.columns(s)})
    ts = records.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    t = pa.table({"side": records.column("side").cast(pa.int64()), "id": records.column("id"), "ts": ts,
                  **{c: records.column(c) for c in cols}})
    return split_new(_np(t, "side", np.int64), _np(t, "id", np.int64), _np(t, "ts", np.int64),
                     {c: _col(t, c) for c in cols}, p, counts)


def state_table(rows: list[dict[str, Any]]) -> pa.Table:
    """State rows (``spo.state_row`` dicts) as a pyarrow Table of ``STATE_ARROW``."""
    return pa.Table.from_pylist(rows, schema=STATE_ARROW)
