"""ClusterJoin baseline (Das Sarma et al., VLDB'14) as adapted in S3J's Section 9.4.

Siachamis et al., DEBS'23, Section 9.4: ClusterJoin follows the inner-outer
paradigm (Section 2) with V virtual partitions (500, as the original work
suggests) whose centroids are chosen like S3J's space-partition centroids
(seeded random, U[-1, 1]^d); the virtual partitions are dealt to the P workers
round-robin (``v % P``).

* home = nearest virtual centroid; outer copy to j iff ``d_j <= d_min + 2t``
  (Criterion 1, the generalized-hyperplane bound) with the one-way routing of
  Section 6.3, both from ``partitioning.space_partition`` - so a cross-partition
  pair is met in exactly one virtual partition;
* in each virtual partition: home x home (each unordered pair once) and
  home x outer are computed, outer x outer never. Every candidate pair costs a
  distance computation (no inner-set shortcut), verified by the same kernel
  as the brute force.

API: ``clusterjoin_window(X, ids, side, metric, t, inclusive=False,
n_workers=5, n_virtual=500, seed=42) -> ClusterJoinResult(left_id, right_id,
distance, stats, copies)`` with ``copies`` the ``SpacePartitioning`` over the
virtual partitions; ``virtual_partition_workers(n_virtual, n_workers)``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from .distance import check_threshold, check_vectors
from .join import check_ids_side, join_worksets
from .load import WindowStats
from .partitioning import SpacePartitioning, random_centroids, space_partition
from .worksets import OUTER, OUTLIER

__all__ = [
    "DEFAULT_VIRTUAL_PARTITIONS",
    "ClusterJoinResult",
    "clusterjoin_window",
    "virtual_partition_workers",
]

# ClusterJoin's suggested number of virtual partitions (S3J Section 9.4).
DEFAULT_VIRTUAL_PARTITIONS = 500

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def virtual_partition_workers(n_virtual: int, n_workers: int) -> IntArray:
    """Worker of each virtual partition: dealt round-robin, ``v % n_workers``."""
    if n_virtual < 1 or n_workers < 1:
        raise ValueError(f"need n_virtual >= 1 and n_workers >= 1, got {n_virtual}, {n_workers}")
    return np.arange(n_virtual, dtype=np.int64) % n_workers


class ClusterJoinResult(NamedTuple):
    left_id: IntArray
    right_id: IntArray
    distance: FloatArray
    stats: WindowStats
    copies: SpacePartitioning


def clusterjoin_window(
    X: npt.ArrayLike,
    ids: npt.ArrayLike,
    side: npt.ArrayLike | None,
    metric: str,
    t: float,
    inclusive: bool = False,
    n_workers: int = 5,
    n_virtual: int = DEFAULT_VIRTUAL_PARTITIONS,
    seed: int = 42,
) -> ClusterJoinResult:
    """ClusterJoin over one window: exact, duplicate-free, every candidate computed."""
    t = check_threshold(metric, t)
    Xv = check_vectors(X, metric)
    n, d = Xv.shape
    id_arr, sd = check_ids_side(n, ids, side)
    vworker = virtual_partition_workers(n_virtual, n_workers)
    space = space_partition(Xv, random_centroids(n_virtual, d, seed), metric, t, inclusive)
    row_worker = vworker[space.partition]
    # Home rows act as outliers (probe everything), outer copies as outer (probe homes only).
    role = np.where(space.is_outer, OUTER, OUTLIER).astype(np.int8)
    P = n_workers
    Ls, Rs, Ds = [], [], []
    w_comp = np.zeros(P, np.int64)
    w_res = np.zeros(P, np.int64)
    w_parts = np.zeros(P, np.int64)
    w_home = np.zeros(P, np.int64)
    w_outer = np.zeros(P, np.int64)
    for w in range(P):
        m = row_worker == w
        if not m.any():
            continue
        rec = space.record[m]
        jr = join_worksets(
            Xv[rec],
            id_arr[rec],
            role[m],
            np.zeros(rec.shape[0], np.int64),
            space.partition[m],
            metric,
            t,
            inclusive,
            side=None if sd is None else sd[rec],
            exact_distances=True,
        )
        Ls.append(jr.left_id)
        Rs.append(jr.right_id)
        Ds.append(jr.distance)
        w_comp[w] = jr.computations.sum()
        w_res[w] = jr.result_pairs.sum()
        w_parts[w] = jr.workset_id.shape[0]
        w_home[w] = int((~space.is_outer[m]).sum())
        w_outer[w] = int(space.is_outer[m].sum())
    z = np.zeros(0, np.int64)
    L = np.concatenate(Ls) if Ls else z
    R = np.concatenate(Rs) if Rs else z.copy()
    D = np.concatenate(Ds) if Ds else np.zeros(0)
    o = np.lexsort((R, L))
    L, R, D = L[o], R[o], D[o]
    stats = WindowStats(
        algorithm="clusterjoin",
        n_records=n,
        n_workers=P,
        space_copies=int(space.record.shape[0]),
        n_inner=n,
        n_outlier=0,
        n_outer=space.n_outer,
        n_worksets=int(w_parts.sum()),
        n_new_worksets=0,
        distance_computations=int(w_comp.sum()),
        shortcut_pairs=0,
        result_pairs=int(L.shape[0]),
        centroid_distance_computations=space.centroid_distance_computations,
        worker_rows=w_home + w_outer,
        worker_inner=w_home,
        worker_outlier=np.zeros(P, np.int64),
        worker_outer=w_outer,
        worker_worksets=w_parts,
        worker_computations=w_comp,
        worker_shortcut_pairs=np.zeros(P, np.int64),
        worker_result_pairs=w_res,
        worker_load=w_comp.astype(np.float64),
    )
    return ClusterJoinResult(L, R, D, stats, space)
