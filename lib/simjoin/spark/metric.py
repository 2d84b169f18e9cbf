"""Spark adapters for the S3J metric-space streaming join (Siachamis et al., DEBS'23).

Every kernel of ``simjoin.core.metric`` runs inside Spark tasks on Arrow batches - no
per-row Python UDFs:

* Section 6, space partitioning: ``space_partition_df`` - ``mapInArrow``; each record is
  routed to its home partition and its Criterion-1 outer partitions (S3J: one centroid
  per worker; ClusterJoin: V virtual partitions dealt round-robin, Section 9.4).
* Section 7 steps 1-5, workset formulation: ``formulate_worksets_df`` -
  ``groupBy(partition).applyInArrow``; the core's sequential formulation runs per space
  partition, windows in ascending order, starting from the persisted workset centroids
  (join state is cleared at window end, centroids persist). Physical outer copies of a
  window seen in an earlier micro-batch are kept in a buffer and routed to the worksets
  opened later (the paper's buffering), so a window spanning micro-batches stays exact.
* Section 7.7, similarity computation: ``join_worksets_df`` - rows routed by worker,
  ``groupBy(worker).applyInArrow``. New rows are joined with each other by
  ``core.metric.join_worksets`` and with the window's earlier rows of the same workset
  (the Delta join state) by ``cross_join`` with the same role rules (everything but
  outer x outer; inner x inner emitted without a computation). Every matching pair meets
  in exactly one workset, in exactly one micro-batch: exact and duplicate-free.

Windows travel through the tasks as ``w`` / ``we`` (start / end in epoch microseconds).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from simjoin.core.metric import (
    INNER,
    OUTER,
    OUTLIER,
    check_threshold,
    formulate_partition_worksets,
    join_worksets,
    matches,
    pairwise,
    partition_bounds,
    random_centroids,
    space_partition,
    workset_key,
    workset_load,
)

__all__ = [
    "BUFFER",
    "COPY_SCHEMA",
    "FORM_SCHEMA",
    "JOIN_OUT_SCHEMA",
    "MEMBER_SCHEMA",
    "JoinParams",
    "S3JTables",
    "cross_join",
    "clusterjoin_members_df",
    "formulate_worksets_df",
    "join_worksets_df",
    "space_partition_df",
    "to_matrix",
]

# Role of a buffered physical outer copy in the join state (not a workset member).
BUFFER = 3

# Space-partition copies: one row per (record, window, partition).
COPY_SCHEMA = (
    "w long, we long, ts long, side byte, id long, vector array<double>, partition int, is_outer boolean"
)
# Workset members (the unit of the join and of the join state).
MEMBER_SCHEMA = (
    "w long, we long, partition int, workset_id long, worker int, side byte, id long, "
    "vector array<double>, role byte, is_new boolean"
)
# Output of the formulation task: kind 0 member, 1 new centroid, 2 counters.
FORM_SCHEMA = MEMBER_SCHEMA + ", kind byte, n long"
# Output of the join task: kind 0 pair, 1 per-(window, worker) counters.
JOIN_OUT_SCHEMA = (
    "kind byte, w long, worker int, left_id long, right_id long, distance double, "
    "n_inner long, n_outlier long, n_outer long, s_inner long, s_outlier long, s_outer long, "
    "worksets long, computations long, shortcut long, results long, load double, seconds double"
)


@dataclass(frozen=True)
class S3JTables:
    """Every Delta table of one S3J output (paths derive from ``output``)."""

    output: str

    @property
    def checkpoint(self) -> str:
        return f"{self.output}_checkpoint"

    @property
    def quarantine(self) -> str:
        return f"{self.output}_quarantine"

    @property
    def stats(self) -> str:
        return f"{self.output}_stats"

    @property
    def join_state(self) -> str:
        return f"{self.output}_state/join"

    @property
    def centroids(self) -> str:
        return f"{self.output}_state/centroids"

    @property
    def progress(self) -> str:
        return f"{self.output}_state/progress"

    def work(self, name: str) -> str:
        """Intermediate tables between stages (records, copies, members, task_stats)."""
        return f"{self.output}_work/{name}"


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


def space_partition_df(records: DataFrame, p: JoinParams) -> DataFrame:
    """Records (``w, we, ts, side, id, vector``) -> space-partition copies (``COPY_SCHEMA``).

    Space partitioning is a function of the record alone, so it runs on any Arrow batch.
    """
    C = p.space_centroids()
    cols = ["w", "we", "ts", "side", "id", "vector"]

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            if b.num_rows == 0:
                continue
            X = to_matrix(b.column("vector"), p.dim)
            sp = space_partition(X, C, p.metric, p.threshold, p.inclusive)
            taken = b.select(cols).take(pa.array(sp.record))
            yield pa.RecordBatch.from_arrays(
                [*taken.columns, pa.array(sp.partition.astype(np.int32)), pa.array(sp.is_outer)],
                names=[*cols, "partition", "is_outer"],
            )

    return records.select(*cols).mapInArrow(fn, COPY_SCHEMA)


def clusterjoin_members_df(copies: DataFrame, p: JoinParams) -> DataFrame:
    """ClusterJoin (Section 9.4): each virtual partition is one group; home rows probe
    everything (role outlier), outer copies probe home rows only (role outer); virtual
    partition v runs on worker ``v % P``."""
    return copies.select(
        "w", "we", "partition", F.lit(1).cast("long").alias("workset_id"),
        (F.col("partition") % p.workers).cast("int").alias("worker"), "side", "id", "vector",
        F.when(F.col("is_outer"), OUTER).otherwise(OUTLIER).cast("byte").alias("role"),
        F.lit(True).alias("is_new"),
    )


# --------------------------------------------------------------------------- Section 7.1-7.5


def _member_batch(w: int, we: int, part: int, ws: np.ndarray, worker: np.ndarray, side: np.ndarray,
                  ids: np.ndarray, X: np.ndarray, role: np.ndarray, is_new: bool, kind: int = 0,
                  n: int = 0) -> pa.RecordBatch:
    m = int(ws.shape[0])
    return pa.RecordBatch.from_arrays(
        [
            pa.array(np.full(m, w, np.int64)), pa.array(np.full(m, we, np.int64)),
            pa.array(np.full(m, part, np.int32)), pa.array(ws.astype(np.int64)),
            pa.array(worker.astype(np.int32)), pa.array(side.astype(np.int8)),
            pa.array(ids.astype(np.int64)), _vectors(X), pa.array(role.astype(np.int8)),
            pa.array(np.full(m, is_new)), pa.array(np.full(m, kind, np.int8)),
            pa.array(np.full(m, n, np.int64)),
        ],
        names=["w", "we", "partition", "workset_id", "worker", "side", "id", "vector", "role",
               "is_new", "kind", "n"],
    )


def formulate_worksets_df(copies: DataFrame, centroids: DataFrame | None, buffered: DataFrame | None,
                          p: JoinParams) -> DataFrame:
    """Workset formulation per space partition (one task per partition, ``FORM_SCHEMA`` out).

    copies: this micro-batch's copies (``COPY_SCHEMA``); centroids: the persisted workset
    centroids (``partition, workset_id, vector, worker``); buffered: physical outer copies
    of still-open windows from earlier micro-batches (``w, we, partition, side, id, vector``).
    Out: kind 0 workset members (is_new False for buffered copies routed to new worksets),
    kind 1 centroids of new worksets (role = -1), kind 2 one counter row per (partition,
    window) with the centroid distance computations in ``n``.
    """
    parts = [copies.select(F.lit(0).cast("byte").alias("kind"), "w", "we", "ts", "partition",
                           F.lit(None).cast("long").alias("workset_id"), F.lit(None).cast("int").alias("worker"),
                           "side", "id", "vector", "is_outer")]
    if centroids is not None:
        parts.append(centroids.select(
            F.lit(1).cast("byte").alias("kind"), F.lit(None).cast("long").alias("w"),
            F.lit(None).cast("long").alias("we"), F.lit(None).cast("long").alias("ts"),
            F.col("partition").cast("int"), F.col("workset_id").cast("long"), F.col("worker").cast("int"),
            F.lit(None).cast("byte").alias("side"), F.lit(None).cast("long").alias("id"), "vector",
            F.lit(None).cast("boolean").alias("is_outer")))
    if buffered is not None:
        parts.append(buffered.select(
            F.lit(2).cast("byte").alias("kind"), "w", "we", F.lit(None).cast("long").alias("ts"),
            F.col("partition").cast("int"), F.lit(None).cast("long").alias("workset_id"),
            F.lit(None).cast("int").alias("worker"), "side", "id", "vector",
            F.lit(True).alias("is_outer")))
    df = parts[0]
    for extra in parts[1:]:
        df = df.unionByName(extra)
    P = p.workers
    dim = p.dim

    def fn(t: pa.Table) -> pa.Table:
        out: list[pa.RecordBatch] = []
        if t.num_rows == 0:
            return pa.Table.from_batches([], schema=_FORM_ARROW)
        kind = _np(t, "kind", np.int8)
        part = int(t.column("partition")[0].as_py())
        bounds = partition_bounds(p.metric, p.threshold, dim, p.inclusive)
        cen = t.filter(pa.array(kind == 1))
        ids = _np(cen, "workset_id", np.int64)
        order = np.argsort(ids, kind="stable")
        ids = ids[order]
        C = to_matrix(cen.column("vector"), dim)[order]
        workers = _np(cen, "worker", np.int64)[order]
        new = t.filter(pa.array(kind == 0))
        buf = t.filter(pa.array(kind == 2))
        w_new = _np(new, "w", np.int64)
        w_buf = _np(buf, "w", np.int64)
        we_new = _np(new, "we", np.int64)
        for w in np.unique(w_new):
            sel = np.flatnonzero(w_new == w)
            we = int(we_new[sel[0]])
            # Arrival order inside the window: (ts, side, id).
            sub = new.take(pa.array(sel))
            o = np.lexsort((_np(sub, "id", np.int64), _np(sub, "side", np.int8), _np(sub, "ts", np.int64)))
            sub = sub.take(pa.array(o))
            X = to_matrix(sub.column("vector"), dim)
            sd = _np(sub, "side", np.int8)
            rid = _np(sub, "id", np.int64)
            res = formulate_partition_worksets(
                X, _np(sub, "is_outer", bool), p.metric, p.threshold, p.inclusive,
                workset_id=ids if ids.size else None, centroid=C if ids.size else None, bounds=bounds,
                # A window may span micro-batches: later members need the full 2t outer sets.
                prune_outer=False)
            k_new = res.new_workset_id.shape[0]
            if k_new:
                ids = np.concatenate([ids, res.new_workset_id])
                C = np.concatenate([C, res.new_centroid])
                # Section 7.5: a new workset starts on the worker owning its partition.
                workers = np.concatenate([workers, np.full(k_new, part % P, np.int64)])
            wmap = dict(zip(ids.tolist(), workers.tolist()))
            wk = np.array([wmap[int(g)] for g in res.workset_id], dtype=np.int64)
            out.append(_member_batch(int(w), we, part, res.workset_id, wk, sd[res.record], rid[res.record],
                                     X[res.record], res.role, True))
            comps = res.centroid_distance_computations
            if k_new:
                out.append(_member_batch(int(w), we, part, res.new_workset_id, np.full(k_new, part % P),
                                         np.zeros(k_new), np.zeros(k_new), res.new_centroid, np.full(k_new, -1),
                                         True, kind=1))
                # Buffered physical outer copies of earlier micro-batches meet the new worksets.
                bsel = np.flatnonzero(w_buf == w)
                if bsel.size:
                    bt = buf.take(pa.array(bsel))
                    Xb = to_matrix(bt.column("vector"), dim)
                    D = pairwise(bounds.space, Xb, res.new_centroid)
                    comps += int(D.size)
                    r, g = np.nonzero(bounds.outer_radius >= D)
                    if r.size:
                        gid = res.new_workset_id[g]
                        out.append(_member_batch(int(w), we, part, gid, np.full(r.size, part % P),
                                                 _np(bt, "side", np.int8)[r], _np(bt, "id", np.int64)[r], Xb[r],
                                                 np.full(r.size, OUTER), False))
            out.append(_member_batch(int(w), we, part, np.zeros(1), np.full(1, part % P), np.zeros(1), np.zeros(1),
                                     np.zeros((1, dim)), np.full(1, -1), True, kind=2, n=comps))
        return pa.Table.from_batches(out, schema=_FORM_ARROW) if out else pa.Table.from_batches([], schema=_FORM_ARROW)

    return df.groupBy("partition").applyInArrow(fn, FORM_SCHEMA)


_FORM_ARROW = pa.schema([
    ("w", pa.int64()), ("we", pa.int64()), ("partition", pa.int32()), ("workset_id", pa.int64()),
    ("worker", pa.int32()), ("side", pa.int8()), ("id", pa.int64()), ("vector", pa.list_(pa.float64())),
    ("role", pa.int8()), ("is_new", pa.bool_()), ("kind", pa.int8()), ("n", pa.int64()),
])


# --------------------------------------------------------------------------- Section 7.7


@dataclass
class CrossResult:
    left_id: np.ndarray
    right_id: np.ndarray
    distance: np.ndarray
    computations: int
    shortcut: int


def cross_join(
    p: JoinParams,
    Xn: np.ndarray, idn: np.ndarray, rn: np.ndarray, sn: np.ndarray, kn: np.ndarray,
    Xo: np.ndarray, ido: np.ndarray, ro: np.ndarray, so: np.ndarray, ko: np.ndarray,
) -> CrossResult:
    """New rows x the window's earlier rows of the same workset (key ``kn`` / ``ko``).

    Role rules of Section 7.7 for a pair of members of one workset: every role combination
    but outer x outer meets; inner x inner is emitted without a computation. Two streams:
    left x right only. Distances come from the core's one kernel (``pairwise``).
    """
    Ls: list[np.ndarray] = []
    Rs: list[np.ndarray] = []
    Ds: list[np.ndarray] = []
    comps = 0
    short = 0
    if Xn.shape[0] == 0 or Xo.shape[0] == 0:
        z = np.zeros(0, np.int64)
        return CrossResult(z, z.copy(), np.zeros(0), 0, 0)
    on = np.lexsort((sn, rn, kn))
    oo = np.lexsort((so, ro, ko))
    common = np.intersect1d(kn, ko)
    n_lo, n_hi = np.searchsorted(kn[on], common, "left"), np.searchsorted(kn[on], common, "right")
    o_lo, o_hi = np.searchsorted(ko[oo], common, "left"), np.searchsorted(ko[oo], common, "right")
    side_pairs = [(None, None)] if p.self_join else [(0, 1), (1, 0)]
    for g in range(common.shape[0]):
        a_all = on[n_lo[g]:n_hi[g]]
        b_all = oo[o_lo[g]:o_hi[g]]
        for ra in (INNER, OUTLIER, OUTER):
            a_r = a_all[rn[a_all] == ra]
            if a_r.size == 0:
                continue
            for rb in (INNER, OUTLIER, OUTER):
                if ra == OUTER and rb == OUTER:
                    continue
                b_r = b_all[ro[b_all] == rb]
                if b_r.size == 0:
                    continue
                for sa, sb in side_pairs:
                    a = a_r if sa is None else a_r[sn[a_r] == sa]
                    b = b_r if sb is None else b_r[so[b_r] == sb]
                    if a.size == 0 or b.size == 0:
                        continue
                    ia = np.repeat(a, b.size)
                    ib = np.tile(b, a.size)
                    if ra == INNER and rb == INNER:
                        if p.exact_distances:
                            d = pairwise(p.metric, Xn[a], Xo[b]).reshape(-1)
                        else:
                            d = np.full(ia.size, np.nan)
                        short += ia.size
                        keep = np.ones(ia.size, bool)
                    else:
                        d = pairwise(p.metric, Xn[a], Xo[b]).reshape(-1)
                        comps += d.size
                        keep = matches(d, p.threshold, p.inclusive)
                    if not keep.any():
                        continue
                    left, right = idn[ia[keep]], ido[ib[keep]]
                    if p.self_join:
                        left, right = np.minimum(left, right), np.maximum(left, right)
                    elif sa == 1:
                        left, right = right, left
                    Ls.append(left)
                    Rs.append(right)
                    Ds.append(d[keep])
    z = np.zeros(0, np.int64)
    return CrossResult(
        np.concatenate(Ls) if Ls else z, np.concatenate(Rs) if Rs else z.copy(),
        np.concatenate(Ds) if Ds else np.zeros(0), comps, short)


_JOIN_ARROW_FIELDS = [
    ("kind", pa.int8()), ("w", pa.int64()), ("worker", pa.int32()), ("left_id", pa.int64()),
    ("right_id", pa.int64()), ("distance", pa.float64()), ("n_inner", pa.int64()), ("n_outlier", pa.int64()),
    ("n_outer", pa.int64()), ("s_inner", pa.int64()), ("s_outlier", pa.int64()), ("s_outer", pa.int64()),
    ("worksets", pa.int64()), ("computations", pa.int64()), ("shortcut", pa.int64()), ("results", pa.int64()),
    ("load", pa.float64()), ("seconds", pa.float64()),
]
_JOIN_ARROW = pa.schema(_JOIN_ARROW_FIELDS)


def _pairs_batch(w: int, worker: int, L: np.ndarray, R: np.ndarray, D: np.ndarray) -> pa.RecordBatch:
    n = L.shape[0]
    nulls = {name: pa.nulls(n, tp) for name, tp in _JOIN_ARROW_FIELDS[6:]}
    return pa.RecordBatch.from_arrays(
        [pa.array(np.zeros(n, np.int8)), pa.array(np.full(n, w, np.int64)), pa.array(np.full(n, worker, np.int32)),
         pa.array(L), pa.array(R), pa.array(D, mask=np.isnan(D)), *nulls.values()],
        schema=_JOIN_ARROW)


def join_worksets_df(members: DataFrame, p: JoinParams) -> DataFrame:
    """Section 7.7 join, one task per worker (``JOIN_OUT_SCHEMA`` out).

    members: rows of ``MEMBER_SCHEMA``; is_new False rows are the window's earlier members
    of the same worksets (join state) - they are only paired with new rows.
    """

    def fn(t: pa.Table) -> pa.Table:
        if t.num_rows == 0:
            return pa.Table.from_batches([], schema=_JOIN_ARROW)
        worker = int(t.column("worker")[0].as_py())
        out: list[pa.RecordBatch] = []
        wcol = _np(t, "w", np.int64)
        for w in np.unique(wcol):
            t0 = time.perf_counter()
            sub = t.filter(pa.array(wcol == w))
            isn = _np(sub, "is_new", bool)
            X = to_matrix(sub.column("vector"), p.dim)
            ids = _np(sub, "id", np.int64)
            role = _np(sub, "role", np.int8)
            side = _np(sub, "side", np.int8)
            part = _np(sub, "partition", np.int64)
            ws = _np(sub, "workset_id", np.int64)
            key = workset_key(part, ws)
            n, o = np.flatnonzero(isn), np.flatnonzero(~isn)
            jr = join_worksets(X[n], ids[n], role[n], part[n], ws[n], p.metric, p.threshold, p.inclusive,
                               side=None if p.self_join else side[n],
                               exact_distances=p.exact_distances or p.algorithm == "clusterjoin")
            if jr.shortcut_violations:
                raise AssertionError(f"{jr.shortcut_violations} inner x inner pairs failed verification")
            cr = cross_join(p, X[n], ids[n], role[n], side[n], key[n], X[o], ids[o], role[o], side[o], key[o])
            L = np.concatenate([jr.left_id, cr.left_id])
            R = np.concatenate([jr.right_id, cr.right_id])
            D = np.concatenate([jr.distance, cr.distance])
            # Load (Definition 5) per workset: new counts this micro-batch, state counts before it.
            jkey = workset_key(jr.partition, jr.workset_id)
            uk, inv = np.unique(key, return_inverse=True)
            cnt_new = np.zeros((uk.size, 3), np.int64)
            cnt_old = np.zeros((uk.size, 3), np.int64)
            np.add.at(cnt_new, (inv[n], role[n].astype(np.int64)), 1)
            np.add.at(cnt_old, (inv[o], role[o].astype(np.int64)), 1)
            has_new = np.isin(uk, jkey)
            load = workset_load(cnt_new[:, INNER], cnt_new[:, OUTLIER], cnt_new[:, OUTER],
                                cnt_old[:, INNER], cnt_old[:, OUTLIER], cnt_old[:, OUTER])[has_new]
            secs = time.perf_counter() - t0
            out.append(_pairs_batch(int(w), worker, L, R, D))
            stats = [
                np.int8(1), int(w), worker, None, None, None,
                int(cnt_new[:, INNER].sum()), int(cnt_new[:, OUTLIER].sum()), int(cnt_new[:, OUTER].sum()),
                int(cnt_old[has_new, INNER].sum()), int(cnt_old[has_new, OUTLIER].sum()),
                int(cnt_old[has_new, OUTER].sum()), int(has_new.sum()),
                int(jr.computations.sum()) + cr.computations, int(jr.shortcut_pairs.sum()) + cr.shortcut,
                int(L.shape[0]), float(load.sum()), secs,
            ]
            out.append(pa.RecordBatch.from_arrays(
                [pa.array([v], tp) for v, (_, tp) in zip(stats, _JOIN_ARROW_FIELDS)], schema=_JOIN_ARROW))
        return pa.Table.from_batches(out, schema=_JOIN_ARROW)

    return members.groupBy("worker").applyInArrow(fn, JOIN_OUT_SCHEMA)
