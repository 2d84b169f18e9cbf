"""Similarity computations of S3J (Section 7.7) and the one-window / multi-window driver.

Siachamis et al., DEBS'23, Section 7.7. Inside a workset:

* inner x inner: emitted as matches *without* a distance computation (distance
  NaN unless ``exact_distances=True``) - safe because the inner radius is
  below t/2 with a rounding margin (``distance.partition_bounds``);
* inner probes outer + outliers; outlier probes inner + outer + outliers;
  outer probes inner + outliers; outer x outer is never compared.

With the space partitioning's one-way outer routing (Section 6.3) and the
workset routing rule (outer only to smaller workset ids, Section 7.5), every
matching pair meets in exactly one workset of one worker, in exactly one of the
computed role combinations, so the union over worksets is exact and
duplicate-free. A self-join returns each unordered pair once as
(smaller id, larger id); a two-stream join (``side`` 0 = left, 1 = right)
returns (left id, right id) and never compares two records of one side.

A worker's join is a function of the rows it receives only
(``join_worksets``): per row the vector, id, side, role and the workset
(partition, workset_id). Rows can therefore be shuffled by worker (or by
workset) and joined inside a task.

API:

* ``join_worksets(X, ids, role, partition, workset_id, metric, t,
  inclusive=False, *, side=None, exact_distances=False) -> WorksetJoinResult``
* ``cross_join(X_new, id_new, role_new, key_new, X_old, id_old, role_old, key_old,
  metric, t, inclusive=False, *, side_new=None, side_old=None, exact_distances=False)
  -> CrossJoinResult``: a window's new members x its earlier members of the same
  workset (the join state of a window spanning micro-batches), same role rules;
* ``join_worker_window(X, ids, role, partition, workset_id, is_new, metric, t,
  inclusive=False, *, side=None, exact_distances=False) -> WorkerWindowJoin``:
  one worker's join for one window - new rows with each other (``join_worksets``),
  new x earlier rows (``cross_join``), the Definition 5 load per workset and the
  worker's counters. Both the Spark tasks (``simjoin.operators.metric``) and
  ``s3j_join_window`` (all rows new) call it;
* ``s3j_join_window(X, ids, side, metric, t, inclusive=False, n_workers=5,
  seed=42, centroid_state=None, exact_distances=False, *, space_centroids=None)
  -> S3JWindowResult(left_id, right_id, distance, stats, centroid_state, copies)``
  where ``copies = CopyInfo(space, rows)`` (space partitioning and workset rows).
  X must be in arrival order (e.g. sorted by (ts, id)); pairs are sorted.
* ``s3j_join_windows(X, ids, window, side, metric, t, ...) -> MultiWindowResult``:
  windows joined in ascending order carrying the centroid state; pairs across
  windows are never produced.

The single-process driver and the Spark tasks share their code path: per space
partition ``worksets.formulate_partition_window`` (the Spark task drives it over the
windows of a micro-batch, ``microbatch.formulate_partition_microbatch``), per worker
``join_worker_window``. Both cut outer sets to t + member radius (``prune_outer=True``,
never above the paper's 2t, which ``prune_outer=False`` keeps): the Spark tasks pass the
window's earlier rows, so the bound stays exact when a window spans micro-batches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from numba import njit

from simjoin.core.unique import unique

from ..hashing import splitmix64
from .distance import METRIC_CODES, _dist, _dot_dist, check_threshold, check_vectors, row_norms
from .load import WindowStats, workset_load
from .partitioning import SpacePartitioning, random_centroids, space_partition
from .worksets import (
    INNER,
    OUTER,
    OUTLIER,
    CentroidState,
    WorksetRows,
    formulate_worksets,
    workset_key,
)

__all__ = [
    "PART_SHIFT",
    "member_part",
    "split_key",
    "split_rows",
    "CopyInfo",
    "CrossJoinResult",
    "MultiWindowResult",
    "S3JWindowResult",
    "WorkerWindowJoin",
    "WorksetJoinResult",
    "check_ids_side",
    "cross_join",
    "join_worker_window",
    "join_worksets",
    "s3j_join_window",
    "s3j_join_windows",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

# Role pairs of Section 7.7 that meet inside a workset; the first one is the shortcut.
_ROLE_PAIRS = np.array(
    [[INNER, INNER], [INNER, OUTLIER], [INNER, OUTER], [OUTLIER, OUTLIER], [OUTLIER, OUTER]], dtype=np.int64
)


#: Margin of ``_cos_floor`` in cosine units: far above the few ulps of rounding in a dot
#: product, its division by the norms, ``acos`` and the division by pi.
_COS_MARGIN = 1e-9


def _cos_floor(metric: str, t: float) -> float:
    """A cosine below which the angular or cosine distance is surely above t (-2: no such
    shortcut, euclidean). acos is decreasing with |acos'| >= 1, so cos < cos(pi t) - margin
    gives acos(cos) / pi > t + margin / pi; for cosine, 1 - cos > t + margin."""
    if metric == "angular":
        return math.cos(math.pi * t) - _COS_MARGIN
    if metric == "cosine":
        return 1.0 - t - _COS_MARGIN
    return -2.0


@njit(cache=True, nogil=True)
def _grow(L: IntArray, R: IntArray, D: FloatArray, n: int) -> tuple[IntArray, IntArray, FloatArray]:
    cap = 2 * L.shape[0]
    L2 = np.empty(cap, dtype=np.int64)
    R2 = np.empty(cap, dtype=np.int64)
    D2 = np.empty(cap, dtype=np.float64)
    L2[:n] = L[:n]
    R2[:n] = R[:n]
    D2[:n] = D[:n]
    return L2, R2, D2


@njit(cache=True, nogil=True)
def _block(
    code: int,
    X: FloatArray,
    nrm: FloatArray,
    ids: IntArray,
    a0: int,
    a1: int,
    b0: int,
    b1: int,
    tri: bool,
    compute: bool,
    t: float,
    inclusive: bool,
    self_join: bool,
    exact: bool,
    L: IntArray,
    R: IntArray,
    D: FloatArray,
    n_out: int,
    c_low: float,
) -> tuple[IntArray, IntArray, FloatArray, int, int, int, int]:
    """Pairs rows [a0, a1) x [b0, b1) (tri: one block, a < b). a-rows are the left side.

    Angular and cosine: a pair whose cosine is below ``c_low`` (``_cos_floor``) is surely
    farther than t and is rejected on its dot product, without the arc cosine; every other
    pair is decided on ``_dist``'s own value, so the result is exact at the boundary."""
    comps = 0
    res = 0
    viol = 0
    d = X.shape[1]
    for a in range(a0, a1):
        start = a + 1 if tri else b0
        for b in range(start, b1):
            if compute:
                comps += 1
                if code == 0:
                    dd = _dist(code, X, a, X, b, nrm[a], nrm[b])
                else:  # the dot product as _dist takes it, then the rest of _dist
                    dot = 0.0
                    for k in range(d):
                        dot += X[a, k] * X[b, k]
                    if dot < c_low * (nrm[a] * nrm[b]):
                        continue
                    dd = _dot_dist(code, dot, nrm[a], nrm[b])
                ok = dd <= t if inclusive else dd < t
                if not ok:
                    continue
            elif exact:
                dd = _dist(code, X, a, X, b, nrm[a], nrm[b])
                ok = dd <= t if inclusive else dd < t
                if not ok:
                    viol += 1
            else:
                dd = np.nan
            if n_out == L.shape[0]:
                L, R, D = _grow(L, R, D, n_out)
            ia = ids[a]
            ib = ids[b]
            if self_join and ia > ib:
                ia, ib = ib, ia
            L[n_out] = ia
            R[n_out] = ib
            D[n_out] = dd
            n_out += 1
            res += 1
    return L, R, D, n_out, comps, res, viol


