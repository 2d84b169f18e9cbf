"""Workset formulation of S3J (Section 7, steps 1-5) inside each space partition.

Siachamis et al., DEBS'23, Section 7:

* Step 1 (7.1): records of the worker's space partition are *inner* (home here)
  or *physical outer* (an outer copy from another partition); only inner
  records join inner sets / outlier sets or open worksets.
* Step 2 (7.2, Definition 8): an inner record within t/2 of the nearest workset
  centroid joins that workset's inner set (``INNER``).
* Step 3 (7.3, Criterion 2): an inner record farther than t from every centroid
  becomes the centroid of a new workset; ids are 1, 2, ... in creation order
  per partition (continuing after the ids already in the centroid state).
* Step 4 (7.4, Definition 9): otherwise it is an outlier (``OUTLIER``) of the
  workset with the nearest centroid.
* Step 5 (7.5, Definition 10): outer sets (``OUTER``), at most 2t from the
  centroid. Routing rule: an inner record goes to the outer set of every other
  workset within 2t whose id is *smaller* than its home workset's id; a physical
  outer record goes to the outer set of every workset within 2t, and is
  buffered so that worksets created later still receive it.

Two passes, same result as the paper's record-at-a-time operator. Inside one
window all records are known, so:

* pass 1 (numba, sequential, arrival order): replay steps 2-4 for the inner
  records only - nearest centroid among the centroids existing *at arrival*,
  open a new workset by Criterion 2 - which fixes each inner record's home
  workset and role exactly as the streaming operator would;
* pass 2 (numba): outer sets against the final centroids.
  For an inner record only worksets with an id smaller than its home's qualify;
  they were all created before its home, hence before the record arrived, so
  the streaming operator saw exactly the same ones. A physical outer record is
  compared with every final workset, which is what buffering achieves.

Centroid index. Both passes are range searches around the record: pass 1 only
needs the centroids within the Criterion 2 radius (nominally t; if none is, the
record opens a workset whatever the nearest one is), pass 2 those within the
outer-set radius of their workset. Instead of every centroid, a record is compared
with the candidates of a pivot table (LAESA, Mico, Oncina & Vidal 1994): pivots
p = e1, e2 (unit basis vectors; e1 only for d = 1), the distance of every record
and centroid to each pivot (computed once, when first needed; a new workset's
centroid is a record, so it shares the record's), and the centroids sorted by
their distance to e1 (kept sorted by insertion as pass 1 opens worksets). By the
triangle inequality a centroid c is within r of x only if |d(x, p) - d(c, p)| <= r
for every pivot, so a binary search over the e1 distances and a test of the
other pivots (no distance computed) leave the candidates, whose true distance is
then computed. The bound is widened by the rounding slack of the computed
distances (``PartitionBounds`` error model: 8 (rel (|d(x, p)| + r) + abs)), so no
centroid whose computed distance passes is ever dropped: homes (nearest computed
distance, ties to the lowest index), home distances and outer rows (same order)
are bit-identical to a scan over every centroid. Searches against a handful of
centroids (<= 2 x pivots), radii spanning the e1 range, and inputs with a norm
outside [1e-100, 1e100] (euclidean: above 1e100; the error model assumes no
over/underflow) scan instead.
``centroid_distance_computations`` counts the distances evaluated: pivot
distances plus candidates. Earlier rows of a piecewise window (below) are still
compared with every target workset.

Outer sets cut to the members' reach (default ``prune_outer=True``): Definition
10 bounds outer sets by 2t because a member may lie up to t from its centroid.
Inside one window all members are known, so workset W's outer set is cut to
t + m_W (m_W = its members' largest home distance, with rounding slack; see
``PartitionBounds.outer_radius_for``) and worksets without members in the
window - centroids persist across windows - take no outer copies. Outer rows
only probe members (Section 7.7), so every pair that the 2t sets find is still
found: results are unchanged, while the duplication ratio (average copies of a
record at the join, Section 9.1) and the distance computations (outer x member
comparisons that cannot match) drop. A window formulated
piecewise (Spark micro-batches) uses ``prune_outer=False``.

``formulate_partition_window`` is the one step both drivers share: one space
partition, one window - formulate (above), give each new workset its worker
(Section 7.5: the worker owning the partition, ``partition % n_workers``), look up
every member's worker, and route buffered physical outer copies (seen in earlier
micro-batches) to the worksets it opened. ``formulate_worksets`` runs it per
partition for a whole window (the single-process driver, pruned outer sets);
``microbatch.formulate_partition_microbatch`` runs it per window for one partition
of a micro-batch (the Spark task, full 2t outer sets).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numba import njit

from ..inequality.kernels import lower_bound, upper_bound
from .distance import (
    DEFAULT_BLOCK_ELEMENTS,
    METRIC_CODES,
    PartitionBounds,
    _dist,
    check_threshold,
    check_vectors,
    paired,
    partition_bounds,
    row_norms,
)
from .partitioning import SpacePartitioning

__all__ = [
    "INNER",
    "OUTER",
    "OUTLIER",
    "ROLE_NAMES",
    "CentroidState",
    "EarlierRows",
    "PartitionWorksets",
    "WindowWorksets",
    "WorksetFormulation",
    "WorksetRows",
    "formulate_partition_window",
    "formulate_partition_worksets",
    "formulate_worksets",
    "workset_key",
]

# Roles of a record inside a workset (Definition 7): inner set, outliers' set, outer set.
INNER, OUTLIER, OUTER = 0, 1, 2
ROLE_NAMES: tuple[str, ...] = ("inner", "outlier", "outer")

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

_ID_BITS = 40


def workset_key(partition: npt.ArrayLike, workset_id: npt.ArrayLike) -> IntArray:
    """One int64 per workset: ``partition << 40 | workset_id`` (ids < 2**40, partitions < 2**22)."""
    p = np.asarray(partition, dtype=np.int64)
    w = np.asarray(workset_id, dtype=np.int64)
    if p.size and (p.min() < 0 or p.max() >= 1 << 22):
        raise ValueError(f"partition out of range [0, 2**22): {int(p.min())}..{int(p.max())}")
    if w.size and (w.min() < 0 or w.max() >= 1 << _ID_BITS):
        raise ValueError(f"workset_id out of range [0, 2**40): {int(w.min())}..{int(w.max())}")
    return np.asarray((p << _ID_BITS) | w, dtype=np.int64)


@dataclass(frozen=True)
class CentroidState:
    """Workset centroids that survive window ends, as arrays (one Delta row per workset).

    Sorted by (partition, workset_id); (partition, workset_id) is unique.
    """

    partition: IntArray
    workset_id: IntArray
    centroid: FloatArray
    worker: IntArray

    @classmethod
    def empty(cls, dim: int) -> CentroidState:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z.copy(), np.zeros((0, int(dim))), z.copy())

    @classmethod
    def from_arrays(
        cls,
        partition: npt.ArrayLike,
        workset_id: npt.ArrayLike,
        centroid: npt.ArrayLike,
        worker: npt.ArrayLike | None = None,
    ) -> CentroidState:
        """Build (and validate) a state from arrays, e.g. read back from a Delta table.

        ``worker`` defaults to the partition (a workset runs where it was created).
        """
        p = np.asarray(partition, dtype=np.int64).reshape(-1)
        w = np.asarray(workset_id, dtype=np.int64).reshape(-1)
        c = np.ascontiguousarray(np.asarray(centroid, dtype=np.float64))
        if c.ndim != 2 or c.shape[0] != p.shape[0] or w.shape[0] != p.shape[0]:
            raise ValueError(
                f"centroid state arrays disagree: partition {p.shape}, workset_id {w.shape}, "
                f"centroid {c.shape} (need (K,), (K,), (K, d))"
            )
        wk = p.copy() if worker is None else np.asarray(worker, dtype=np.int64).reshape(-1)
        if wk.shape[0] != p.shape[0]:
            raise ValueError(f"worker has shape {wk.shape}, expected ({p.shape[0]},)")
        if w.size and w.min() < 1:
            raise ValueError(f"workset ids start at 1, got {int(w.min())}")
        keys = workset_key(p, w)
        order = np.argsort(keys, kind="stable")
        if keys.size and np.any(np.diff(keys[order]) == 0):
            raise ValueError("centroid state has duplicate (partition, workset_id) entries")
        return cls(p[order], w[order], c[order], wk[order])

    def __len__(self) -> int:
        return int(self.partition.shape[0])

    @property
    def dim(self) -> int:
        return int(self.centroid.shape[1])

    def keys(self) -> IntArray:
        return workset_key(self.partition, self.workset_id)

    def for_partition(self, p: int) -> tuple[IntArray, FloatArray]:
        """(workset_id ascending, centroid) of partition ``p``."""
        m = self.partition == p
        return self.workset_id[m], self.centroid[m]

    def lookup_worker(self, partition: npt.ArrayLike, workset_id: npt.ArrayLike) -> IntArray:
        """Worker of each (partition, workset_id); ``KeyError`` if one is unknown."""
        keys = self.keys()
        q = workset_key(partition, workset_id)
        pos = np.searchsorted(keys, q)
        pos_c = np.minimum(pos, max(0, keys.shape[0] - 1))
        ok = (pos < keys.shape[0]) & (keys[pos_c] == q) if keys.size else np.zeros(q.shape, bool)
        if not np.all(ok):
            bad = int(np.flatnonzero(~ok)[0])
            qp = np.asarray(partition).reshape(-1)[bad]
            qw = np.asarray(workset_id).reshape(-1)[bad]
            raise KeyError(f"unknown workset (partition={qp}, workset_id={qw})")
        return self.worker[pos_c]

    def with_workers(self, worker: npt.ArrayLike) -> CentroidState:
        """Same centroids, new workset -> worker assignment (e.g. from ``load.balance_worksets``)."""
        wk = np.asarray(worker, dtype=np.int64).reshape(-1)
        if wk.shape[0] != len(self):
            raise ValueError(f"worker has {wk.shape[0]} entries, state has {len(self)} worksets")
        return CentroidState(self.partition, self.workset_id, self.centroid, wk)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {
            "partition": self.partition,
            "workset_id": self.workset_id,
            "centroid": self.centroid,
            "worker": self.worker,
        }


# ----------------------------------------------------------------------------- centroid index
# Pivot filtering (LAESA) for the record -> centroid searches; see the module docstring.

# The rounding model of ``PartitionBounds`` (no overflow, no underflow in the norms) holds for
# row norms in [_SAFE_NORM_MIN, _SAFE_NORM_MAX] (euclidean: any norm <= max). Outside, no index.
_SAFE_NORM_MIN = 1e-100
_SAFE_NORM_MAX = 1e100
_NO_INDEX = np.iinfo(np.int64).max


def _pivots(dim: int) -> FloatArray:
    """The fixed pivots: unit basis vectors e1, e2 (e1 only when dim == 1), norm exactly 1."""
    return np.eye(min(2, dim), dim)


def _scan_max(space: str, n_pivots: int, *norms: FloatArray) -> int:
    """Searches against at most this many centroids scan them all; larger ones use the index.

    An index query costs the pivot distances of the record (once) plus the candidates, so
    a handful of centroids is cheaper to scan. ``_NO_INDEX`` if a norm lies outside the
    range where the rounding model (hence the filter's slack) is proven.
    """
    for nv in norms:
        if nv.size and not (nv.max() <= _SAFE_NORM_MAX and (space == "euclidean" or nv.min() >= _SAFE_NORM_MIN)):
            return int(_NO_INDEX)
    return 2 * n_pivots


@njit(cache=True, nogil=True)
def _slack(a: float, r: float, rel: float, ab: float) -> float:
    """Rounding slack of the pivot bound for a record at computed pivot distance ``a``, radius r.

    Exact distances a, b (to the pivot), delta (record - centroid), computed ^ with
    |x^ - x| <= rel x + ab: |a - b| <= delta, so computed d^(x, c) <= r implies
    |a^ - b^| <= r + rel (2 a^ + 2 r) + 5 ab (to first order in rel). We take 4x that,
    which also absorbs the rounding of a^ -+ (r + slack).
    """
    return 8.0 * (rel * (abs(a) + r) + ab)


@njit(cache=True, nogil=True)
def _pivot_row(code: int, X: FloatArray, i: int, norm: float, P: FloatArray, out: FloatArray) -> None:
    """out[i, q] = d(X[i], P[q]) (the pivots have norm 1)."""
    for q in range(P.shape[0]):
        out[i, q] = _dist(code, X, i, P, q, norm, 1.0)


@njit(cache=True, nogil=True)
def _pivots_ok(
    PX: FloatArray, i: int, PC: FloatArray, c: int, r: float, rel: float, ab: float, q0: int
) -> bool:
    """Pivot bound for pivots q0..m-1: False only if d^(X[i], C[c]) > r is certain."""
    for q in range(q0, PX.shape[1]):
        a = PX[i, q]
        if abs(a - PC[c, q]) > r + _slack(a, r, rel, ab):
            return False
    return True


@njit(cache=True, nogil=True)
def _key_range(skey: FloatArray, k: int, lo_v: float, hi_v: float) -> tuple[int, int]:
    """[lo, hi): the positions of skey[:k] (ascending) with lo_v <= key <= hi_v."""
    lo = lower_bound(skey, 0, k, lo_v)
    return lo, upper_bound(skey, lo, k, hi_v)


@njit(cache=True, nogil=True)
def _open_worksets(
    code: int,
    X: FloatArray,
    norms: FloatArray,
    C0: FloatArray,
    n0: FloatArray,
    new_radius: float,
    P: FloatArray,
    PX: FloatArray,
    have_x: npt.NDArray[np.bool_],
    PC0: FloatArray,
    have_c0: npt.NDArray[np.bool_],
    rel: float,
    ab: float,
    scan_max: int,
) -> tuple[IntArray, FloatArray, IntArray, int]:
    """Pass 1: steps 2-4 in arrival order. Returns (home, d_home, new_rows, computations).

    home indexes the centroid list ``C0`` followed by the records opened as new
    centroids, in order; d_home is the computed distance to it (0 for a centroid).
    Same result as scanning every centroid (the nearest by computed distance, ties to
    the lowest index; Criterion 2 if it is farther than new_radius): only centroids
    within new_radius can be a home, and the pivot index returns all of them.

    PX / have_x (pivot distances of the records) and PC0 / have_c0 (of C0) are filled
    in as computed; computations counts every distance evaluated (pivots included).
    """
    n, d = X.shape
    m = P.shape[0]
    k0 = C0.shape[0]
    # Centroids are far fewer than records in practice: grow the buffers by doubling.
    cap = k0 + min(n, 1024)
    C = np.empty((cap, d))
    Cn = np.empty(cap)
    PC = np.empty((cap, m))
    crow = np.empty(cap, dtype=np.int64)  # record of a new centroid, -1 for C0
    skey = np.empty(cap)  # index: pivot-1 distances ascending ...
    sidx = np.empty(cap, dtype=np.int64)  # ... and their centroids
    C[:k0] = C0
    Cn[:k0] = n0
    crow[:k0] = -1
    k = k0
    indexed = False
    home = np.empty(n, dtype=np.int64)
    d_home = np.empty(n)
    new_rows = np.empty(n, dtype=np.int64)
    n_new = 0
    comps = 0
    for i in range(n):
        if not indexed and k > scan_max:
            # Build the index: pivot distances of every centroid so far, sorted by pivot 1.
            for j in range(k):
                r = crow[j]
                if r < 0:
                    if not have_c0[j]:
                        _pivot_row(code, C0, j, n0[j], P, PC0)
                        have_c0[j] = True
                        comps += m
                    PC[j] = PC0[j]
                else:
                    if not have_x[r]:
                        _pivot_row(code, X, r, norms[r], P, PX)
                        have_x[r] = True
                        comps += m
                    PC[j] = PX[r]
            order = np.argsort(PC[:k, 0])
            for s in range(k):
                sidx[s] = order[s]
                skey[s] = PC[order[s], 0]
            indexed = True
        best = math.inf
        arg = -1
        # A radius that spans the centroids' pivot-1 range filters (next to) nothing: scan.
        if indexed and 2.0 * new_radius < skey[k - 1] - skey[0]:
            if not have_x[i]:
                _pivot_row(code, X, i, norms[i], P, PX)
                have_x[i] = True
                comps += m
            a = PX[i, 0]
            rr = new_radius + _slack(a, new_radius, rel, ab)
            lo, hi = _key_range(skey, k, a - rr, a + rr)
            for s in range(lo, hi):
                j = sidx[s]
                if not _pivots_ok(PX, i, PC, j, new_radius, rel, ab, 1):
                    continue
                dd = _dist(code, X, i, C, j, norms[i], Cn[j])
                comps += 1
                if dd < best or (dd == best and j < arg):
                    best = dd
                    arg = j
        else:
            for j in range(k):
                dd = _dist(code, X, i, C, j, norms[i], Cn[j])
                if dd < best:
                    best = dd
                    arg = j
            comps += k
        if arg < 0 or best > new_radius:
            # Criterion 2: farther than t from every existing centroid.
            if k == cap:
                cap = 2 * cap
                C2 = np.empty((cap, d))
                Cn2 = np.empty(cap)
                PC2 = np.empty((cap, m))
                crow2 = np.empty(cap, dtype=np.int64)
                skey2 = np.empty(cap)
                sidx2 = np.empty(cap, dtype=np.int64)
                C2[:k] = C[:k]
                Cn2[:k] = Cn[:k]
                PC2[:k] = PC[:k]
                crow2[:k] = crow[:k]
                skey2[:k] = skey[:k]
                sidx2[:k] = sidx[:k]
                C, Cn, PC, crow, skey, sidx = C2, Cn2, PC2, crow2, skey2, sidx2
            for q in range(d):
                C[k, q] = X[i, q]
            Cn[k] = norms[i]
            crow[k] = i
            if indexed:
                if not have_x[i]:  # the query scanned
                    _pivot_row(code, X, i, norms[i], P, PX)
                    have_x[i] = True
                    comps += m
                PC[k] = PX[i]
                key = PX[i, 0]
                pos = k
                while pos > 0 and skey[pos - 1] > key:
                    skey[pos] = skey[pos - 1]
                    sidx[pos] = sidx[pos - 1]
                    pos -= 1
                skey[pos] = key
                sidx[pos] = k
            home[i] = k
            d_home[i] = 0.0
            new_rows[n_new] = i
            n_new += 1
            k += 1
        else:
            home[i] = arg
            d_home[i] = best
    return home, d_home, new_rows[:n_new], comps


@njit(cache=True, nogil=True)
def _outer_sets(
    code: int,
    X: FloatArray,
    norms: FloatArray,
    C: FloatArray,
    Cn: FloatArray,
    act: IntArray,
    rad: FloatArray,
    lim: IntArray,
    P: FloatArray,
    PX: FloatArray,
    have_x: npt.NDArray[np.bool_],
    PC: FloatArray,
    have_c: npt.NDArray[np.bool_],
    crow: IntArray,
    rel: float,
    ab: float,
    scan_max: int,
) -> tuple[IntArray, IntArray, int]:
    """Pass 2: every (row i, centroid c) with c in act, c < lim[i] and rad[c] >= d^(X[i], C[c]).

    act: the candidate centroids, ascending. Returns (row, centroid, computations), sorted by
    row, then centroid - the same rows, in the same order, as testing every pair. A row is
    compared with the centroids below its limit: by a scan if there are few of them, else
    with the candidates that the pivot index returns. crow[c]: the row that centroid c is
    (its pivot distances are shared), -1 for none.
    """
    n = X.shape[0]
    m = P.shape[0]
    na = act.shape[0]
    comps = 0
    skey = np.empty(na)
    sidx = np.empty(na, dtype=np.int64)
    rmax = -math.inf
    indexed = na > scan_max
    if indexed:
        for s in range(na):
            c = act[s]
            if not have_c[c]:
                r = crow[c]
                if r >= 0:
                    if not have_x[r]:
                        _pivot_row(code, X, r, norms[r], P, PX)
                        have_x[r] = True
                        comps += m
                    PC[c] = PX[r]
                else:
                    _pivot_row(code, C, c, Cn[c], P, PC)
                    comps += m
                have_c[c] = True
            skey[s] = PC[c, 0]
            if rad[c] > rmax:
                rmax = rad[c]
        order = np.argsort(skey)
        skey = skey[order]
        sidx = act[order]
        # A radius that spans the centroids' pivot-1 range filters (next to) nothing: scan.
        indexed = 2.0 * rmax < skey[na - 1] - skey[0]
    cap = max(16, n)
    out_r = np.empty(cap, dtype=np.int64)
    out_c = np.empty(cap, dtype=np.int64)
    cnt = 0
    for i in range(n):
        li = lim[i]
        # Active centroids below the row's limit (act is ascending).
        lo, nb = 0, na
        while lo < nb:
            mid = (lo + nb) >> 1
            if act[mid] < li:
                lo = mid + 1
            else:
                nb = mid
        if nb == 0:
            continue
        start = cnt
        if not indexed or nb <= (scan_max if not have_x[i] else 1):
            for s in range(nb):
                c = act[s]
                dd = _dist(code, X, i, C, c, norms[i], Cn[c])
                comps += 1
                if rad[c] >= dd:
                    if cnt == cap:
                        cap *= 2
                        out_r = np.concatenate((out_r, np.empty(cap - out_r.shape[0], dtype=np.int64)))
                        out_c = np.concatenate((out_c, np.empty(cap - out_c.shape[0], dtype=np.int64)))
                    out_r[cnt] = i
                    out_c[cnt] = c
                    cnt += 1
            continue
        if not have_x[i]:
            _pivot_row(code, X, i, norms[i], P, PX)
            have_x[i] = True
            comps += m
        a = PX[i, 0]
        rr = rmax + _slack(a, rmax, rel, ab)
        lo, hi = _key_range(skey, na, a - rr, a + rr)
        for s in range(lo, hi):
            c = sidx[s]
            if c >= li:
                continue
            rc = rad[c]
            if not _pivots_ok(PX, i, PC, c, rc, rel, ab, 0):
                continue
            dd = _dist(code, X, i, C, c, norms[i], Cn[c])
            comps += 1
            if rc >= dd:
                if cnt == cap:
                    cap *= 2
                    out_r = np.concatenate((out_r, np.empty(cap - out_r.shape[0], dtype=np.int64)))
                    out_c = np.concatenate((out_c, np.empty(cap - out_c.shape[0], dtype=np.int64)))
                out_r[cnt] = i
                # Insertion keeps the row's centroids ascending.
                pos = cnt
                while pos > start and out_c[pos - 1] > c:
                    out_c[pos] = out_c[pos - 1]
                    pos -= 1
                out_c[pos] = c
                cnt += 1
    return out_r[:cnt], out_c[:cnt], comps


@dataclass(frozen=True)
class PartitionWorksets:
    """Workset formulation of one space partition.

    record, workset_id, role: one row per (record, workset) membership; record
    indexes the partition's input rows. new_workset_id / new_centroid: worksets
    opened in this window (to append to the centroid state). member_radius: per workset
    (the given ones by ascending id, then the new ones) the largest computed home distance
    of this call's members, -inf for a workset without one.
    """

    record: IntArray
    workset_id: IntArray
    role: npt.NDArray[np.int8]
    new_workset_id: IntArray
    new_centroid: FloatArray
    centroid_distance_computations: int
    member_radius: FloatArray


def formulate_partition_worksets(
    X: npt.ArrayLike,
    is_outer: npt.ArrayLike,
    metric: str,
    t: float,
    inclusive: bool = False,
    *,
    workset_id: npt.ArrayLike | None = None,
    centroid: npt.ArrayLike | None = None,
    member_radius: npt.ArrayLike | None = None,
    bounds: PartitionBounds | None = None,
    max_block_elements: int = DEFAULT_BLOCK_ELEMENTS,
    prune_outer: bool = True,
) -> PartitionWorksets:
    """Form the worksets of one space partition for one window (steps 1-5).

    X: the partition's records in arrival order (inner and physical outer mixed);
    is_outer: True for physical outer copies. workset_id / centroid: the
    partition's centroids from earlier windows (ids >= 1), or None.

    prune_outer (default): outer copies are sent only where they can meet a
    member. Outer rows only probe inner + outlier rows (Section 7.7), and every
    member of workset W in this window lies within m_W (the largest computed
    home distance of its members, found in pass 1) of W's centroid, so a record
    can match a member of W only if it lies within ``bounds.outer_radius_for(m_W)``
    (nominally t + m_W <= 2t) of the centroid; a workset without members in this
    call takes no outer copies at all. The result is unchanged; copies and
    distance computations can only drop.

    member_radius (aligned with workset_id): the computed member radius each given workset
    already has in this window from earlier micro-batches (-inf: no member yet). A window
    formulated piecewise passes it, so a new record reaches every workset whose earlier
    members it may match; the earlier records that the grown radius now reaches are routed
    by ``formulate_partition_window`` (its ``old`` rows).

    Centroid searches use the pivot index of the module docstring; max_block_elements is
    not needed here any more (kept for the callers, ``formulate_partition_window`` uses it).
    """
    t = check_threshold(metric, t)
    Xv = check_vectors(X, metric)
    n, d = Xv.shape
    outer_flag = np.asarray(is_outer, dtype=bool).reshape(-1)
    if outer_flag.shape[0] != n:
        raise ValueError(f"is_outer has {outer_flag.shape[0]} entries, X has {n} rows")
    if bounds is None:
        bounds = partition_bounds(metric, t, d, inclusive)
    if centroid is None or np.size(centroid) == 0:
        ids0 = np.zeros(0, dtype=np.int64)
        C0 = np.zeros((0, d))
        m0 = np.zeros(0)
    else:
        ids0 = np.asarray(workset_id, dtype=np.int64).reshape(-1)
        C0 = check_vectors(centroid, metric, name="centroid")
        if C0.shape[0] != ids0.shape[0] or (C0.shape[0] and C0.shape[1] != d):
            raise ValueError(f"centroid state shape {C0.shape} does not fit ids {ids0.shape} and d={d}")
        m0 = np.full(ids0.shape[0], -np.inf)
        if member_radius is not None:
            m0 = np.asarray(member_radius, dtype=np.float64).reshape(-1)
            if m0.shape != ids0.shape:
                raise ValueError(f"member_radius has {m0.shape[0]} entries, workset_id has {ids0.shape[0]}")
        order = np.argsort(ids0, kind="stable")
        ids0, C0, m0 = ids0[order], C0[order], m0[order]
    C0 = C0.reshape(-1, d)
    code = METRIC_CODES[bounds.space]

    inner_rows = np.flatnonzero(~outer_flag).astype(np.int64)
    X_in = np.ascontiguousarray(Xv[inner_rows])
    norms = row_norms(Xv)
    n_in = norms[inner_rows]
    n0 = row_norms(C0)
    # Centroid index (pivot filtering): pivot distances are computed when first needed.
    piv = _pivots(d)
    n_piv = piv.shape[0]
    scan_max = _scan_max(bounds.space, n_piv, norms, n0)
    PX_in = np.empty((inner_rows.shape[0], n_piv))
    have_in = np.zeros(inner_rows.shape[0], dtype=bool)
    PC0 = np.empty((C0.shape[0], n_piv))
    have_c0 = np.zeros(C0.shape[0], dtype=bool)
    home_idx, d_home, new_local, comps1 = _open_worksets(
        code, X_in, n_in, C0, n0, bounds.new_centroid_radius,
        piv, PX_in, have_in, PC0, have_c0, bounds.rel, bounds.abs, scan_max,
    )
    next_id = int(ids0.max()) + 1 if ids0.size else 1
    new_ids = np.arange(next_id, next_id + new_local.shape[0], dtype=np.int64)
    C_all = np.ascontiguousarray(np.concatenate([C0, X_in[new_local]]) if new_local.size else C0)
    ids_all = np.concatenate([ids0, new_ids])
    K = C_all.shape[0]

    # Home rows of inner records: inner (Definition 8) or outlier (Definition 9).
    roles_home = np.where(d_home <= bounds.inner_radius, INNER, OUTLIER).astype(np.int8)
    rec_parts = [inner_rows]
    ws_parts = [ids_all[home_idx]]
    role_parts = [roles_home]

    # Pass 2: outer sets (Definition 10) against the final centroids.
    home_of_row = np.full(n, K, dtype=np.int64)  # physical outer: every workset qualifies
    home_of_row[inner_rows] = home_idx
    comps2 = 0
    # Member radius per workset in this call (-inf: no member).
    m_new = np.full(K, -np.inf)
    if home_idx.size:
        np.maximum.at(m_new, home_idx, d_home)
    if prune_outer:
        # ... and in the window so far (-inf: no member, no outer copies).
        m_ws = np.maximum(m_new, np.concatenate([m0, np.full(K - m0.shape[0], -np.inf)]))
        rad = np.asarray(bounds.outer_radius_for(m_ws), dtype=np.float64)
    else:
        rad = np.full(K, bounds.outer_radius)
    act_idx = np.flatnonzero(np.isfinite(rad)).astype(np.int64)
    if act_idx.size and n:
        # Only worksets with members can take outer copies: search their centroids only.
        PX = np.empty((n, n_piv))
        PX[inner_rows] = PX_in
        have_x = np.zeros(n, dtype=bool)
        have_x[inner_rows] = have_in
        PC = np.empty((K, n_piv))
        PC[: C0.shape[0]] = PC0
        have_c = np.concatenate([have_c0, np.zeros(K - C0.shape[0], dtype=bool)])
        crow = np.concatenate([np.full(C0.shape[0], -1, dtype=np.int64), inner_rows[new_local]])
        c_norms = np.concatenate([n0, n_in[new_local]])
        r, w, comps2 = _outer_sets(
            code, Xv, norms, C_all, c_norms, act_idx, rad, home_of_row,
            piv, PX, have_x, PC, have_c, crow, bounds.rel, bounds.abs, scan_max,
        )
        rec_parts.append(r)
        ws_parts.append(ids_all[w])
        role_parts.append(np.full(r.shape[0], OUTER, dtype=np.int8))
    return PartitionWorksets(
        record=np.concatenate(rec_parts),
        workset_id=np.concatenate(ws_parts).astype(np.int64),
        role=np.concatenate(role_parts).astype(np.int8),
        new_workset_id=new_ids,
        new_centroid=np.ascontiguousarray(X_in[new_local]).reshape(-1, d),
        centroid_distance_computations=int(comps1) + int(comps2),
        member_radius=m_new,
    )


@dataclass(frozen=True)
class EarlierRows:
    """One window's rows in one space partition from earlier micro-batches (the join state).

    X (b, d): every record copy once - an inner record with its home workset (home >= 1,
    role inner or outlier), a physical outer copy with home 0 (the paper's buffer).
    routed_row / routed_workset_id: the outer-set memberships already made (row indexes X).
    """

    X: FloatArray
    home: IntArray
    routed_row: IntArray
    routed_workset_id: IntArray

    @classmethod
    def empty(cls, dim: int) -> EarlierRows:
        z = np.zeros(0, np.int64)
        return cls(np.zeros((0, int(dim))), z, z.copy(), z.copy())

    def __len__(self) -> int:
        return int(self.home.shape[0])


@dataclass(frozen=True)
class WindowWorksets:
    """One space partition's worksets for one window, routed to workers.

    record, workset_id, worker, role: one row per (record, workset) membership
    (``formulate_partition_worksets``), record indexing the step's input rows.
    new_workset_id / new_centroid / new_worker: worksets opened by this step.
    routed_record / routed_workset_id / routed_worker: earlier rows (indexing the
    ``earlier`` input) that must now join the outer set of a workset with new members
    (role ``OUTER``; in the join they meet only new rows). centroid_distance_computations:
    formulation plus the member radii and the routing of earlier rows.
    """

    record: IntArray
    workset_id: IntArray
    worker: IntArray
    role: npt.NDArray[np.int8]
    new_workset_id: IntArray
    new_centroid: FloatArray
    new_worker: IntArray
    routed_record: IntArray
    routed_workset_id: IntArray
    routed_worker: IntArray
    centroid_distance_computations: int

    @property
    def n_new_worksets(self) -> int:
        return int(self.new_workset_id.shape[0])


def formulate_partition_window(
    X: npt.ArrayLike,
    is_outer: npt.ArrayLike,
    metric: str,
    t: float,
    inclusive: bool = False,
    *,
    partition: int,
    n_workers: int,
    workset_id: npt.ArrayLike | None = None,
    centroid: npt.ArrayLike | None = None,
    worker: npt.ArrayLike | None = None,
    earlier: EarlierRows | None = None,
    bounds: PartitionBounds | None = None,
    max_block_elements: int = DEFAULT_BLOCK_ELEMENTS,
    prune_outer: bool = True,
) -> WindowWorksets:
    """Steps 1-5 for one space partition and one window, with workers (Section 7.5).

    X / is_outer: the partition's new rows of the window in arrival order (see
    ``formulate_partition_worksets``). workset_id / centroid / worker: the partition's
    worksets so far (ids unique, any order; worker defaults to ``partition % n_workers``).
    A new workset starts on worker ``partition % n_workers``.

    earlier: the window's rows from earlier micro-batches (``EarlierRows``), or None when
    the window starts here. They make a piecewise window exact, whenever a workset and a
    record were created:

    * the member radius m_W of each workset so far (its earlier members' computed
      distance to the centroid), so new rows reach every workset whose earlier members
      they may match (``prune_outer``: within ``outer_radius_for(m_W)``, else 2t);
    * every earlier row goes to the outer set of every workset that gets new members now
      - whether it was opened by this step, by an earlier window of the micro-batch or by
      an intervening one - within ``outer_radius_for`` of its new members' radius (2t
      without pruning), by the routing rule of Definition 10 (an inner record only to
      worksets with a smaller id than its home, a physical outer copy to any), unless it
      is in that outer set already. Earlier members met earlier rows before, so the new
      members' radius is enough. This generalises the paper's buffering, which only
      serves worksets opened after a copy was buffered.
    """
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    t = check_threshold(metric, t)
    Xv = check_vectors(X, metric)
    d = Xv.shape[1]
    if bounds is None:
        bounds = partition_bounds(metric, t, d, inclusive)
    ids0 = np.zeros(0, np.int64) if workset_id is None else np.asarray(workset_id, dtype=np.int64).reshape(-1)
    home_worker = int(partition) % n_workers
    if worker is None:
        wk0 = np.full(ids0.shape[0], home_worker, np.int64)
    else:
        wk0 = np.asarray(worker, dtype=np.int64).reshape(-1)
    if wk0.shape[0] != ids0.shape[0]:
        raise ValueError(f"worker has {wk0.shape[0]} entries, workset_id has {ids0.shape[0]}")
    C0 = np.zeros((0, d)) if centroid is None else np.asarray(centroid, dtype=np.float64)
    if not ids0.size:
        C0 = np.zeros((0, d))
    elif C0.ndim != 2 or C0.shape != (ids0.shape[0], d):
        raise ValueError(f"centroid has shape {C0.shape}, expected ({ids0.shape[0]}, {d}) for the given workset ids")
    order = np.argsort(ids0, kind="stable")
    ids0, C0, wk0 = ids0[order], C0[order], wk0[order]
    comps = 0
    m_old = np.full(ids0.shape[0], -np.inf)
    ex = earlier if earlier is not None and len(earlier) else None
    if ex is not None:
        if ex.X.ndim != 2 or ex.X.shape != (len(ex), d):
            raise ValueError(f"earlier rows have shape {ex.X.shape}, expected ({len(ex)}, {d})")
        mem = np.flatnonzero(ex.home > 0)
        pos = np.searchsorted(ids0, ex.home[mem])
        if mem.size:
            known = (pos < ids0.shape[0]) & (ids0[np.minimum(pos, max(ids0.shape[0] - 1, 0))] == ex.home[mem])
            if not ids0.size or not known.all():
                raise KeyError(f"partition {partition}: an earlier member's workset is unknown")
            np.maximum.at(m_old, pos, paired(bounds.space, ex.X[mem], C0[pos]))
            comps += int(mem.size)
    res = formulate_partition_worksets(
        Xv,
        is_outer,
        metric,
        t,
        inclusive,
        workset_id=ids0 if ids0.size else None,
        centroid=C0 if ids0.size else None,
        member_radius=m_old if ids0.size else None,
        bounds=bounds,
        max_block_elements=max_block_elements,
        prune_outer=prune_outer,
    )
    k_new = res.new_workset_id.shape[0]
    new_worker = np.full(k_new, home_worker, np.int64)
    ids_all = np.concatenate([ids0, res.new_workset_id])
    wk_all = np.concatenate([wk0, new_worker])
    # ids_all is sorted (new ids follow the old ones); the last of equal ids wins.
    pos = np.searchsorted(ids_all, res.workset_id, side="right") - 1
    if res.workset_id.size and (pos.min() < 0 or np.any(ids_all[np.maximum(pos, 0)] != res.workset_id)):
        raise KeyError(f"partition {partition}: a member's workset is unknown")
    comps += res.centroid_distance_computations
    z = np.zeros(0, np.int64)
    b_rec, b_idx = z, z.copy()
    targets = np.flatnonzero(np.isfinite(res.member_radius)).astype(np.int64)
    if ex is not None and targets.size:
        # the pivot index over the target centroids, as in pass 2; an earlier inner record only
        # reaches worksets with a smaller id than its home (ids_all ascending: a smaller index)
        K = ids_all.shape[0]
        C_all = np.ascontiguousarray(np.concatenate([C0, res.new_centroid]).reshape(-1, d))
        rad = np.full(K, -np.inf)
        rad[targets] = (np.asarray(bounds.outer_radius_for(res.member_radius[targets]), dtype=np.float64)
                        if prune_outer else bounds.outer_radius)
        lim = np.where(ex.home == 0, K, np.searchsorted(ids_all, ex.home)).astype(np.int64)
        Xe = np.ascontiguousarray(check_vectors(ex.X, metric, name="earlier rows"))
        piv = _pivots(d)
        xn, cn = row_norms(Xe), row_norms(C_all)
        b_rec, b_idx, c3 = _outer_sets(
            METRIC_CODES[bounds.space], Xe, xn, C_all, cn, targets, rad, lim, piv,
            np.empty((len(ex), piv.shape[0])), np.zeros(len(ex), dtype=bool), np.empty((K, piv.shape[0])),
            np.zeros(K, dtype=bool), np.full(K, -1, dtype=np.int64), bounds.rel, bounds.abs,
            _scan_max(bounds.space, piv.shape[0], xn, cn))
        comps += int(c3)
        if ex.routed_row.size and b_rec.size:
            done = workset_key(ex.routed_row, ex.routed_workset_id)
            keep = ~np.isin(workset_key(b_rec, ids_all[b_idx]), done)
            b_rec, b_idx = b_rec[keep], b_idx[keep]
    return WindowWorksets(
        record=res.record,
        workset_id=res.workset_id,
        worker=wk_all[pos].astype(np.int64),
        role=res.role,
        new_workset_id=res.new_workset_id,
        new_centroid=res.new_centroid,
        new_worker=new_worker,
        routed_record=b_rec,
        routed_workset_id=ids_all[b_idx],
        routed_worker=wk_all[b_idx].astype(np.int64),
        centroid_distance_computations=int(comps),
    )


@dataclass(frozen=True)
class WorksetRows:
    """Records routed to worksets: one row per (record, workset) membership.

    record indexes the window's input arrays; (partition, workset_id) names the
    workset; worker is where it is joined; role is INNER / OUTLIER / OUTER.
    """

    record: IntArray
    partition: IntArray
    workset_id: IntArray
    worker: IntArray
    role: npt.NDArray[np.int8]

    def __len__(self) -> int:
        return int(self.record.shape[0])

    def select(self, mask: npt.NDArray[np.bool_]) -> WorksetRows:
        return WorksetRows(
            self.record[mask],
            self.partition[mask],
            self.workset_id[mask],
            self.worker[mask],
            self.role[mask],
        )

    def for_worker(self, worker: int) -> WorksetRows:
        return self.select(self.worker == worker)

    def role_counts(self) -> tuple[int, int, int]:
        c = np.bincount(self.role.astype(np.int64), minlength=3)
        return int(c[INNER]), int(c[OUTLIER]), int(c[OUTER])


@dataclass(frozen=True)
class WorksetFormulation:
    """Workset formulation of a whole window: rows, updated state, counters."""

    rows: WorksetRows
    state: CentroidState
    n_new_worksets: int
    centroid_distance_computations: int


def formulate_worksets(
    X: npt.ArrayLike,
    space: SpacePartitioning,
    metric: str,
    t: float,
    inclusive: bool = False,
    *,
    state: CentroidState | None = None,
    max_block_elements: int = DEFAULT_BLOCK_ELEMENTS,
    prune_outer: bool = True,
) -> WorksetFormulation:
    """Run ``formulate_partition_worksets`` for every space partition of the window.

    X must be in arrival order. The returned state is ``state`` plus the new
    worksets (worker = their partition); rows carry each workset's worker.
    """
    t = check_threshold(metric, t)
    Xv = check_vectors(X, metric)
    d = Xv.shape[1]
    if state is None:
        state = CentroidState.empty(d)
    elif len(state) and state.dim != d:
        raise ValueError(f"centroid state has dimension {state.dim}, records have {d}")
    if len(state) and state.partition.max() >= space.n_partitions:
        raise ValueError(
            f"centroid state has partition {int(state.partition.max())} but there are only "
            f"{space.n_partitions} space partitions (was n_workers changed?)"
        )
    bounds = partition_bounds(metric, t, d, inclusive)
    recs, parts, wss, wks, roles = [], [], [], [], []
    new_p, new_w, new_c, new_k = [], [], [], []
    comps = 0
    starts = np.searchsorted(space.partition, np.arange(space.n_partitions + 1))
    for p in range(space.n_partitions):
        sl = slice(int(starts[p]), int(starts[p + 1]))
        rec_p = space.record[sl]
        ids0, C0 = state.for_partition(p)
        if rec_p.size == 0:
            continue
        # One worker per space partition: worker p (n_workers = n_partitions).
        res = formulate_partition_window(
            Xv[rec_p],
            space.is_outer[sl],
            metric,
            t,
            inclusive,
            partition=p,
            n_workers=space.n_partitions,
            workset_id=ids0,
            centroid=C0,
            worker=state.worker[state.partition == p],
            bounds=bounds,
            max_block_elements=max_block_elements,
            prune_outer=prune_outer,
        )
        recs.append(rec_p[res.record])
        parts.append(np.full(res.record.shape[0], p, dtype=np.int64))
        wss.append(res.workset_id)
        wks.append(res.worker)
        roles.append(res.role)
        new_p.append(np.full(res.new_workset_id.shape[0], p, dtype=np.int64))
        new_w.append(res.new_workset_id)
        new_c.append(res.new_centroid)
        new_k.append(res.new_worker)
        comps += res.centroid_distance_computations
    n_new = int(sum(a.shape[0] for a in new_w))
    if n_new:
        state = CentroidState.from_arrays(
            np.concatenate([state.partition, *new_p]),
            np.concatenate([state.workset_id, *new_w]),
            np.concatenate([state.centroid.reshape(-1, d), *new_c]),
            np.concatenate([state.worker, *new_k]),
        )
    z = np.zeros(0, dtype=np.int64)
    record = np.concatenate(recs) if recs else z
    partition = np.concatenate(parts) if parts else z
    workset_id = np.concatenate(wss) if wss else z
    role = np.concatenate(roles).astype(np.int8) if roles else np.zeros(0, np.int8)
    worker = np.concatenate(wks) if wks else z
    rows = WorksetRows(record, partition, workset_id, worker, role)
    return WorksetFormulation(rows, state, n_new, comps)
