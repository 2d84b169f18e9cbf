"""Workset load, workset-to-worker assignment, the S3J balancer, and window statistics.

Siachamis et al., DEBS'23:

* Definition 5: the load of a worker is the number of similarity comparisons it
  performs. A workset with new records this window (i inner, u outlier,
  o outer) and records already in its join state (I, U, O; zero when a window
  is joined in one go, since the state is cleared at window end) costs, by the
  Section 7.7 rules::

      u (O + U + I) + o (I + U) + i (O + U) + u (o + i) + o i + u (u - 1) / 2

  (outliers probe everything, outer probes inner + outliers, inner probes
  outer + outliers, inner x inner is free) - ``workset_load``. The authors
  write the same formula as ``o(U+O+I) + u(I+O) + i(U+O) + o(u+i) + u i +
  o(o-1)/2`` with their o/O the outliers and u/U the outer records (the only
  reading consistent with Section 7.7); the function takes named arguments.
* Definition 11 / Section 8.3 (Algorithm 1): degree of imbalance
  ``DI = sum_n |L_n - L_avg|``; the balancer fires when a worker deviates more than
  ``trigger`` (20 %) from the average; on every overloaded worker the heaviest
  workset whose load exceeds the average is pinned (irremovable); a move of
  workset g from n to u is worth ``pen(n) - pen(n - g) + pen(u) - pen(u + g) -
  migration_factor * size_bytes(g)`` with ``pen(x) = |x - L_avg|``; moves are made
  greedily by best removal benefit until none helps (``balance_worksets``).
* Section 9.1: duplication ratio (average copies of a record) and comparisons
  ratio (distance computations / joined pairs) - ``WindowStats``.

``comparisons_ratio`` is ``computations / max(result_pairs, 1)``: a window with
no result reports its number of computations (finite, plottable, 0 for an
empty window).

* The rebalance stage (``rebalance``): Algorithm 1 over (workset, part) units from the
  monitoring window's loads, after splitting oversized worksets (the paper's future work;
  the join side is ``join.split_rows``); the result is an ``Assignment``, the savepoint.

API: ``workset_load``, ``worker_loads``, ``imbalance``, ``needs_rebalance``, ``rebalance``,
``assign_worksets_greedy``, ``balance_worksets -> BalanceResult``,
``WindowStats`` (``to_dict()``, ``per_worker()``).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = [
    "Assignment",
    "BalanceResult",
    "RebalanceResult",
    "WindowStats",
    "assign_worksets_greedy",
    "balance_worksets",
    "comparisons_ratio",
    "imbalance",
    "needs_rebalance",
    "rebalance",
    "worker_loads",
    "workset_load",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def workset_load(
    n_inner: npt.ArrayLike,
    n_outlier: npt.ArrayLike,
    n_outer: npt.ArrayLike,
    state_inner: npt.ArrayLike = 0,
    state_outlier: npt.ArrayLike = 0,
    state_outer: npt.ArrayLike = 0,
) -> FloatArray:
    """Comparisons a workset costs this window (vectorized over worksets).

    new counts i, u, o (inner, outlier, outer) and state counts I, U, O:
    ``u(O+U+I) + o(I+U) + i(O+U) + u(o+i) + o*i + u(u-1)/2``.
    """
    i = np.asarray(n_inner, dtype=np.float64)
    u = np.asarray(n_outlier, dtype=np.float64)
    o = np.asarray(n_outer, dtype=np.float64)
    si = np.asarray(state_inner, dtype=np.float64)
    su = np.asarray(state_outlier, dtype=np.float64)
    so = np.asarray(state_outer, dtype=np.float64)
    return np.asarray(
        u * (so + su + si) + o * (si + su) + i * (so + su) + u * (o + i) + o * i + u * (u - 1.0) / 2.0
    )


def worker_loads(load: npt.ArrayLike, worker: npt.ArrayLike, n_workers: int) -> FloatArray:
    """Sum of workset loads per worker (length ``n_workers``)."""
    w = np.asarray(worker, dtype=np.int64)
    if w.size and (w.min() < 0 or w.max() >= n_workers):
        raise ValueError(f"worker ids must be in [0, {n_workers}), got {int(w.min())}..{int(w.max())}")
    return np.bincount(w, weights=np.asarray(load, dtype=np.float64), minlength=n_workers).astype(np.float64)


def imbalance(worker_load: npt.ArrayLike) -> float:
    """Degree of imbalance DI = sum_n |L_n - L_avg| (Definition 11)."""
    L = np.asarray(worker_load, dtype=np.float64)
    return float(np.abs(L - L.mean()).sum()) if L.size else 0.0


def needs_rebalance(worker_load: npt.ArrayLike, trigger: float = 0.2) -> bool:
    """True if some worker's load deviates more than ``trigger`` x average from the average."""
    L = np.asarray(worker_load, dtype=np.float64)
    if L.size == 0:
        return False
    avg = float(L.mean())
    return bool(avg > 0 and np.any(np.abs(L - avg) > trigger * avg))