@njit(cache=True, nogil=True)
def _role_blocks(seg: IntArray, role: npt.NDArray[np.int8], side: npt.NDArray[np.int8], role_pairs: IntArray,
                 self_join: bool) -> IntArray:
    """Every block the join visits, one row ``(segment, role pair, a0, a1, b0, b1, tri)``: rows
    [a0, a1) x [b0, b1) of a workset segment (tri: one block, a < b), a-rows the left side. Two
    streams with mixed roles make two blocks: left ra x right rb and left rb x right ra."""
    nseg = seg.shape[0] - 1
    out = np.zeros((nseg * role_pairs.shape[0] * 2, 7), dtype=np.int64)
    bnd = np.zeros((3, 2, 2), dtype=np.int64)  # role, side, (start, end)
    n = 0
    for g in range(nseg):
        s1 = seg[g + 1]
        i = seg[g]
        for r in range(3):
            for sd in range(2):
                st = i
                while i < s1 and role[i] == r and side[i] == sd:
                    i += 1
                bnd[r, sd, 0] = st
                bnd[r, sd, 1] = i
        for q in range(role_pairs.shape[0]):
            ra = role_pairs[q, 0]
            rb = role_pairs[q, 1]
            for h in range(1 if (self_join or ra == rb) else 2):
                la, lb = (ra, rb) if h == 0 else (rb, ra)
                out[n, 0], out[n, 1] = g, q
                out[n, 2], out[n, 3] = bnd[la, 0, 0], bnd[la, 0, 1]
                sb = 0 if self_join else 1
                out[n, 4], out[n, 5] = bnd[lb, sb, 0], bnd[lb, sb, 1]
                out[n, 6] = 1 if (self_join and ra == rb) else 0
                n += 1
    return out[:n]


#: The most pairs ``_join_segments`` reserves room for before it starts (then it grows).
_MAX_RESERVE = 1 << 24


