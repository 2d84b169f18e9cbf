"""The S3J metric-space streaming join (Siachamis et al., DEBS'23) over Arrow, for both executors.

Every kernel of ``simjoin.core.metric`` runs on Arrow batches - no per-row Python UDFs - in the
tasks of the unit's executor (``OpenUnit.map_tasks``: a thread pool, or one Spark job). This
module converts Arrow <-> numpy, routes rows and calls the core; the algorithm rules live in
the core:

* Section 6, space partitioning: ``space_partition_arrow``; each record is routed to its home
  partition and its Criterion-1 outer partitions (S3J: one centroid per worker; ClusterJoin: V
  virtual partitions dealt round-robin, Section 9.4).
* Section 7 steps 1-5, workset formulation: ``formulate_partition_arrow``, one task per space
  partition over ``formulation_input_arrow``'s rows; each task runs the core's micro-batch driver
  ``core.metric.formulate_partition_microbatch`` (windows ascending, arrival order,
  persisted centroids, new worksets on worker ``partition % P``, the join state of the
  windows so the outer sets keep the exact t + m_W bound and earlier rows reach every
  workset that gets new members, whenever it was opened).
* Section 7.7, similarity computation: ``join_task_arrow``, one task per worker over the rows
  ``route_by_assignment_arrow`` routed; per window the task runs the core's
  ``core.metric.join_worker_window`` (new rows x new rows, new rows x the window's
  earlier rows of the same workset from the Delta join state, the Definition 5 load and
  the counters) - the same function the single-process ``s3j_join_window`` runs. Every
  matching pair meets in exactly one workset, in exactly one micro-batch: exact and
  duplicate-free.

Windows travel through the tasks as ``w`` / ``we`` (start / end in epoch microseconds).
Multi-kind task outputs tag rows with ``simjoin.contracts.RowKind`` in a byte column
``kind``: formulation rows are ``MEMBER`` / ``CENTROID`` / ``COUNTER``, join rows ``PAIR`` /
``STATS``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from simjoin.contracts import Role, RowKind
from simjoin.core.metric import (
    OUTER,
    OUTLIER,
    PartitionState,
    check_threshold,
    formulate_partition_microbatch,
    join_worker_window,
    partition_bounds,
    random_centroids,
    space_partition,
    split_key,
    split_rows,
)
from simjoin.core.unique import unique
from simjoin.io.delta_files import write_file

__all__ = [
    "BUFFER",
    "COPY_SCHEMA",
    "FORM_SCHEMA",
    "COUNTERS",
    "JOIN_OUT_SCHEMA",
    "MEMBER_SCHEMA",
    "JoinParams",
    "FORM_ARROW",
    "JOIN_ARROW",
    "clusterjoin_members_arrow",
    "formulate_partition_arrow",
    "formulation_input_arrow",
    "join_worker_arrow",
    "route_by_assignment_arrow",
    "space_partition_arrow",
    "join_counters_arrow",
    "join_task_arrow",
    "to_matrix",
]

# Role of a buffered physical outer copy in the join state (not a workset member).
BUFFER = Role.BUFFER

# Space-partition copies: one row per (record, window, partition).
COPY_SCHEMA = (
    "w long, we long, ts long, side byte, id long, vector array<double>, partition int, is_outer boolean"
)
# Workset members (the unit of the join and of the join state).
MEMBER_SCHEMA = (
    "w long, we long, partition int, workset_id long, worker int, side byte, id long, "
    "vector array<double>, role byte, is_new boolean"
)
# Output of the formulation task: kind RowKind.MEMBER, CENTROID (new worksets) or COUNTER.
FORM_SCHEMA = MEMBER_SCHEMA + ", kind byte, n long"
# Output of the join task: kind RowKind.PAIR, STATS (per-(window, worker) counters) or WORKSET.
# A pair row is narrow (its counters struct is null): a unit's millions of pairs are
# materialized and scanned several times, and each null column would cost 8 bytes a row.
COUNTERS = (
    "n_inner long, n_outlier long, n_outer long, s_inner long, s_outlier long, s_outer long, "
    "worksets long, computations long, shortcut long, results long, load double, seconds double, "
    "partition int, workset_id long"
)
JOIN_OUT_SCHEMA = (
    f"kind byte, w long, worker int, left_id long, right_id long, distance double, c struct<{COUNTERS}>, "
    "file string"
)


@dataclass(frozen=True)
class JoinParams:
    """What every task needs to know (shipped to executors with the closure)."""

    metric: str
    threshold: float
    inclusive: bool
    workers: int
    algorithm: str
    virtual_partitions: int
    seed: int
    exact_distances: bool
    self_join: bool
    dim: int

    def __post_init__(self) -> None:
        check_threshold(self.metric, self.threshold)
        if self.algorithm not in ("s3j", "clusterjoin"):
            raise ValueError(f"invalid algorithm {self.algorithm!r}: allowed s3j or clusterjoin")
        if self.workers < 1 or self.dim < 1:
            raise ValueError(f"workers and dim must be >= 1, got {self.workers}, {self.dim}")

    @property
    def n_partitions(self) -> int:
        return self.workers if self.algorithm == "s3j" else self.virtual_partitions

    def space_centroids(self) -> npt.NDArray[np.float64]:
        """Section 6.2: seeded random centroids, U[-1, 1]^d (one per worker, or V virtual ones)."""
        return random_centroids(self.n_partitions, self.dim, self.seed)


def to_matrix(col: pa.Array | pa.ChunkedArray, dim: int) -> npt.NDArray[np.float64]:
    """A list<double> Arrow column of fixed dimension -> C-contiguous (n, dim) float64."""
    flat = pc.list_flatten(col)
    if isinstance(flat, pa.ChunkedArray):
        flat = flat.combine_chunks() if flat.num_chunks else pa.array([], pa.float64())
    arr = np.asarray(flat.to_numpy(zero_copy_only=False), dtype=np.float64)
    return np.ascontiguousarray(arr.reshape(-1, dim))


def _vectors(X: npt.NDArray[np.float64]) -> pa.ListArray:
    n, d = X.shape
    offsets = pa.array(np.arange(0, n * d + 1, d, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(X.reshape(-1), pa.float64()))


def _np(t: pa.Table | pa.RecordBatch, name: str, dtype: type | None = None) -> np.ndarray:
    col = t.column(name)
    arr = col.to_numpy() if isinstance(col, pa.ChunkedArray) else col.to_numpy(zero_copy_only=False)
    return np.asarray(arr, dtype=dtype) if dtype is not None else np.asarray(arr)


# --------------------------------------------------------------------------- Section 6


_COPY_COLS = ["w", "we", "ts", "side", "id", "vector"]


def space_partition_arrow(b: pa.RecordBatch | pa.Table, p: JoinParams,
                          C: npt.NDArray[np.float64] | None = None) -> pa.RecordBatch | pa.Table:
    """One Arrow batch of records (``w, we, ts, side, id, vector``) -> its space-partition copies
    (``COPY_SCHEMA``)."""
    C = p.space_centroids() if C is None else C
    X = to_matrix(b.column("vector"), p.dim)
    sp = space_partition(X, C, p.metric, p.threshold, p.inclusive)
    taken = b.select(_COPY_COLS).take(pa.array(sp.record))
    arrays = [*taken.columns, pa.array(sp.partition.astype(np.int32)), pa.array(sp.is_outer)]
    names = [*_COPY_COLS, "partition", "is_outer"]
    if isinstance(taken, pa.Table):
        return pa.Table.from_arrays(arrays, names=names)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def clusterjoin_members_arrow(copies: pa.Table | pa.RecordBatch, p: JoinParams) -> pa.Table:
    """ClusterJoin (Section 9.4): each virtual partition is one group; home rows probe
    everything (role outlier), outer copies probe home rows only (role outer); virtual
    partition v runs on worker ``v % P``. ``COPY_SCHEMA`` rows in, ``FORM_SCHEMA`` rows
    (``RowKind.MEMBER``) out."""
    n = copies.num_rows
    part = _np(copies, "partition", np.int64)
    role = np.where(_np(copies, "is_outer", bool), OUTER, OUTLIER).astype(np.int8)
    cols = {"w": copies.column("w"), "we": copies.column("we"), "partition": copies.column("partition"),
            "workset_id": pa.array(np.ones(n, np.int64)), "worker": pa.array((part % p.workers).astype(np.int32)),
            "side": copies.column("side"), "id": copies.column("id"), "vector": copies.column("vector"),
            "role": pa.array(role), "is_new": pa.array(np.ones(n, bool)),
            "kind": pa.array(np.full(n, int(RowKind.MEMBER), np.int8)), "n": pa.array(np.zeros(n, np.int64))}
    return pa.Table.from_arrays([cols[f.name].cast(f.type) for f in _FORM_ARROW], schema=_FORM_ARROW)


# --------------------------------------------------------------------------- Section 7.1-7.5


def _member_batch(w: int, we: int, part: int, ws: np.ndarray, worker: np.ndarray, side: np.ndarray,
                  ids: np.ndarray, X: np.ndarray, role: np.ndarray, is_new: bool, kind: RowKind = RowKind.MEMBER,
                  n: int = 0) -> pa.RecordBatch:
    m = int(ws.shape[0])
    return pa.RecordBatch.from_arrays(
        [
            pa.array(np.full(m, w, np.int64)), pa.array(np.full(m, we, np.int64)),
            pa.array(np.full(m, part, np.int32)), pa.array(ws.astype(np.int64)),
            pa.array(worker.astype(np.int32)), pa.array(side.astype(np.int8)),
            pa.array(ids.astype(np.int64)), _vectors(X), pa.array(role.astype(np.int8)),
            pa.array(np.full(m, is_new)), pa.array(np.full(m, int(kind), np.int8)),
            pa.array(np.full(m, n, np.int64)),
        ],
        names=["w", "we", "partition", "workset_id", "worker", "side", "id", "vector", "role",
               "is_new", "kind", "n"],
    )


# Sources of the rows in the formulation task's input (column ``source``, not ``kind``).
_SOURCE_COPY = 0  # this micro-batch's space-partition copies
_SOURCE_CENTROID = 1  # persisted workset centroids
_SOURCE_STATE = 2  # join state: a record copy of an open window (inner with its home, or buffered outer)
_SOURCE_ROUTED = 3  # join state: an outer-set membership already made (no vector)


_FORM_IN_ARROW = pa.schema([
    ("source", pa.int8()), ("w", pa.int64()), ("we", pa.int64()), ("ts", pa.int64()), ("partition", pa.int32()),
    ("workset_id", pa.int64()), ("worker", pa.int32()), ("side", pa.int8()), ("id", pa.int64()),
    ("vector", pa.list_(pa.float64())), ("is_outer", pa.bool_()),
])


def formulation_input_arrow(copies: pa.Table, centroids: pa.Table | None, state: pa.Table | None) -> pa.Table:
    """The formulation's input, one table: copies (``COPY_SCHEMA``), persisted centroids
    (``partition, workset_id, vector, worker``) and join-state rows (``w, we, partition,
    workset_id, side, id, vector, role``), tagged by ``source``."""
    def part(t: pa.Table, source: np.ndarray, **cols: Any) -> pa.Table:
        n = t.num_rows
        arrays = []
        for f in _FORM_IN_ARROW:
            v = source if f.name == "source" else cols.get(f.name, f.name)
            if isinstance(v, str):
                arrays.append(t.column(v).cast(f.type))
            elif v is None:
                arrays.append(pa.nulls(n, f.type))
            else:
                arrays.append(pa.array(np.asarray(v)).cast(f.type))
        return pa.Table.from_arrays(arrays, schema=_FORM_IN_ARROW)

    parts = [part(copies, np.full(copies.num_rows, _SOURCE_COPY, np.int8), workset_id=None, worker=None)]
    if centroids is not None and centroids.num_rows:
        n = centroids.num_rows
        parts.append(part(centroids, np.full(n, _SOURCE_CENTROID, np.int8), w=None, we=None, ts=None, side=None,
                          id=None, is_outer=None))
    if state is not None and state.num_rows:
        role = _np(state, "role", np.int8)
        routed = role == OUTER
        ws = np.where(role == int(BUFFER), 0, _np(state, "workset_id", np.int64))
        vec = pc.if_else(pa.array(routed), pa.nulls(state.num_rows, pa.list_(pa.float64())),
                         state.column("vector").cast(pa.list_(pa.float64())))
        st = state.set_column(state.schema.get_field_index("vector"), "vector", vec)
        parts.append(part(st, np.where(routed, _SOURCE_ROUTED, _SOURCE_STATE).astype(np.int8), ts=None,
                          workset_id=ws, worker=None, is_outer=None))
    return pa.concat_tables(parts)


def formulate_partition_arrow(t: pa.Table, p: JoinParams) -> pa.Table:
    """One space partition's formulation input (:func:`formulation_input_arrow`'s rows: column
    ``source`` tells copies, persisted centroids, state rows and routed memberships apart) -> its
    ``FORM_SCHEMA`` rows: the task both executors run per space partition."""
    P = p.workers
    dim = p.dim
    if t.num_rows == 0:
        return pa.Table.from_batches([], schema=_FORM_ARROW)
    source = _np(t, "source", np.int8)
    part = int(t.column("partition")[0].as_py())
    cen = t.filter(pa.array(source == _SOURCE_CENTROID))
    new = t.filter(pa.array(source == _SOURCE_COPY))
    old = t.filter(pa.array(source == _SOURCE_STATE))
    done = t.filter(pa.array(source == _SOURCE_ROUTED))
    if new.num_rows == 0:
        return pa.Table.from_batches([], schema=_FORM_ARROW)
    X = to_matrix(new.column("vector"), dim)
    w_new, we_new = _np(new, "w", np.int64), _np(new, "we", np.int64)
    sd, rid = _np(new, "side", np.int8), _np(new, "id", np.int64)
    st = PartitionState.from_arrays(
        _np(old, "w", np.int64), _np(old, "side", np.int8), _np(old, "id", np.int64),
        to_matrix(old.column("vector"), dim), _np(old, "workset_id", np.int64), _np(done, "w", np.int64),
        _np(done, "side", np.int8), _np(done, "id", np.int64), _np(done, "workset_id", np.int64), dim=dim)
    windows = formulate_partition_microbatch(
        w_new, _np(new, "ts", np.int64), sd, rid, X, _np(new, "is_outer", bool),
        p.metric, p.threshold, p.inclusive, partition=part, n_workers=P,
        workset_id=_np(cen, "workset_id", np.int64), centroid=to_matrix(cen.column("vector"), dim),
        worker=_np(cen, "worker", np.int64), state=st,
        bounds=partition_bounds(p.metric, p.threshold, dim, p.inclusive), prune_outer=True)
    out: list[pa.RecordBatch] = []
    for w, res in windows:
        we = int(we_new[np.flatnonzero(w_new == w)[0]])
        r = res.record
        out.append(_member_batch(w, we, part, res.workset_id, res.worker, sd[r], rid[r], X[r], res.role, True))
        k_new = res.n_new_worksets
        if k_new:
            out.append(_member_batch(w, we, part, res.new_workset_id, res.new_worker, np.zeros(k_new),
                                     np.zeros(k_new), res.new_centroid, np.full(k_new, -1), True,
                                     kind=RowKind.CENTROID))
        b = res.routed_record
        if b.size:
            out.append(_member_batch(w, we, part, res.routed_workset_id, res.routed_worker, st.side[b],
                                     st.id[b], st.X[b], np.full(b.size, OUTER), False))
        out.append(_member_batch(w, we, part, np.zeros(1), np.full(1, part % P), np.zeros(1), np.zeros(1),
                                 np.zeros((1, dim)), np.full(1, -1), True, kind=RowKind.COUNTER,
                                 n=res.centroid_distance_computations))
    return pa.Table.from_batches(out, schema=_FORM_ARROW) if out else pa.Table.from_batches([], schema=_FORM_ARROW)


_FORM_ARROW = pa.schema([
    ("w", pa.int64()), ("we", pa.int64()), ("partition", pa.int32()), ("workset_id", pa.int64()),
    ("worker", pa.int32()), ("side", pa.int8()), ("id", pa.int64()), ("vector", pa.list_(pa.float64())),
    ("role", pa.int8()), ("is_new", pa.bool_()), ("kind", pa.int8()), ("n", pa.int64()),
])


# --------------------------------------------------------------------------- Section 7.7


#: a formulation task's rows (``FORM_SCHEMA``)
FORM_ARROW = _FORM_ARROW

_COUNTER_FIELDS = [
    ("n_inner", pa.int64()), ("n_outlier", pa.int64()), ("n_outer", pa.int64()), ("s_inner", pa.int64()),
    ("s_outlier", pa.int64()), ("s_outer", pa.int64()), ("worksets", pa.int64()), ("computations", pa.int64()),
    ("shortcut", pa.int64()), ("results", pa.int64()), ("load", pa.float64()), ("seconds", pa.float64()),
    ("partition", pa.int32()), ("workset_id", pa.int64()),
]
_COUNTERS_ARROW = pa.struct(_COUNTER_FIELDS)
_JOIN_ARROW_FIELDS = [
    ("kind", pa.int8()), ("w", pa.int64()), ("worker", pa.int32()), ("left_id", pa.int64()),
    ("right_id", pa.int64()), ("distance", pa.float64()), ("c", _COUNTERS_ARROW), ("file", pa.string()),
]
_JOIN_ARROW = pa.schema(_JOIN_ARROW_FIELDS)
#: a join task's rows (``JOIN_OUT_SCHEMA``)
JOIN_ARROW = _JOIN_ARROW


def _pairs_batch(w: int, worker: int, L: np.ndarray, R: np.ndarray, D: np.ndarray) -> pa.RecordBatch:
    n = L.shape[0]
    return pa.RecordBatch.from_arrays(
        [pa.array(np.full(n, int(RowKind.PAIR), np.int8)), pa.array(np.full(n, w, np.int64)),
         pa.array(np.full(n, worker, np.int32)), pa.array(L), pa.array(R), pa.array(D, mask=np.isnan(D)),
         pa.nulls(n, _COUNTERS_ARROW), pa.nulls(n, pa.string())],
        schema=_JOIN_ARROW)


def _file_batch(worker: int, row: dict[str, Any]) -> pa.RecordBatch:
    """The ``RowKind.FILE`` row of a pair file a task wrote (``delta_files.write_file``'s row as JSON)."""
    return pa.RecordBatch.from_arrays(
        [pa.array([int(RowKind.FILE)], pa.int8()), pa.nulls(1, pa.int64()), pa.array([worker], pa.int32()),
         pa.nulls(1, pa.int64()), pa.nulls(1, pa.int64()), pa.nulls(1, pa.float64()), pa.nulls(1, _COUNTERS_ARROW),
         pa.array([json.dumps(row)], pa.string())],
        schema=_JOIN_ARROW)


def _pairs_table(schema: pa.Schema, w: int, L: np.ndarray, R: np.ndarray, D: np.ndarray) -> pa.Table:
    """One window's pairs in the output's columns (left_id, right_id, distance, window_start)."""
    n = L.shape[0]
    cols = {"left_id": pa.array(L), "right_id": pa.array(R), "distance": pa.array(D, mask=np.isnan(D)),
            "window_start": pa.array(np.full(n, w, np.int64)).cast(pa.timestamp("us", tz="UTC"))}
    return pa.table([cols[f.name].cast(f.type) for f in schema], schema=schema)


def _counters_batch(kind: RowKind, w: int, worker: int, k: int, **values: Any) -> pa.RecordBatch:
    """``k`` counter rows of one kind (STATS or WORKSET); counters not given are null."""
    fields = [pa.array(np.ascontiguousarray(np.broadcast_to(values[name], (k,))), tp) if name in values
              else pa.nulls(k, tp) for name, tp in _COUNTER_FIELDS]
    return pa.RecordBatch.from_arrays(
        [pa.array(np.full(k, int(kind), np.int8)), pa.array(np.full(k, w, np.int64)),
         pa.array(np.full(k, worker, np.int32)), pa.nulls(k, pa.int64()), pa.nulls(k, pa.int64()),
         pa.nulls(k, pa.float64()), pa.StructArray.from_arrays(fields, fields=list(_COUNTERS_ARROW)),
         pa.nulls(k, pa.string())],
        schema=_JOIN_ARROW)


def _worksets_batch(w: int, worker: int, jw: Any, secs: float) -> pa.RecordBatch:
    k = int(jw.workset_id.shape[0])
    share = jw.workset_load / jw.load if jw.load > 0 else np.full(k, 1.0 / max(k, 1))
    return _counters_batch(RowKind.WORKSET, w, worker, k, n_inner=jw.workset_rows.astype(np.int64),
                           load=jw.workset_load.astype(np.float64), seconds=secs * share,
                           partition=jw.workset_partition.astype(np.int32), workset_id=jw.workset_id.astype(np.int64))


def _split_parts(b: pa.RecordBatch | pa.Table, cols: list[str], k: np.ndarray) -> pa.RecordBatch | pa.Table:
    """Rows of worksets split into ``k`` parts, replicated per part (``core.metric.split_rows``),
    keyed ``split_key(workset_id, part)``, with ``base_workset_id`` and ``part``."""
    row, part, new = split_rows(_np(b, "role", np.int8), _np(b, "is_new", bool), _np(b, "side", np.int8),
                                _np(b, "id", np.int64), k)
    t = b.select(cols).take(pa.array(row))
    names = t.schema.names
    arrays = list(t.columns)
    arrays[names.index("is_new")] = pa.array(new)
    ws = _np(t, "workset_id", np.int64)
    arrays[names.index("workset_id")] = pa.array(split_key(ws, part))
    make = pa.Table.from_arrays if isinstance(t, pa.Table) else pa.RecordBatch.from_arrays
    return make([*arrays, pa.array(ws), pa.array(part)], names=[*names, "base_workset_id", "part"])


def route_by_assignment_arrow(members: pa.Table, assignment: pa.Table | None) -> pa.Table:
    """``route_by_assignment`` for an Arrow table in the driver (the same split and placement)."""
    if assignment is None or assignment.num_rows == 0 or members.num_rows == 0:
        return members
    cols = list(members.schema.names)
    a = pa.table({"partition": assignment.column("partition").cast(pa.int64()),
                  "workset_id": assignment.column("workset_id").cast(pa.int64()),
                  "part": assignment.column("part").cast(pa.int64()),
                  "parts": assignment.column("parts").cast(pa.int64()),
                  "assigned": assignment.column("worker").cast(pa.int64())})
    parts = a.group_by(["partition", "workset_id"]).aggregate([("parts", "max")])
    keys = pa.table({"partition": members.column("partition").cast(pa.int64()),
                     "workset_id": members.column("workset_id").cast(pa.int64()),
                     "_row": pa.array(np.arange(members.num_rows, dtype=np.int64))})
    hit = keys.join(parts, ["partition", "workset_id"], join_type="left outer").sort_by("_row")
    k = np.asarray(pc.fill_null(hit.column("parts_max"), 1).to_numpy(zero_copy_only=False), np.int64)
    out = _split_parts(members, cols, k)
    okeys = pa.table({"partition": out.column("partition").cast(pa.int64()),
                      "workset_id": out.column("base_workset_id").cast(pa.int64()),
                      "part": out.column("part").cast(pa.int64()),
                      "_row": pa.array(np.arange(out.num_rows, dtype=np.int64))})
    placed = okeys.join(a.select(["partition", "workset_id", "part", "assigned"]), ["partition", "workset_id", "part"],
                        join_type="left outer").sort_by("_row")
    worker = pc.coalesce(placed.column("assigned"), out.column("worker").cast(pa.int64())).cast(pa.int32())
    out = out.set_column(out.schema.get_field_index("worker"), "worker", worker)
    return out.select(cols)


def join_task_arrow(t: pa.Table, p: JoinParams, pair_files: tuple[str, Any] | None = None) -> pa.Table:
    """One join task (a worker's rows): :func:`join_worker_arrow`, its pairs written as one
    Parquet file into ``pair_files`` (directory, Arrow schema) and named by a ``RowKind.FILE`` row,
    or kept as ``PAIR`` rows without it: the task both executors run per worker
    (``JOIN_OUT_SCHEMA`` rows)."""
    out, pairs = join_worker_arrow(t, p, None if pair_files is None else pair_files[1])
    if pair_files is not None and pairs is not None and pairs.num_rows:
        out = pa.concat_tables([out, pa.Table.from_batches([_file_batch(
            int(t.column("worker")[0].as_py()), write_file(pair_files[0], pairs))], schema=_JOIN_ARROW)])
    return out


def join_counters_arrow(joined: pa.Table) -> pa.Table:
    """:func:`join_counters` of a pyarrow Table: the STATS and WORKSET rows, counters as columns."""
    kind = _np(joined, "kind", np.int8)
    t = joined.filter(pa.array((kind == int(RowKind.STATS)) | (kind == int(RowKind.WORKSET))))
    c = t.column("c").combine_chunks() if t.num_rows else pa.nulls(0, _COUNTERS_ARROW)
    return pa.Table.from_arrays([t.column("kind"), t.column("w"), t.column("worker"),
                                 *[c.field(name) for name, _ in _COUNTER_FIELDS]],
                                names=["kind", "w", "worker", *[name for name, _ in _COUNTER_FIELDS]])


def join_worker_arrow(t: pa.Table, p: JoinParams, pairs_schema: pa.Schema | None = None
                      ) -> tuple[pa.Table, pa.Table | None]:
    """One worker's rows (``MEMBER_SCHEMA``) -> its ``JOIN_OUT_SCHEMA`` rows, per window: the body
    of :func:`join_task_arrow`. With ``pairs_schema`` (the output's columns), the pairs come back
    apart as one table in it (no ``PAIR`` rows)."""
    if t.num_rows == 0:
        return pa.Table.from_batches([], schema=_JOIN_ARROW), None
    # ClusterJoin always verifies (no inner sets, so nothing is shortcut anyway).
    exact = p.exact_distances or p.algorithm == "clusterjoin"
    worker = int(t.column("worker")[0].as_py())
    out: list[pa.RecordBatch] = []
    pairs: list[pa.Table] = []
    wcol = _np(t, "w", np.int64)
    for w in unique(wcol):
        # the join's CPU time in this thread: another thread of the process (the driver's import
        # of Great Expectations beside a driver unit's stages) does not count as the kernel's
        t0 = time.thread_time()
        sub = t.filter(pa.array(wcol == w))
        jw = join_worker_window(
            to_matrix(sub.column("vector"), p.dim), _np(sub, "id", np.int64), _np(sub, "role", np.int8),
            _np(sub, "partition", np.int64), _np(sub, "workset_id", np.int64), _np(sub, "is_new", bool),
            p.metric, p.threshold, p.inclusive,
            side=None if p.self_join else _np(sub, "side", np.int8), exact_distances=exact)
        secs = time.thread_time() - t0
        if pairs_schema is None:
            out.append(_pairs_batch(int(w), worker, jw.left_id, jw.right_id, jw.distance))
        else:
            pairs.append(_pairs_table(pairs_schema, int(w), jw.left_id, jw.right_id, jw.distance))
        out.append(_counters_batch(
            RowKind.STATS, int(w), worker, 1, n_inner=jw.n_inner, n_outlier=jw.n_outlier, n_outer=jw.n_outer,
            s_inner=jw.state_inner, s_outlier=jw.state_outlier, s_outer=jw.state_outer, worksets=jw.worksets,
            computations=jw.computations, shortcut=jw.shortcut_pairs, results=jw.result_pairs, load=jw.load,
            seconds=secs))
        out.append(_worksets_batch(int(w), worker, jw, secs))
    table = pa.Table.from_batches(out, schema=_JOIN_ARROW)
    return table, (pa.concat_tables(pairs) if pairs_schema is not None and pairs else None)