def comparisons_ratio(computations: int, result_pairs: int) -> float:
    """Distance computations per result pair; ``computations`` itself when there is no result."""
    return float(computations) / max(int(result_pairs), 1)


def assign_worksets_greedy(load: npt.ArrayLike, n_workers: int) -> IntArray:
    """Longest-processing-time-first: heaviest workset to the least-loaded worker."""
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    ld = np.asarray(load, dtype=np.float64).reshape(-1)
    out = np.empty(ld.shape[0], dtype=np.int64)
    heap = [(0.0, w) for w in range(n_workers)]
    for g in np.argsort(-ld, kind="stable"):
        total, w = heapq.heappop(heap)
        out[g] = w
        heapq.heappush(heap, (total + float(ld[g]), w))
    return out


@dataclass(frozen=True)
class BalanceResult:
    """Outcome of ``balance_worksets``: the new workset -> worker map and what moved."""

    worker: IntArray
    moved: IntArray  # indices of the worksets that changed worker, in move order
    pinned: IntArray  # irremovable worksets
    fired: bool
    imbalance_before: float
    imbalance_after: float


def balance_worksets(
    load: npt.ArrayLike,
    worker: npt.ArrayLike,
    n_workers: int,
    *,
    size_bytes: npt.ArrayLike | None = None,
    migration_factor: float = 0.0,
    trigger: float = 0.2,
    max_moves: int | None = None,
) -> BalanceResult:
    """Workset balancing (Algorithm 1): move worksets off overloaded workers, no repartitioning.

    load, worker, size_bytes: one entry per workset. Returns a new assignment;
    nothing moves unless ``needs_rebalance(worker_loads(...), trigger)``.
    """
    ld = np.asarray(load, dtype=np.float64).reshape(-1)
    wk = np.asarray(worker, dtype=np.int64).reshape(-1).copy()
    if wk.shape != ld.shape:
        raise ValueError(f"load has {ld.shape[0]} worksets, worker has {wk.shape[0]}")
    size = np.zeros_like(ld) if size_bytes is None else np.asarray(size_bytes, dtype=np.float64).reshape(-1)
    if size.shape != ld.shape:
        raise ValueError(f"size_bytes has {size.shape[0]} worksets, load has {ld.shape[0]}")
    L = worker_loads(ld, wk, n_workers)
    before = imbalance(L)
    z = np.zeros(0, dtype=np.int64)
    if not needs_rebalance(L, trigger):
        return BalanceResult(wk, z, z, False, before, before)
    avg = float(L.mean())
    cost = migration_factor * size

    # Irremovables: the heaviest workset above the average on each overloaded worker.
    pinned = np.zeros(ld.shape[0], dtype=bool)
    for n in np.flatnonzero(avg < L):
        mine = np.flatnonzero((wk == n) & (ld > avg))
        if mine.size:
            pinned[mine[np.argmax(ld[mine])]] = True
    ignored = np.zeros(ld.shape[0], dtype=bool)
    moved: list[int] = []
    limit = max_moves if max_moves is not None else 10 * max(1, ld.shape[0])

    def pen(x: FloatArray) -> FloatArray:
        return np.abs(x - avg)

    while len(moved) < limit:
        over = L[wk] > avg
        cand = over & ~pinned & ~ignored
        if not cand.any():
            break
        Lo = L[wk]
        removal = pen(Lo) - pen(Lo - ld) - cost
        removal[~cand] = -np.inf
        best = int(np.argmax(removal))
        if removal[best] <= 0:
            break
        g = ld[best]
        under = np.flatnonzero(avg > L)
        if under.size:
            addition = pen(L[under]) - pen(L[under] + g)
            total = removal[best] + addition
            k = int(np.argmax(addition))
            if addition[k] > 0 and total[k] > 0:
                u = int(under[k])
                L[wk[best]] -= g
                L[u] += g
                wk[best] = u
                moved.append(best)
                continue
        ignored[best] = True
    return BalanceResult(
        wk,
        np.asarray(moved, dtype=np.int64),
        np.flatnonzero(pinned).astype(np.int64),
        True,
        before,
        imbalance(L),
    )