@njit(cache=True, nogil=True)
def _join_segments(
    code: int,
    X: FloatArray,
    nrm: FloatArray,
    ids: IntArray,
    side: npt.NDArray[np.int8],
    role: npt.NDArray[np.int8],
    seg: IntArray,
    role_pairs: IntArray,
    t: float,
    inclusive: bool,
    self_join: bool,
    exact: bool,
    c_low: float,
) -> tuple[IntArray, IntArray, FloatArray, IntArray, IntArray, IntArray, int]:
    """Join every workset segment; rows are sorted by (workset, role, side). The output buffers
    are reserved once for every candidate pair (at most ``_MAX_RESERVE``): pages never written
    cost nothing, and no pair is copied by a growth. The pairs come back as views of them."""
    nseg = seg.shape[0] - 1
    comps = np.zeros(nseg, dtype=np.int64)
    short = np.zeros(nseg, dtype=np.int64)
    res = np.zeros(nseg, dtype=np.int64)
    blocks = _role_blocks(seg, role, side, role_pairs, self_join)
    cap = 0
    for k in range(blocks.shape[0]):
        na, nb = blocks[k, 3] - blocks[k, 2], blocks[k, 5] - blocks[k, 4]
        cap += na * (na - 1) // 2 if blocks[k, 6] else na * nb
    cap = max(1024, min(cap, _MAX_RESERVE))
    L = np.empty(cap, dtype=np.int64)
    R = np.empty(cap, dtype=np.int64)
    D = np.empty(cap, dtype=np.float64)
    n_out = 0
    viol = 0
    for k in range(blocks.shape[0]):
        g, q = blocks[k, 0], blocks[k, 1]
        compute = not (role_pairs[q, 0] == INNER and role_pairs[q, 1] == INNER)
        L, R, D, n_out, c, p, v = _block(
            code, X, nrm, ids, blocks[k, 2], blocks[k, 3], blocks[k, 4], blocks[k, 5], blocks[k, 6] == 1, compute,
            t, inclusive, self_join, exact, L, R, D, n_out, c_low)
        comps[g] += c
        res[g] += p
        viol += v
        if not compute:
            short[g] += p
    return L[:n_out], R[:n_out], D[:n_out], comps, short, res, viol


def check_ids_side(
    n: int, ids: npt.ArrayLike, side: npt.ArrayLike | None
) -> tuple[IntArray, npt.NDArray[np.int8] | None]:
    """Validate per-record ids (int64, length n) and side (None = self-join, else 0/1)."""
    id_arr = np.asarray(ids, dtype=np.int64).reshape(-1)
    if id_arr.shape[0] != n:
        raise ValueError(f"ids has {id_arr.shape[0]} entries, X has {n} rows")
    if side is None:
        return id_arr, None
    sd = np.asarray(side).reshape(-1)
    if sd.shape[0] != n:
        raise ValueError(f"side has {sd.shape[0]} entries, X has {n} rows")
    if sd.size and not np.isin(sd, (0, 1)).all():
        raise ValueError(f"side must be 0 (left) or 1 (right), got values {unique(sd)[:5].tolist()}")
    return id_arr, sd.astype(np.int8)


@dataclass(frozen=True)
class WorksetJoinResult:
    """Pairs and per-workset counters of ``join_worksets``.

    left_id/right_id/distance: result pairs (distance NaN for inner x inner
    pairs unless exact_distances). partition/workset_id: the worksets seen,
    with their row counts by role and computations, shortcut pairs and result
    pairs. shortcut_violations: inner x inner pairs whose exact distance fails
    the predicate (always 0; only checked with exact_distances).
    """

    left_id: IntArray
    right_id: IntArray
    distance: FloatArray
    partition: IntArray
    workset_id: IntArray
    n_inner: IntArray
    n_outlier: IntArray
    n_outer: IntArray
    computations: IntArray
    shortcut_pairs: IntArray
    result_pairs: IntArray
    shortcut_violations: int

    @property
    def load(self) -> FloatArray:
        """Paper load formula per workset (``load.workset_load``)."""
        return workset_load(self.n_inner, self.n_outlier, self.n_outer)


def join_worksets(
    X: npt.ArrayLike,
    ids: npt.ArrayLike,
    role: npt.ArrayLike,
    partition: npt.ArrayLike,
    workset_id: npt.ArrayLike,
    metric: str,
    t: float,
    inclusive: bool = False,
    *,
    side: npt.ArrayLike | None = None,
    exact_distances: bool = False,
) -> WorksetJoinResult:
    """Section 7.7 join of the worksets in the given rows (one row per (record, workset)).

    X: (m, d) vector of each row; ids, role, partition, workset_id (and side for
    a two-stream join): per row. Needs nothing but these rows.
    """
    t = check_threshold(metric, t)
    Xv = check_vectors(X, metric)
    m = Xv.shape[0]
    id_arr, sd = check_ids_side(m, ids, side)
    rl = np.asarray(role, dtype=np.int8).reshape(-1)
    if rl.shape[0] != m or (m and (rl.min() < INNER or rl.max() > OUTER)):
        raise ValueError("role must hold one of INNER=0, OUTLIER=1, OUTER=2 per row")
    key = workset_key(np.asarray(partition).reshape(-1), np.asarray(workset_id).reshape(-1))
    if key.shape[0] != m:
        raise ValueError(f"partition/workset_id have {key.shape[0]} entries, X has {m} rows")
    self_join = sd is None
    sd_arr = np.zeros(m, dtype=np.int8) if sd is None else sd
    order = np.lexsort((sd_arr, rl, key))
    ks = key[order]
    starts = np.concatenate([[0], np.flatnonzero(np.diff(ks)) + 1]) if m else np.zeros(0, np.int64)
    seg = np.concatenate([starts, [m]]).astype(np.int64)
    Xs = np.ascontiguousarray(Xv[order])
    nrm = row_norms(Xs) if metric != "euclidean" else np.zeros(m)
    L, R, D, comps, short, res, viol = _join_segments(
        METRIC_CODES[metric],
        Xs,
        nrm,
        id_arr[order],
        sd_arr[order],
        rl[order],
        seg,
        _ROLE_PAIRS,
        t,
        bool(inclusive),
        self_join,
        bool(exact_distances),
        _cos_floor(metric, t),
    )
    seg_of_row = np.repeat(np.arange(starts.shape[0]), np.diff(seg))
    counts = np.zeros((starts.shape[0], 3), dtype=np.int64)
    np.add.at(counts, (seg_of_row, rl[order].astype(np.int64)), 1)
    wkey = ks[starts]
    return WorksetJoinResult(
        left_id=L,
        right_id=R,
        distance=D,
        partition=wkey >> 40,
        workset_id=wkey & ((1 << 40) - 1),
        n_inner=counts[:, INNER],
        n_outlier=counts[:, OUTLIER],
        n_outer=counts[:, OUTER],
        computations=comps,
        shortcut_pairs=short,
        result_pairs=res,
        shortcut_violations=int(viol),
    )


