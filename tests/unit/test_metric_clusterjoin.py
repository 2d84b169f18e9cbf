"""ClusterJoin baseline (S3J Section 9.4) against brute force and the authors' reference stream."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simjoin.core.metric import (
    METRICS,
    brute_force_join,
    clusterjoin_window,
    pairwise,
    virtual_partition_workers,
)

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "s3j"


def _data(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-1, 1, size=(5, dim))
    k = n // 2
    X = np.vstack(
        [
            rng.uniform(-1, 1, size=(n - k, dim)),
            centers[rng.integers(0, 5, k)] + rng.normal(0, 0.03, (k, dim)),
        ]
    )
    return X[rng.permutation(n)]


def _threshold(metric: str, X: np.ndarray, q: float) -> float:
    v = pairwise(metric, X, X)[np.triu_indices(len(X), 1)]
    return float(np.quantile(v, q, method="lower"))


@pytest.mark.parametrize("dim", [2, 10, 50])
@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("inclusive", [False, True])
@pytest.mark.parametrize("two_stream", [False, True])
def test_clusterjoin_equals_brute_force(dim: int, metric: str, inclusive: bool, two_stream: bool) -> None:
    seed = 3 * dim + METRICS.index(metric)
    X = _data(300, dim, seed)
    ids = np.random.default_rng(seed).permutation(5000)[: len(X)].astype(np.int64)
    side = (np.arange(len(X)) % 2).astype(np.int8) if two_stream else None
    t = _threshold(metric, X, 0.04)
    L0, R0, D0 = brute_force_join(X, ids, side, metric, t, inclusive)
    for n_virtual in (1, 7, 500):
        res = clusterjoin_window(
            X, ids, side, metric, t, inclusive, n_workers=3, n_virtual=n_virtual, seed=seed
        )
        assert np.array_equal(res.left_id, L0) and np.array_equal(res.right_id, R0)
        assert np.array_equal(res.distance, D0)
        s = res.stats
        assert s.result_pairs == len(L0) and s.shortcut_pairs == 0
        assert s.distance_computations >= s.result_pairs
        assert s.copies == len(res.copies.record)
        assert s.duplication_ratio == pytest.approx(len(res.copies.record) / len(X))
        assert np.array_equal(s.worker_load, s.worker_computations.astype(float))


@pytest.mark.parametrize("inclusive", [False, True])
def test_clusterjoin_grid_boundaries(inclusive: bool) -> None:
    g = np.arange(-1, 1.0001, 0.125)
    X = np.array([(a, b) for a in g for b in g])
    ids = np.arange(len(X), dtype=np.int64)
    for t in (0.125, 0.25, 0.5):
        L0, R0, _ = brute_force_join(X, ids, None, "euclidean", t, inclusive)
        res = clusterjoin_window(X, ids, None, "euclidean", t, inclusive, n_workers=4, n_virtual=50)
        assert np.array_equal(res.left_id, L0) and np.array_equal(res.right_id, R0)


def test_clusterjoin_authors_reference_stream() -> None:
    ids, X = [], []
    for line in (DATA / "1K_2D_Array_Stream_v2.txt").read_text().splitlines():
        if line.strip():
            _, rid, vec = line.split(",", 2)
            ids.append(int(rid))
            X.append([float(v) for v in vec.strip()[1:-1].split(",")])
    gt = set()
    for line in (DATA / "1K_2D_Array_Stream_v2GroundTruth0_05.txt").read_text().splitlines():
        if line.strip():
            a, b = map(int, line.split(","))
            gt.add((min(a, b), max(a, b)))
    res = clusterjoin_window(np.array(X), np.array(ids), None, "angular", 0.05, False, n_workers=5)
    got = list(zip(res.left_id.tolist(), res.right_id.tolist()))
    assert len(got) == len(set(got)) == 26_263
    assert set(got) == gt


def test_virtual_partitions_dealt_round_robin() -> None:
    assert virtual_partition_workers(7, 3).tolist() == [0, 1, 2, 0, 1, 2, 0]
    with pytest.raises(ValueError):
        virtual_partition_workers(0, 3)