def _zeros_i() -> IntArray:
    return np.zeros(0, dtype=np.int64)


def _zeros_f() -> FloatArray:
    return np.zeros(0, dtype=np.float64)


@dataclass(frozen=True)
class WindowStats:
    """Statistics of one window (Section 9.1), overall and per worker.

    space_copies: rows after space partitioning (home + outer copies; ClusterJoin:
    its virtual partitions). n_inner / n_outlier / n_outer: rows at the join by
    role (ClusterJoin: home rows are counted as inner, it has no outliers).
    copies = n_inner + n_outlier + n_outer. distance_computations: pair
    distances evaluated by the join (centroid distances are counted apart in
    centroid_distance_computations). shortcut_pairs: result pairs emitted
    without a computation (inner x inner). worker_load: paper load formula per
    worker (S3J) or computations (ClusterJoin).
    """

    algorithm: str
    n_records: int
    n_workers: int
    space_copies: int
    n_inner: int
    n_outlier: int
    n_outer: int
    n_worksets: int
    n_new_worksets: int
    distance_computations: int
    shortcut_pairs: int
    result_pairs: int
    centroid_distance_computations: int
    worker_rows: IntArray = field(default_factory=_zeros_i)
    worker_inner: IntArray = field(default_factory=_zeros_i)
    worker_outlier: IntArray = field(default_factory=_zeros_i)
    worker_outer: IntArray = field(default_factory=_zeros_i)
    worker_worksets: IntArray = field(default_factory=_zeros_i)
    worker_computations: IntArray = field(default_factory=_zeros_i)
    worker_shortcut_pairs: IntArray = field(default_factory=_zeros_i)
    worker_result_pairs: IntArray = field(default_factory=_zeros_i)
    worker_load: FloatArray = field(default_factory=_zeros_f)

    @property
    def copies(self) -> int:
        return self.n_inner + self.n_outlier + self.n_outer

    @property
    def duplication_ratio(self) -> float:
        """Average number of copies of a record at the join (rows / records)."""
        return self.copies / self.n_records if self.n_records else 0.0

    @property
    def space_duplication_ratio(self) -> float:
        """Average number of space partitions a record is sent to."""
        return self.space_copies / self.n_records if self.n_records else 0.0

    @property
    def comparisons_ratio(self) -> float:
        """distance_computations / result_pairs (computations when there is no result)."""
        return comparisons_ratio(self.distance_computations, self.result_pairs)

    @property
    def load_imbalance(self) -> float:
        return imbalance(self.worker_load)

    def to_dict(self) -> dict[str, float | int | str]:
        """Flat scalars (one stats-table row)."""
        return {
            "algorithm": self.algorithm,
            "n_records": self.n_records,
            "n_workers": self.n_workers,
            "space_copies": self.space_copies,
            "n_inner": self.n_inner,
            "n_outlier": self.n_outlier,
            "n_outer": self.n_outer,
            "copies": self.copies,
            "n_worksets": self.n_worksets,
            "n_new_worksets": self.n_new_worksets,
            "distance_computations": self.distance_computations,
            "shortcut_pairs": self.shortcut_pairs,
            "result_pairs": self.result_pairs,
            "centroid_distance_computations": self.centroid_distance_computations,
            "duplication_ratio": self.duplication_ratio,
            "space_duplication_ratio": self.space_duplication_ratio,
            "comparisons_ratio": self.comparisons_ratio,
            "load_imbalance": self.load_imbalance,
            "max_worker_load": float(self.worker_load.max()) if self.worker_load.size else 0.0,
        }

    def per_worker(self) -> dict[str, np.ndarray]:
        """Per-worker columns (one stats-table row per worker)."""
        return {
            "worker": np.arange(self.n_workers, dtype=np.int64),
            "rows": self.worker_rows,
            "inner": self.worker_inner,
            "outlier": self.worker_outlier,
            "outer": self.worker_outer,
            "worksets": self.worker_worksets,
            "distance_computations": self.worker_computations,
            "shortcut_pairs": self.worker_shortcut_pairs,
            "result_pairs": self.worker_result_pairs,
            "load": self.worker_load,
        }