@dataclass(frozen=True)
class CrossJoinResult:
    """Pairs of ``cross_join`` (distance NaN for inner x inner pairs unless exact_distances),
    the distance computations made and the pairs emitted without one (inner x inner)."""

    left_id: IntArray
    right_id: IntArray
    distance: FloatArray
    computations: int
    shortcut_pairs: int


def cross_join(
    X_new: npt.ArrayLike,
    id_new: npt.ArrayLike,
    role_new: npt.ArrayLike,
    key_new: npt.ArrayLike,
    X_old: npt.ArrayLike,
    id_old: npt.ArrayLike,
    role_old: npt.ArrayLike,
    key_old: npt.ArrayLike,
    metric: str,
    t: float,
    inclusive: bool = False,
    *,
    side_new: npt.ArrayLike | None = None,
    side_old: npt.ArrayLike | None = None,
    exact_distances: bool = False,
) -> CrossJoinResult:
    """New members x the window's earlier members of the same workset (Section 7.7 role rules).

    A window that spans micro-batches keeps its members in a join state; the members of a
    later micro-batch (``*_new``) meet the state's members (``*_old``) of the same workset
    (``key_*`` from ``workset_key``). Every role combination but outer x outer meets, in
    both directions (new inner x old outer as well as new outer x old inner); inner x inner
    is emitted without a computation. Pairs among the new members are ``join_worksets``'
    job, pairs among the old ones were reported by an earlier micro-batch.

    side_new / side_old: None for a self-join (each pair as (smaller id, larger id)), else
    0 (left) / 1 (right) per row: only left x right meets, reported as (left id, right id).
    Distances come from the core's one kernel (``pairwise``), so they are bit for bit those
    of the brute force.
    """
    if (side_new is None) != (side_old is None):
        raise ValueError("side_new and side_old must both be given (two streams) or both be None (self-join)")
    self_join = side_new is None
    Xn = np.asarray(X_new, dtype=np.float64)
    Xo = np.asarray(X_old, dtype=np.float64)
    idn = np.asarray(id_new, dtype=np.int64).reshape(-1)
    ido = np.asarray(id_old, dtype=np.int64).reshape(-1)
    rn = np.asarray(role_new).reshape(-1)
    ro = np.asarray(role_old).reshape(-1)
    kn = np.asarray(key_new, dtype=np.int64).reshape(-1)
    ko = np.asarray(key_old, dtype=np.int64).reshape(-1)
    sn = np.zeros(idn.shape[0], np.int8) if side_new is None else np.asarray(side_new).reshape(-1)
    so = np.zeros(ido.shape[0], np.int8) if side_old is None else np.asarray(side_old).reshape(-1)
    for name, arr, n in (("id_new", idn, Xn.shape[0]), ("role_new", rn, Xn.shape[0]), ("key_new", kn, Xn.shape[0]),
                         ("side_new", sn, Xn.shape[0]), ("id_old", ido, Xo.shape[0]),
                         ("role_old", ro, Xo.shape[0]), ("key_old", ko, Xo.shape[0]),
                         ("side_old", so, Xo.shape[0])):
        if arr.shape[0] != n:
            raise ValueError(f"{name} has {arr.shape[0]} entries, expected {n} (one per row)")
    if Xn.shape[0] == 0 or Xo.shape[0] == 0:
        z = np.zeros(0, np.int64)
        return CrossJoinResult(z, z.copy(), np.zeros(0), 0, 0)
    t = check_threshold(metric, t)
    on = np.lexsort((sn, rn, kn))
    oo = np.lexsort((so, ro, ko))
    nn = Xn.shape[0]
    # one row array: the new rows, then the old ones, each sorted by (workset, role, side)
    X = np.ascontiguousarray(np.concatenate([Xn.reshape(nn, -1)[on], Xo.reshape(Xo.shape[0], -1)[oo]]))
    nrm = row_norms(X) if metric != "euclidean" else np.zeros(X.shape[0])
    ids = np.concatenate([idn[on], ido[oo]])
    L, R, D, comps, short = _cross_segments(
        METRIC_CODES[metric], X, nrm, ids, kn[on], rn[on].astype(np.int8), sn[on].astype(np.int8), ko[oo],
        ro[oo].astype(np.int8), so[oo].astype(np.int8), t, bool(inclusive), self_join, bool(exact_distances),
        _cos_floor(metric, t))
    return CrossJoinResult(L, R, D, int(comps), int(short))


