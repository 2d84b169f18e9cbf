"""Space partitioning (S3J Section 6) of simjoin.core.metric.partitioning."""

from __future__ import annotations

import numpy as np
import pytest

from simjoin.core.metric import (
    METRICS,
    pairwise,
    partition_bounds,
    random_centroids,
    routes_outer,
    space_partition,
)


def test_random_centroids_seeded_uniform() -> None:
    a = random_centroids(5, 3)
    assert a.shape == (5, 3)
    assert np.array_equal(a, random_centroids(5, 3, seed=42))
    assert not np.array_equal(a, random_centroids(5, 3, seed=1))
    assert (np.abs(a) <= 1).all()
    with pytest.raises(ValueError, match="centroids"):
        random_centroids(0, 3)


def test_routes_outer_is_one_way_for_every_pair() -> None:
    P = 9
    h, g = np.meshgrid(np.arange(P), np.arange(P), indexing="ij")
    r = routes_outer(h, g)
    off = h != g
    # exactly one direction per unordered pair of partitions
    assert np.array_equal((r ^ r.T)[off], np.ones(off.sum(), bool))
    # the rule as written in the paper's code
    assert routes_outer(0, 2) and not routes_outer(2, 0)
    assert routes_outer(1, 0) and not routes_outer(0, 1)


@pytest.mark.parametrize("metric", METRICS)
def test_space_partition_home_and_criterion1(metric: str) -> None:
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, size=(400, 3))
    C = random_centroids(6, 3)
    t = 0.1
    sp = space_partition(X, C, metric, t)
    b = partition_bounds(metric, t, 3)
    D = pairwise(b.space, X, C)
    assert np.array_equal(sp.home, D.argmin(axis=1))
    # rows sorted by (partition, record); one home row per record
    key = sp.partition * len(X) + sp.record
    assert np.all(np.diff(key) > 0)
    assert np.array_equal(np.sort(sp.record[~sp.is_outer]), np.arange(len(X)))
    assert np.array_equal(sp.partition[~sp.is_outer], sp.home[sp.record[~sp.is_outer]])
    # outer copies: Criterion 1 (widened) and one-way routing
    r, p = sp.record[sp.is_outer], sp.partition[sp.is_outer]
    dmin = D.min(axis=1)
    assert b.criterion1(D[r, p], dmin[r]).all()
    assert routes_outer(sp.home[r], p).all()
    # every record satisfying the nominal criterion + routing is copied
    nominal = (dmin[:, None] + 2 * b.tau >= D) & routes_outer(sp.home[:, None], np.arange(6)[None, :])
    nominal[np.arange(len(X)), sp.home] = False
    got = np.zeros_like(nominal)
    got[r, p] = True
    assert not (nominal & ~got).any()
    assert sp.duplication_ratio == pytest.approx(len(sp.record) / len(X))
    assert sp.copies_per_record().sum() == len(sp.record)


def test_space_partition_exact_criterion1_ties_are_copied() -> None:
    # Centroids and records on a dyadic grid: distances are exact, d_i == d_min + 2t exactly.
    C = np.array([[0.0, 0.0], [1.0, 0.0]])
    t = 0.25
    X = np.array([[0.25, 0.0], [0.5, 0.0], [0.75, 0.0], [0.125, 0.0]])
    sp = space_partition(X, C, "euclidean", t)
    # record 0: d1 = d0 + 2t exactly, but copies never go 0 -> 1 (0 < 1 XOR 0 + 1 odd is False)
    assert not routes_outer(0, 1) and routes_outer(1, 0)
    copies = {(int(r), int(p)) for r, p in zip(sp.record[sp.is_outer], sp.partition[sp.is_outer])}
    # record 2 (home 1): d1 = .25, d0 = .75 = d1 + 2t -> copied to partition 0
    assert (2, 0) in copies
    # record 1 is a tie (home 0): copies go 0 -> 1 never; record 3 is too far
    assert (3, 0) not in copies and (0, 1) not in copies
