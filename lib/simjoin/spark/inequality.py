"""Spark adapter of SPO-Join (Aslam et al., *SPO-Join: Efficient Stream Inequality Join*).

The algorithm lives in ``simjoin.core.inequality`` (``spo`` holds the pipeline's steps); this
module ships its arrays around:

* **State** (``STATE_SCHEMA``, the Delta table ``<output>_state/batches``): one row per
  immutable PO-Join batch (Section 4.2) and one per side for the mutable part (Section 4.1), each
  with its index serialized (sorted arrays, permutation array, offsets), so a restart resumes
  without re-sorting the window. A stored side joins in one role (two streams: left ``l``,
  right ``r``) or both (self-join: ``blob_l`` and ``blob_r``).
* **Probe** (:func:`probe_df`, Section 5): the state rows are routed by ``worker`` (batches
  are dealt round-robin, one list per worker) to one Spark task each; every task probes its
  batches with the unit's new tuples, which travel with the task, and one task also joins the
  new tuples among themselves. The inner loops are the core's numba kernels, run in
  ``mapInArrow``; pairs leave as Arrow arrays.
* **Merge** (``core.inequality.spo.merge_state``, Section 4.2) runs on the driver: the new tuples
  enter the mutable part (a merge of sorted runs, not a re-sort); :func:`state_frame` turns the
  rows it returns into a DataFrame.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from simjoin.contracts import RowKind
from simjoin.core.inequality.query import parse_query
from simjoin.core.inequality.spo import NEW, IneqParams, Tuples, probe_row
from simjoin.core.inequality.spo import new_tuples as split_new
from simjoin.spark.routing import map_tasks, route_to_tasks
from simjoin.spark.session import arrow_frame

__all__ = ["STATE_SCHEMA", "PROBE_SCHEMA", "new_tuples", "new_tuples_arrow", "probe_df", "probe_table", "probe_task",
           "state_frame", "state_table"]

STATE_ARROW = pa.schema([("batch_id", pa.int64()), ("side", pa.int8()), ("kind", pa.string()),
                         ("worker", pa.int32()), ("n", pa.int64()), ("ts_min", pa.int64()), ("ts_max", pa.int64()),
                         ("seq_min", pa.int64()), ("seq_max", pa.int64()), ("blob_l", pa.binary()),
                         ("blob_r", pa.binary()), ("blob_t", pa.binary())])
STATE_SCHEMA = ("batch_id long, side byte, kind string, worker int, n long, ts_min long, ts_max long, "
                "seq_min long, seq_max long, blob_l binary, blob_r binary, blob_t binary")
PROBE_ARROW = pa.schema([("kind", pa.int8()), ("left_id", pa.int64()), ("right_id", pa.int64()), ("ts", pa.int64()),
                         ("worker", pa.int32()), ("batch_id", pa.int64()), ("stored", pa.int64()),
                         ("probed", pa.int64()), ("seconds", pa.float64())])
PROBE_SCHEMA = ("kind byte, left_id long, right_id long, ts long, worker int, batch_id long, stored long, "
                "probed long, seconds double")


def _np(t: pa.Table, c: str, dtype: Any) -> np.ndarray:
    return np.ascontiguousarray(t.column(c).to_numpy(zero_copy_only=False), dtype=dtype)


def new_tuples(records: DataFrame, p: IneqParams, counts: dict[int, int]) -> dict[int, Tuples]:
    """The unit's staged records as the core's new tuples per side (``spo.new_tuples``)."""
    cols = sorted({c for s in p.sides for c in p.columns(s)})
    t = records.select(F.col("side").cast("int"), "id", F.unix_micros("ts").alias("ts"), *cols).toArrow()
    return split_new(_np(t, "side", np.int64), _np(t, "id", np.int64), _np(t, "ts", np.int64),
                     {c: _col(t, c) for c in cols}, p, counts)


def _col(t: pa.Table, c: str) -> np.ndarray:
    """A predicate column in its staged type: a long as int64 (its nulls - the other side's rows of a column
    only one side has - as 0, never through float64), anything else float64."""
    col = t.column(c)
    if pa.types.is_integer(col.type):
        return _np(pa.table({c: col.fill_null(0)}), c, np.int64)
    return _np(t, c, np.float64)


def probe_df(spark: SparkSession, state: DataFrame | None, new: dict[int, Tuples], p: IneqParams) -> DataFrame:
    """Every live batch and mutable part probed by the new tuples, plus the new tuples joined
    among themselves (a ``NEW`` row): ``PAIR`` rows and one ``STATS`` row per state row (its
    ``ts`` column holds the row's pair count)."""
    q_text, window, self_join = p.where, p.window, p.self_join
    pseudo = arrow_frame(spark, pa.Table.from_pylist(
        [{"batch_id": -1, "side": 0, "kind": NEW, "worker": 0, "n": 0}], schema=STATE_ARROW))
    rows = pseudo if state is None else state.select(*STATE_ARROW.names).unionByName(pseudo)
    rows = route_to_tasks(rows.withColumn("blob_t", F.lit(None).cast("binary")), "worker", p.workers)

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return probe_task(batches, new, q_text, window, self_join)

    return rows.mapInArrow(task, PROBE_SCHEMA)


def probe_task(batches: Iterable[pa.RecordBatch], new: dict[int, Tuples], q_text: str, window: Any,
               self_join: bool) -> Iterator[pa.RecordBatch]:
    """One probe task (of either executor): every state row of ``batches`` (``STATE_ARROW``, or the
    ``NEW`` pseudo row) probed by the new tuples: ``PAIR`` rows and one ``STATS`` row each (its
    ``ts`` column holds the row's pair count), as ``PROBE_ARROW`` batches."""
    q = parse_query(q_text)
    for b in batches:
        for r in b.to_pylist():
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


def probe_table(state: pa.Table | None, new: dict[int, Tuples], p: IneqParams) -> pa.Table:
    """:func:`probe_df` on the in-process executor: the same state rows, routed by ``worker`` to
    the same tasks (``p.workers``), each :func:`probe_task` on a thread of this process."""
    pseudo = pa.Table.from_pylist([{"batch_id": -1, "side": 0, "kind": NEW, "worker": 0, "n": 0}], schema=STATE_ARROW)
    rows = pseudo if state is None else pa.concat_tables([state.select(STATE_ARROW.names).cast(STATE_ARROW), pseudo])
    rows = rows.set_column(rows.schema.get_field_index("blob_t"), "blob_t", pa.nulls(rows.num_rows, pa.binary()))
    n = max(1, int(p.workers))
    task_of = np.asarray(rows.column("worker").to_numpy(zero_copy_only=False), np.int64) % n

    def one(t: pa.Table) -> list[pa.RecordBatch]:
        return list(probe_task(t.to_batches(), new, p.where, p.window, p.self_join))

    out = [b for got in map_tasks(rows, task_of, one, "ineq-probe") for b in got]
    return pa.Table.from_batches(out, schema=PROBE_ARROW)


def new_tuples_arrow(records: pa.Table, p: IneqParams, counts: dict[int, int]) -> dict[int, Tuples]:
    """:func:`new_tuples` of a unit's records read in this process (a pyarrow Table)."""
    cols = sorted({c for s in p.sides for c in p.columns(s)})
    ts = records.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    t = pa.table({"side": records.column("side").cast(pa.int64()), "id": records.column("id"), "ts": ts,
                  **{c: records.column(c) for c in cols}})
    return split_new(_np(t, "side", np.int64), _np(t, "id", np.int64), _np(t, "ts", np.int64),
                     {c: _col(t, c) for c in cols}, p, counts)


def state_table(rows: list[dict[str, Any]]) -> pa.Table:
    """State rows (``spo.state_row`` dicts) as a pyarrow Table of ``STATE_ARROW``."""
    return pa.Table.from_pylist(rows, schema=STATE_ARROW)


def state_frame(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    """State rows (``spo.state_row`` dicts) as a DataFrame of ``STATE_SCHEMA``."""
    return arrow_frame(spark, state_table(rows))