@njit(cache=True, nogil=True)
def _bounds(k: IntArray, r: npt.NDArray[np.int8], s: npt.NDArray[np.int8], i: int, i1: int, off: int,
            bnd: IntArray) -> None:
    """``bnd[role, side] = (start, end)`` of rows [i, i1) (one workset, sorted by role, side), offset by ``off``."""
    for rr in range(3):
        for sd in range(2):
            st = i
            while i < i1 and r[i] == rr and s[i] == sd:
                i += 1
            bnd[rr, sd, 0] = st + off
            bnd[rr, sd, 1] = i + off


@njit(cache=True, nogil=True)
def _cross_segments(code: int, X: FloatArray, nrm: FloatArray, ids: IntArray, kn: IntArray,
                    rn: npt.NDArray[np.int8], sn: npt.NDArray[np.int8], ko: IntArray, ro: npt.NDArray[np.int8],
                    so: npt.NDArray[np.int8], t: float, inclusive: bool, self_join: bool, exact: bool,
                    c_low: float) -> tuple[IntArray, IntArray, FloatArray, int, int]:
    """``cross_join``'s blocks, merged over the worksets both sides hold, each joined by ``_block``:
    every role pair but outer x outer, left x right (two streams: new left x old right and old left
    x new right), inner x inner without a computation. X holds the new rows then the old ones."""
    nn, no = kn.shape[0], ko.shape[0]
    bn = np.zeros((3, 2, 2), dtype=np.int64)
    bo = np.zeros((3, 2, 2), dtype=np.int64)
    L = np.empty(1024, dtype=np.int64)
    R = np.empty(1024, dtype=np.int64)
    D = np.empty(1024, dtype=np.float64)
    n_out = 0
    comps = 0
    short = 0
    i = 0
    j = 0
    while i < nn and j < no:
        if kn[i] < ko[j]:
            i += 1
            continue
        if ko[j] < kn[i]:
            j += 1
            continue
        key = kn[i]
        i1 = i
        while i1 < nn and kn[i1] == key:
            i1 += 1
        j1 = j
        while j1 < no and ko[j1] == key:
            j1 += 1
        _bounds(kn, rn, sn, i, i1, 0, bn)
        _bounds(ko, ro, so, j, j1, nn, bo)
        for ra in range(3):
            for rb in range(3):
                if ra == OUTER and rb == OUTER:
                    continue
                compute = not (ra == INNER and rb == INNER)
                for h in range(1 if self_join else 2):
                    if self_join:
                        a0, a1, b0, b1 = bn[ra, 0, 0], bn[ra, 0, 1], bo[rb, 0, 0], bo[rb, 0, 1]
                    elif h == 0:  # new left x old right
                        a0, a1, b0, b1 = bn[ra, 0, 0], bn[ra, 0, 1], bo[rb, 1, 0], bo[rb, 1, 1]
                    else:  # old left x new right
                        a0, a1, b0, b1 = bo[rb, 0, 0], bo[rb, 0, 1], bn[ra, 1, 0], bn[ra, 1, 1]
                    if a1 <= a0 or b1 <= b0:
                        continue
                    L, R, D, n_out, c, p, _v = _block(code, X, nrm, ids, a0, a1, b0, b1, False, compute, t, inclusive,
                                                     self_join, exact, L, R, D, n_out, c_low)
                    comps += c
                    if not compute:
                        short += p
        i = i1
        j = j1
    return L[:n_out], R[:n_out], D[:n_out], comps, short


@dataclass(frozen=True)
class WorkerWindowJoin:
    """One worker's join of one window (``join_worker_window``).

    left_id/right_id/distance: the new result pairs (new x new, then new x state).
    n_*: new rows by role; state_*: join-state rows (earlier micro-batches) of the worksets
    that have new rows; worksets: worksets with new rows; computations / shortcut_pairs:
    distance computations and pairs emitted without one; load: Definition 5 summed over the
    worksets with new rows. workset_*: per workset with new rows (the part of a split workset
    folded back, ``split_key``): partition, id, rows (new + state) and Definition 5 load -
    the rebalance stage's load statistics.
    """

    left_id: IntArray
    right_id: IntArray
    distance: FloatArray
    n_inner: int
    n_outlier: int
    n_outer: int
    state_inner: int
    state_outlier: int
    state_outer: int
    worksets: int
    computations: int
    shortcut_pairs: int
    load: float
    workset_partition: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    workset_id: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    workset_rows: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    workset_load: FloatArray = field(default_factory=lambda: np.zeros(0))

    @property
    def result_pairs(self) -> int:
        return int(self.left_id.shape[0])

    @property
    def rows(self) -> int:
        return self.n_inner + self.n_outlier + self.n_outer