# --------------------------------------------------------------------------- the rebalance stage


@dataclass(frozen=True)
class Assignment:
    """Workset -> worker map, the rebalance savepoint: one row per (partition, workset_id, part).

    A workset not listed runs on the worker its centroid state names (where it was opened).
    parts > 1: the workset is split (``split_rows``); part k of it runs on ``worker``.
    """

    partition: IntArray
    workset_id: IntArray
    part: IntArray
    parts: IntArray
    worker: IntArray

    @classmethod
    def empty(cls) -> Assignment:
        z = _zeros_i()
        return cls(z, z.copy(), z.copy(), z.copy(), z.copy())

    @classmethod
    def from_arrays(cls, partition: npt.ArrayLike, workset_id: npt.ArrayLike, part: npt.ArrayLike,
                    parts: npt.ArrayLike, worker: npt.ArrayLike) -> Assignment:
        a = [np.asarray(x, dtype=np.int64).reshape(-1) for x in (partition, workset_id, part, parts, worker)]
        if len({x.shape[0] for x in a}) != 1:
            raise ValueError(f"assignment arrays disagree: {[x.shape[0] for x in a]}")
        order = np.lexsort((a[2], a[1], a[0]))
        return cls(*(x[order] for x in a))

    def __len__(self) -> int:
        return int(self.partition.shape[0])

    def placements(self) -> dict[tuple[int, int], list[int]]:
        """(partition, workset_id) -> the worker of each part, in part order."""
        out: dict[tuple[int, int], list[int]] = {}
        for p, g, k in zip(self.partition.tolist(), self.workset_id.tolist(), self.worker.tolist()):
            out.setdefault((p, g), []).append(k)
        return out


@dataclass(frozen=True)
class RebalanceResult:
    """What the rebalance stage decided (Section 8.3, Algorithm 1, plus workset splitting)."""

    assignment: Assignment
    fired: bool
    imbalance_before: float
    imbalance_after: float
    load_before: FloatArray  # per worker
    load_after: FloatArray
    moved: int  # (workset, part) units that changed worker
    split: int  # worksets split into more than one part
    bytes_migrated: float


