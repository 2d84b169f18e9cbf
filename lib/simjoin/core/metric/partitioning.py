"""Space partitioning of S3J (Section 6) - also ClusterJoin's virtual partitioning.

Siachamis et al., DEBS'23, Section 2 (inner-outer paradigm, Definitions 1-2,
Criterion 1) and Section 6 (space partitions, random centroids, one-way outer
routing of 6.3):

* centroids: seeded random, coordinates U[-1, 1]^d (``random_centroids``; the
  authors' code uses seed 42). S3J takes one per worker, ClusterJoin V virtual
  ones. For angular/cosine only their direction matters, so they are not
  normalised.
* inner partition (home) of a record = its nearest centroid (Definition 1; ties
  go to the lowest index).
* outer copy to centroid i iff ``d_i <= d_min + 2t`` (Criterion 1) AND
  ``(home < i) XOR ((home + i) % 2 == 1)`` (``routes_outer``). For every pair of
  partitions {a, b} the second condition lets copies flow one way only, so a
  candidate pair is met in exactly one partition (Section 6.3).

Distances are taken in partition space (angular for cosine, see
``distance.partition_metric``), and Criterion 1 is widened by a rigorous rounding
slack (``PartitionBounds.criterion1``) so no pair is ever lost.

API: ``random_centroids(n, dim, seed=42) -> (n, dim)``;
``routes_outer(home, target) -> bool array``;
``space_partition(X, centroids, metric, t, inclusive=False) -> SpacePartitioning``
with row arrays ``record`` (index into X), ``partition``, ``is_outer`` sorted by
(partition, record) - i.e. in arrival order inside each partition when X is in
arrival order - plus ``home`` per record.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .distance import (
    DEFAULT_BLOCK_ELEMENTS,
    check_threshold,
    check_vectors,
    pairwise_blocks,
    partition_bounds,
)

__all__ = ["SpacePartitioning", "random_centroids", "routes_outer", "space_partition"]

IntArray = npt.NDArray[np.int64]


def random_centroids(n_centroids: int, dim: int, seed: int = 42) -> npt.NDArray[np.float64]:
    """``n_centroids`` seeded random centroids with coordinates U[-1, 1] (Section 6.2)."""
    if n_centroids < 1:
        raise ValueError(f"number of centroids must be >= 1, got {n_centroids}")
    if dim < 1:
        raise ValueError(f"dimension must be >= 1, got {dim}")
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.0, 1.0, size=(int(n_centroids), int(dim)))


def routes_outer(home: npt.ArrayLike, target: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """One-way outer routing of Section 6.3: may a record homed at ``home`` be copied to ``target``?

    ``(home < target) XOR ((home + target) % 2 == 1)``; for home != target exactly
    one of (home -> target) and (target -> home) is allowed.
    """
    h = np.asarray(home, dtype=np.int64)
    g = np.asarray(target, dtype=np.int64)
    return np.asarray((h < g) ^ ((h + g) % 2 == 1))


@dataclass(frozen=True)
class SpacePartitioning:
    """Result of space partitioning one window.

    record, partition, is_outer: one row per copy (the home row has is_outer False),
    sorted by (partition, record). home: the home partition of each input record.
    centroid_distance_computations: record-to-centroid distances evaluated.
    """

    record: IntArray
    partition: IntArray
    is_outer: npt.NDArray[np.bool_]
    home: IntArray
    n_partitions: int
    centroid_distance_computations: int

    @property
    def n_records(self) -> int:
        return int(self.home.shape[0])

    @property
    def n_outer(self) -> int:
        return int(self.is_outer.sum())

    @property
    def duplication_ratio(self) -> float:
        """Average number of partitions a record is sent to (home + outer copies)."""
        return float(self.record.shape[0]) / self.n_records if self.n_records else 0.0

    def copies_per_record(self) -> IntArray:
        return np.bincount(self.record, minlength=self.n_records).astype(np.int64)


def space_partition(
    X: npt.ArrayLike,
    centroids: npt.ArrayLike,
    metric: str,
    t: float,
    inclusive: bool = False,
    *,
    max_block_elements: int = DEFAULT_BLOCK_ELEMENTS,
) -> SpacePartitioning:
    """Assign every record to its home partition and to its Criterion-1 outer partitions."""
    t = check_threshold(metric, t)
    Xv = check_vectors(X, metric)
    C = check_vectors(centroids, metric, name="centroids")
    n, d = Xv.shape
    if C.shape[1] != d:
        raise ValueError(f"centroids have dimension {C.shape[1]}, records have {d}")
    P = C.shape[0]
    if P < 1:
        raise ValueError("at least one centroid is needed")
    bounds = partition_bounds(metric, t, d, inclusive)
    home = np.empty(n, dtype=np.int64)
    out_rec: list[IntArray] = []
    out_part: list[IntArray] = []
    cols = np.arange(P, dtype=np.int64)
    for s, D in pairwise_blocks(bounds.space, Xv, C, max_block_elements):
        h = np.argmin(D, axis=1)
        home[s : s + D.shape[0]] = h
        dmin = D[np.arange(D.shape[0]), h]
        mask = bounds.criterion1(D, dmin[:, None])
        mask &= routes_outer(h[:, None], cols[None, :])
        mask[np.arange(D.shape[0]), h] = False
        r, p = np.nonzero(mask)
        out_rec.append(r.astype(np.int64) + s)
        out_part.append(p.astype(np.int64))
    orec = np.concatenate(out_rec) if out_rec else np.zeros(0, np.int64)
    opart = np.concatenate(out_part) if out_part else np.zeros(0, np.int64)
    record = np.concatenate([np.arange(n, dtype=np.int64), orec])
    partition = np.concatenate([home, opart])
    is_outer = np.concatenate([np.zeros(n, bool), np.ones(orec.shape[0], bool)])
    order = np.lexsort((record, partition))
    return SpacePartitioning(
        record=record[order],
        partition=partition[order],
        is_outer=is_outer[order],
        home=home,
        n_partitions=int(P),
        centroid_distance_computations=int(n) * int(P),
    )