def join_worker_window(
    X: npt.ArrayLike,
    ids: npt.ArrayLike,
    role: npt.ArrayLike,
    partition: npt.ArrayLike,
    workset_id: npt.ArrayLike,
    is_new: npt.ArrayLike,
    metric: str,
    t: float,
    inclusive: bool = False,
    *,
    side: npt.ArrayLike | None = None,
    exact_distances: bool = False,
) -> WorkerWindowJoin:
    """Section 7.7 join of one worker's rows of one window (one row per (record, workset)).

    is_new False marks the window's members from earlier micro-batches (the join state):
    they only meet new rows (``cross_join``); new rows meet each other (``join_worksets``).
    Every matching pair of the window meets in exactly one workset in exactly one
    micro-batch. With every row new (one window joined in one go, ``s3j_join_window``) this
    is ``join_worksets`` plus the worker's counters. side: None for a self-join, else 0/1
    per row. Raises ``AssertionError`` if an inner x inner shortcut pair fails verification
    (only checked with exact_distances).
    """
    Xv = np.asarray(X, dtype=np.float64)
    id_arr = np.asarray(ids, dtype=np.int64).reshape(-1)
    rl = np.asarray(role).reshape(-1)
    part = np.asarray(partition, dtype=np.int64).reshape(-1)
    ws = np.asarray(workset_id, dtype=np.int64).reshape(-1)
    isn = np.asarray(is_new, dtype=bool).reshape(-1)
    sd = None if side is None else np.asarray(side).reshape(-1)
    m = Xv.shape[0]
    for name, arr in (("ids", id_arr), ("role", rl), ("partition", part), ("workset_id", ws), ("is_new", isn)):
        if arr.shape[0] != m:
            raise ValueError(f"{name} has {arr.shape[0]} entries, X has {m} rows")
    key = workset_key(part, ws)
    n, o = np.flatnonzero(isn), np.flatnonzero(~isn)
    jr = join_worksets(
        Xv[n],
        id_arr[n],
        rl[n],
        part[n],
        ws[n],
        metric,
        t,
        inclusive,
        side=None if sd is None else sd[n],
        exact_distances=exact_distances,
    )
    if jr.shortcut_violations:
        raise AssertionError(f"{jr.shortcut_violations} inner x inner pairs failed verification")
    cr = cross_join(
        Xv[n],
        id_arr[n],
        rl[n],
        key[n],
        Xv[o],
        id_arr[o],
        rl[o],
        key[o],
        metric,
        t,
        inclusive,
        side_new=None if sd is None else sd[n],
        side_old=None if sd is None else sd[o],
        exact_distances=exact_distances,
    )
    if cr.left_id.size:
        L = np.concatenate([jr.left_id, cr.left_id])
        R = np.concatenate([jr.right_id, cr.right_id])
        D = np.concatenate([jr.distance, cr.distance])
    else:  # no earlier rows met: the new pairs as they are (no copy of millions of pairs)
        L, R, D = jr.left_id, jr.right_id, jr.distance
    # Load (Definition 5) per workset: new counts this micro-batch, state counts before it.
    jkey = workset_key(jr.partition, jr.workset_id)
    uk, inv = np.unique(key, return_inverse=True)
    cnt_new = np.zeros((uk.size, 3), np.int64)
    cnt_old = np.zeros((uk.size, 3), np.int64)
    np.add.at(cnt_new, (inv[n], rl[n].astype(np.int64)), 1)
    np.add.at(cnt_old, (inv[o], rl[o].astype(np.int64)), 1)
    has_new = np.isin(uk, jkey)
    load = workset_load(
        cnt_new[:, INNER],
        cnt_new[:, OUTLIER],
        cnt_new[:, OUTER],
        cnt_old[:, INNER],
        cnt_old[:, OUTLIER],
        cnt_old[:, OUTER],
    )[has_new]
    wk_part = (uk[has_new] >> 40).astype(np.int64)
    wk_id = (uk[has_new] & ((1 << 40) - 1)) % (1 << PART_SHIFT)
    wk_rows = (cnt_new.sum(1) + cnt_old.sum(1))[has_new]
    return WorkerWindowJoin(
        left_id=L,
        right_id=R,
        distance=D,
        n_inner=int(cnt_new[:, INNER].sum()),
        n_outlier=int(cnt_new[:, OUTLIER].sum()),
        n_outer=int(cnt_new[:, OUTER].sum()),
        state_inner=int(cnt_old[has_new, INNER].sum()),
        state_outlier=int(cnt_old[has_new, OUTLIER].sum()),
        state_outer=int(cnt_old[has_new, OUTER].sum()),
        worksets=int(has_new.sum()),
        computations=int(jr.computations.sum()) + cr.computations,
        shortcut_pairs=int(jr.shortcut_pairs.sum()) + cr.shortcut_pairs,
        load=float(load.sum()),
        workset_partition=wk_part,
        workset_id=wk_id.astype(np.int64),
        workset_rows=wk_rows.astype(np.int64),
        workset_load=np.asarray(load, dtype=np.float64),
    )


# A split workset's part k joins under the key workset_id + k * 2**PART_SHIFT (ids < 2**32).
PART_SHIFT = 32


def split_key(workset_id: npt.ArrayLike, part: npt.ArrayLike) -> IntArray:
    """The join key of part ``part`` of a workset: ``workset_id + part << 32`` (distinct per part)."""
    g = np.asarray(workset_id, dtype=np.int64)
    k = np.asarray(part, dtype=np.int64)
    if g.size and (g.min() < 0 or g.max() >= 1 << PART_SHIFT):
        raise ValueError(f"workset ids must be in [0, 2**32) to split, got {int(g.min())}..{int(g.max())}")
    if k.size and (k.min() < 0 or k.max() >= 1 << 8):
        raise ValueError(f"parts must be in [0, 256), got {int(k.min())}..{int(k.max())}")
    return np.asarray(g + (k << PART_SHIFT), dtype=np.int64)