def rebalance(
    partition: npt.ArrayLike,
    workset_id: npt.ArrayLike,
    load: npt.ArrayLike,
    size_bytes: npt.ArrayLike,
    home_worker: npt.ArrayLike,
    n_workers: int,
    *,
    previous: Assignment | None = None,
    trigger: float = 0.2,
    migration_factor: float = 0.0,
    split: bool = False,
) -> RebalanceResult:
    """Rebalance worksets between windows from their load in the monitoring window.

    partition / workset_id / load / size_bytes / home_worker: one entry per workset with load
    in the monitoring window (load by Definition 5, bytes of its join state, the worker its
    centroid state names). previous: the assignment in force. Each (workset, part) is a unit
    of load/parts on its worker. Nothing changes unless a worker deviates more than
    ``trigger`` x the average (``needs_rebalance``). Then:

    * split (beyond the paper, its future work): a workset heavier than the average worker
      load is cut into k = min(P, ceil(2 load / average)) parts, each at most half the
      average - part 0 stays, the others go to the least-loaded other workers; a split
      workset that became light is merged back;
    * Algorithm 1 (``balance_worksets``) over the units: irremovables, moves by removal
      benefit to the best addition benefit, an ignore list, benefit = DI reduction minus
      migration_factor x bytes. With split, a longest-processing-time-first placement of
      all units is taken instead when it leaves the most loaded worker lighter (Algorithm 1
      moves one unit at a time and stops where no single move helps).

    Bytes migrated: the state bytes of every unit placed on a new worker (a part holds the
    workset's whole state, ``split_rows``). The returned assignment keeps every workset of
    ``previous`` that had no load now.
    """
    p = np.asarray(partition, dtype=np.int64).reshape(-1)
    g = np.asarray(workset_id, dtype=np.int64).reshape(-1)
    ld = np.asarray(load, dtype=np.float64).reshape(-1)
    sz = np.asarray(size_bytes, dtype=np.float64).reshape(-1)
    hw = np.asarray(home_worker, dtype=np.int64).reshape(-1)
    if not (p.shape == g.shape == ld.shape == sz.shape == hw.shape):
        raise ValueError("partition, workset_id, load, size_bytes and home_worker must have equal lengths")
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    prev = previous if previous is not None else Assignment.empty()
    placed = prev.placements()
    # current units: (workset index, part, worker, load share)
    u_ws, u_part, u_wk, u_ld = [], [], [], []
    for i in range(p.shape[0]):
        wks = placed.get((int(p[i]), int(g[i])), [int(hw[i])])
        for k, w in enumerate(wks):
            u_ws.append(i)
            u_part.append(k)
            u_wk.append(w)
            u_ld.append(ld[i] / len(wks))
    uw = np.asarray(u_ws, dtype=np.int64)
    uk = np.asarray(u_part, dtype=np.int64)
    wk = np.asarray(u_wk, dtype=np.int64)
    ul = np.asarray(u_ld, dtype=np.float64)
    L0 = worker_loads(ul, wk, n_workers)
    before = imbalance(L0)
    if not needs_rebalance(L0, trigger):
        return RebalanceResult(prev, False, before, before, L0, L0, 0, 0, 0.0)
    avg = float(L0.mean())
    old_place = {(int(a), int(b)): int(c) for a, b, c in zip(uw, uk, wk)}
    if split:
        L = L0.copy()
        nw, nk, nwk, nl = [], [], [], []
        for i in range(p.shape[0]):
            mine = uw == i
            # parts of at most half the average worker load (at most P of them): fine enough for
            # Algorithm 1 to pack; a workset no heavier than the average is not split
            k_new = min(n_workers, max(1, math.ceil(2 * ld[i] / avg))) if avg > 0 and ld[i] > avg else 1
            cur = wk[mine]
            if k_new == cur.shape[0]:
                for a, b, c in zip(uk[mine], cur, ul[mine]):
                    nw.append(i)
                    nk.append(int(a))
                    nwk.append(int(b))
                    nl.append(float(c))
                continue
            np.subtract.at(L, cur, ul[mine])
            first = int(cur[0])
            chosen = [first]
            share = ld[i] / k_new
            L[first] += share
            for _ in range(1, k_new):
                cand = [w for w in np.argsort(L, kind="stable").tolist() if w not in chosen]
                chosen.append(int(cand[0]))
                L[cand[0]] += share
            for k, w in enumerate(chosen):
                nw.append(i)
                nk.append(k)
                nwk.append(w)
                nl.append(share)
        uw, uk = np.asarray(nw, np.int64), np.asarray(nk, np.int64)
        wk, ul = np.asarray(nwk, np.int64), np.asarray(nl, np.float64)
    bal = balance_worksets(ul, wk, n_workers, size_bytes=sz[uw], migration_factor=migration_factor, trigger=trigger)
    if split:
        # Algorithm 1 moves one unit at a time and stops when no single move helps; with the
        # parts of split worksets a full longest-processing-time-first placement packs them
        # better: take it when its most loaded worker is lighter
        lpt = assign_worksets_greedy(ul, n_workers)
        if worker_loads(ul, lpt, n_workers).max() < worker_loads(ul, bal.worker, n_workers).max() * (1 - 1e-9):
            bal = BalanceResult(lpt, bal.moved, bal.pinned, True, bal.imbalance_before,
                                imbalance(worker_loads(ul, lpt, n_workers)))
    wk = bal.worker
    L1 = worker_loads(ul, wk, n_workers)
    parts = np.bincount(uw, minlength=p.shape[0])[uw]
    migrated = sum(float(sz[a]) for a, b, c in zip(uw.tolist(), uk.tolist(), wk.tolist())
                   if old_place.get((a, b)) != c)
    moved = sum(1 for a, b, c in zip(uw.tolist(), uk.tolist(), wk.tolist()) if old_place.get((a, b)) != c)
    # keep what the previous assignment says about worksets without load now
    now = {(int(p[i]), int(g[i])) for i in range(p.shape[0])}
    keep = np.array([(a, b) not in now for a, b in zip(prev.partition.tolist(), prev.workset_id.tolist())], bool)
    keep = keep if keep.size else np.zeros(0, bool)
    new = Assignment.from_arrays(
        np.concatenate([prev.partition[keep], p[uw]]), np.concatenate([prev.workset_id[keep], g[uw]]),
        np.concatenate([prev.part[keep], uk]), np.concatenate([prev.parts[keep], parts]),
        np.concatenate([prev.worker[keep], wk]))
    n_split = int(np.sum(np.bincount(uw, minlength=p.shape[0]) > 1))
    return RebalanceResult(new, True, before, imbalance(L1), L0, L1, int(moved), n_split, float(migrated))