def member_part(side: npt.ArrayLike, ids: npt.ArrayLike, parts: npt.ArrayLike) -> IntArray:
    """The part of a split workset a new member belongs to: a hash of (side, id) mod parts."""
    s = np.asarray(side, dtype=np.int64).reshape(-1).astype(np.uint64)
    i = np.asarray(ids, dtype=np.int64).reshape(-1).view(np.uint64)
    k = np.maximum(np.asarray(parts, dtype=np.int64).reshape(-1), 1).astype(np.uint64)
    with np.errstate(over="ignore"):
        h = splitmix64(i * np.uint64(2) + s)
    return (h % k).astype(np.int64)


def split_rows(role: npt.ArrayLike, is_new: npt.ArrayLike, side: npt.ArrayLike, ids: npt.ArrayLike,
               parts: npt.ArrayLike) -> tuple[IntArray, IntArray, npt.NDArray[np.bool_]]:
    """Replicate the rows of split worksets so that every pair still meets exactly once.

    One row per (record, workset) of one micro-batch; parts: the workset's number of parts
    (1: not split). Returns (row, part, is_new) of the replicated rows. For a workset in k
    parts, with new members N_0..N_{k-1} (``member_part``), new outer rows O and state rows S:
    part 0 holds N_0 and O as new rows and S as earlier rows (which meet only new rows); part
    i > 0 holds N_i as new rows and, as earlier rows, S, O, N_0 and the new members of the
    parts j > 0 "after" i on a round-robin over parts 1..k-1 ((j - i) mod (k-1) in
    1..floor((k-2)/2), plus, for even k-1, the opposite part when i - 1 < (k-1)/2). So
    N_i x N_j meets in exactly one part, N_i x N_i, N_i x S and N_i x O in part i, O x S in
    part 0 only, and O x O never (outer rows probe members only, Section 7.7): exact, each
    pair once. Part 0 holds no other part's members, or they would meet O twice. The
    members' comparisons are spread over the parts; the state is replicated to each.
    """
    rl = np.asarray(role).reshape(-1)
    isn = np.asarray(is_new, dtype=bool).reshape(-1)
    k = np.maximum(np.asarray(parts, dtype=np.int64).reshape(-1), 1)
    n = rl.shape[0]
    row = np.repeat(np.arange(n, dtype=np.int64), k)
    start = np.repeat(np.cumsum(k) - k, k)
    part = np.arange(row.shape[0], dtype=np.int64) - start
    member = isn & (rl != OUTER)
    home = np.zeros(n, np.int64)
    home[member] = member_part(np.asarray(side).reshape(-1)[member], np.asarray(ids).reshape(-1)[member], k[member])
    kr, hr = k[row], home[row]
    m = kr - 1  # the round-robin over parts 1..k-1
    dist = (hr - part) % np.maximum(m, 1)
    after = ((dist >= 1) & (dist <= (m - 1) // 2)) | ((m % 2 == 0) & (dist == m // 2) & (part - 1 < m // 2))
    held = np.where(hr == 0, part >= 1, (part >= 1) & (hr >= 1) & after)
    keep = ~member[row] | (part == hr) | held
    row, part = row[keep], part[keep]
    new = isn[row] & (part == home[row])
    return row, part, new


class CopyInfo(NamedTuple):
    """Where every record went: space partition copies and workset rows."""

    space: SpacePartitioning
    rows: WorksetRows


class S3JWindowResult(NamedTuple):
    left_id: IntArray
    right_id: IntArray
    distance: FloatArray
    stats: WindowStats
    centroid_state: CentroidState
    copies: CopyInfo


def _sort_pairs(L: IntArray, R: IntArray, D: FloatArray) -> tuple[IntArray, IntArray, FloatArray]:
    o = np.lexsort((R, L))
    return L[o], R[o], D[o]


def s3j_join_window(
    X: npt.ArrayLike,
    ids: npt.ArrayLike,
    side: npt.ArrayLike | None,
    metric: str,
    t: float,
    inclusive: bool = False,
    n_workers: int = 5,
    seed: int = 42,
    centroid_state: CentroidState | None = None,
    exact_distances: bool = False,
    *,
    space_centroids: npt.ArrayLike | None = None,
) -> S3JWindowResult:
    """S3J over one window: space partitioning -> workset formulation -> per-worker join.

    X (n, d) in arrival order; ids (n,) unique per side; side None for a
    self-join, else 0 (left) / 1 (right) per record. centroid_state: the
    worksets of earlier windows (same metric, t, n_workers, seed, d), or None.
    space_centroids overrides the seeded random space-partition centroids
    (n_workers rows).
    """
    t = check_threshold(metric, t)
    Xv = check_vectors(X, metric)
    n, d = Xv.shape
    id_arr, sd = check_ids_side(n, ids, side)
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    if space_centroids is None:
        C = random_centroids(n_workers, d, seed)
    else:
        C = check_vectors(space_centroids, metric, name="space_centroids")
        if C.shape != (n_workers, d):
            raise ValueError(f"space_centroids must have shape ({n_workers}, {d}), got {C.shape}")
    if centroid_state is not None and len(centroid_state):
        wmax = int(centroid_state.worker.max())
        if centroid_state.worker.min() < 0 or wmax >= n_workers:
            raise ValueError(f"centroid_state assigns worksets to worker {wmax}, n_workers is {n_workers}")
    space = space_partition(Xv, C, metric, t, inclusive)
    form = formulate_worksets(Xv, space, metric, t, inclusive, state=centroid_state)
    rows = form.rows

    Ls, Rs, Ds = [], [], []
    P = n_workers
    w_comp = np.zeros(P, np.int64)
    w_short = np.zeros(P, np.int64)
    w_res = np.zeros(P, np.int64)
    w_ws = np.zeros(P, np.int64)
    w_load = np.zeros(P, np.float64)
    w_role = np.zeros((P, 3), np.int64)
    for w in range(P):
        rw = rows.for_worker(w)
        if len(rw) == 0:
            continue
        # The Spark join task's body, with every row new (a window joined in one go).
        jw = join_worker_window(
            Xv[rw.record],
            id_arr[rw.record],
            rw.role,
            rw.partition,
            rw.workset_id,
            np.ones(len(rw), dtype=bool),
            metric,
            t,
            inclusive,
            side=None if sd is None else sd[rw.record],
            exact_distances=exact_distances,
        )
        Ls.append(jw.left_id)
        Rs.append(jw.right_id)
        Ds.append(jw.distance)
        w_comp[w] = jw.computations
        w_short[w] = jw.shortcut_pairs
        w_res[w] = jw.result_pairs
        w_ws[w] = jw.worksets
        w_load[w] = jw.load
        w_role[w] = (jw.n_inner, jw.n_outlier, jw.n_outer)
    z = np.zeros(0, np.int64)
    L = np.concatenate(Ls) if Ls else z
    R = np.concatenate(Rs) if Rs else z.copy()
    D = np.concatenate(Ds) if Ds else np.zeros(0)
    L, R, D = _sort_pairs(L, R, D)
    n_in, n_out_l, n_outer = rows.role_counts()
    stats = WindowStats(
        algorithm="s3j",
        n_records=n,
        n_workers=P,
        space_copies=int(space.record.shape[0]),
        n_inner=n_in,
        n_outlier=n_out_l,
        n_outer=n_outer,
        n_worksets=int(w_ws.sum()),
        n_new_worksets=form.n_new_worksets,
        distance_computations=int(w_comp.sum()),
        shortcut_pairs=int(w_short.sum()),
        result_pairs=int(L.shape[0]),
        centroid_distance_computations=space.centroid_distance_computations
        + form.centroid_distance_computations,
        worker_rows=w_role.sum(axis=1),
        worker_inner=w_role[:, INNER].copy(),
        worker_outlier=w_role[:, OUTLIER].copy(),
        worker_outer=w_role[:, OUTER].copy(),
        worker_worksets=w_ws,
        worker_computations=w_comp,
        worker_shortcut_pairs=w_short,
        worker_result_pairs=w_res,
        worker_load=w_load,
    )
    return S3JWindowResult(L, R, D, stats, form.state, CopyInfo(space, rows))


class MultiWindowResult(NamedTuple):
    window: IntArray
    left_id: IntArray
    right_id: IntArray
    distance: FloatArray
    stats: list[WindowStats]
    centroid_state: CentroidState


def s3j_join_windows(
    X: npt.ArrayLike,
    ids: npt.ArrayLike,
    window: npt.ArrayLike,
    side: npt.ArrayLike | None,
    metric: str,
    t: float,
    inclusive: bool = False,
    n_workers: int = 5,
    seed: int = 42,
    centroid_state: CentroidState | None = None,
    exact_distances: bool = False,
) -> MultiWindowResult:
    """Join each window separately (ascending window label), carrying the workset centroids.

    window: per-record window label (e.g. ts // size for tumbling windows);
    inside a window records keep their input (arrival) order.
    """
    Xv = check_vectors(X, metric)
    n = Xv.shape[0]
    id_arr, sd = check_ids_side(n, ids, side)
    win = np.asarray(window, dtype=np.int64).reshape(-1)
    if win.shape[0] != n:
        raise ValueError(f"window has {win.shape[0]} entries, X has {n} rows")
    order = np.argsort(win, kind="stable")
    labels, starts = np.unique(win[order], return_index=True)
    bounds = np.append(starts, n)
    state = centroid_state
    Ws, Ls, Rs, Ds, stats = [], [], [], [], []
    for k, lab in enumerate(labels):
        sel = order[bounds[k] : bounds[k + 1]]
        r = s3j_join_window(
            Xv[sel],
            id_arr[sel],
            None if sd is None else sd[sel],
            metric,
            t,
            inclusive,
            n_workers,
            seed,
            state,
            exact_distances,
        )
        state = r.centroid_state
        Ws.append(np.full(r.left_id.shape[0], lab, dtype=np.int64))
        Ls.append(r.left_id)
        Rs.append(r.right_id)
        Ds.append(r.distance)
        stats.append(r.stats)
    if state is None:
        state = CentroidState.empty(Xv.shape[1])
    z = np.zeros(0, np.int64)
    return MultiWindowResult(
        np.concatenate(Ws) if Ws else z,
        np.concatenate(Ls) if Ls else z.copy(),
        np.concatenate(Rs) if Rs else z.copy(),
        np.concatenate(Ds) if Ds else np.zeros(0),
        stats,
        state,
    )
