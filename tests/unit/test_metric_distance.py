"""Distance kernels and float-safe bounds of the S3J core (simjoin.core.metric.distance)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simjoin.core.metric import (
    METRICS,
    check_metric,
    check_threshold,
    check_vectors,
    matches,
    paired,
    pairwise,
    pairwise_blocks,
    partition_bounds,
    partition_metric,
    partition_threshold,
)


def _naive(metric: str, A: np.ndarray, B: np.ndarray) -> np.ndarray:
    if metric == "euclidean":
        return np.linalg.norm(A[:, None, :] - B[None, :, :], axis=2)
    c = (A @ B.T) / np.outer(np.linalg.norm(A, axis=1), np.linalg.norm(B, axis=1))
    c = np.clip(c, -1.0, 1.0)
    return np.arccos(c) / np.pi if metric == "angular" else 1.0 - c


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("dim", [1, 2, 10, 50])
def test_pairwise_matches_numpy_and_is_bitwise_consistent(metric: str, dim: int) -> None:
    rng = np.random.default_rng(dim)
    A = rng.normal(size=(37, dim))
    B = rng.normal(size=(23, dim))
    D = pairwise(metric, A, B)
    np.testing.assert_allclose(D, _naive(metric, A, B), rtol=1e-9, atol=1e-7)
    # One kernel: symmetric, and pairwise / paired / blocks agree bit for bit.
    assert np.array_equal(pairwise(metric, B, A), D.T)
    k = min(len(A), len(B))
    assert np.array_equal(paired(metric, A[:k], B[:k]), np.diag(D[:k, :k]))
    blocks = np.vstack([blk for _, blk in pairwise_blocks(metric, A, B, max_elements=50)])
    assert np.array_equal(blocks, D)


def test_metric_ranges() -> None:
    rng = np.random.default_rng(0)
    A = rng.normal(size=(50, 3))
    assert pairwise("angular", A, A).max() <= 1.0
    assert pairwise("cosine", A, A).max() <= 2.0
    assert pairwise("angular", A, A).min() >= 0.0
    # antipodal and orthogonal vectors
    assert pairwise("angular", [[1.0, 0.0]], [[-1.0, 0.0]])[0, 0] == 1.0
    assert pairwise("cosine", [[1.0, 0.0]], [[0.0, 2.0]])[0, 0] == 1.0
    assert pairwise("euclidean", [[0.0, 0.0]], [[3.0, 4.0]])[0, 0] == 5.0


def test_check_metric_and_threshold_errors() -> None:
    assert check_metric("angular") == "angular"
    with pytest.raises(ValueError, match="unknown metric 'jaccard'"):
        check_metric("jaccard")
    assert check_threshold("angular", 1) == 1.0
    assert check_threshold("cosine", 2.0) == 2.0
    assert check_threshold("euclidean", 1e6) == 1e6
    for metric, bad, allowed in [
        ("angular", 1.5, "0 < t <= 1"),
        ("angular", 0.0, "0 < t <= 1"),
        ("cosine", 2.1, "0 < t <= 2"),
        ("cosine", -0.1, "0 < t <= 2"),
        ("euclidean", math.inf, "0 < t < inf"),
        ("euclidean", math.nan, "0 < t < inf"),
    ]:
        with pytest.raises(ValueError, match=f"t={bad!r}.*{metric}.*{allowed}"):
            check_threshold(metric, bad)
    with pytest.raises(ValueError, match="must be a number"):
        check_threshold("angular", "abc")  # type: ignore[arg-type]


def test_check_vectors_errors() -> None:
    with pytest.raises(ValueError, match="2-D"):
        check_vectors(np.zeros(3), "euclidean")
    with pytest.raises(ValueError, match="non-finite"):
        check_vectors([[1.0, np.nan]], "euclidean")
    with pytest.raises(ValueError, match="zero vector"):
        check_vectors([[1.0, 0.0], [0.0, 0.0]], "angular")
    assert check_vectors([[0.0, 0.0]], "euclidean").dtype == np.float64


def test_matches_strict_and_inclusive() -> None:
    d = np.array([0.1, 0.2, 0.3, np.nan])
    assert matches(d, 0.2).tolist() == [True, False, False, False]
    assert matches(d, 0.2, inclusive=True).tolist() == [True, True, False, False]


def test_partition_space_for_cosine() -> None:
    assert partition_metric("cosine") == "angular"
    assert partition_metric("euclidean") == "euclidean"
    # 1 - cos < t  <=>  angle < acos(1 - t)
    assert partition_threshold("cosine", 1.0) == pytest.approx(0.5)
    assert partition_threshold("cosine", 2.0) == pytest.approx(1.0)
    assert partition_threshold("angular", 0.3) == 0.3


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("t", [1e-3, 0.05, 0.4])
@pytest.mark.parametrize("dim", [2, 50])
def test_partition_bounds_are_conservative_and_tight(metric: str, t: float, dim: int) -> None:
    b = partition_bounds(metric, t, dim)
    tp = partition_threshold(metric, t)
    assert b.tau >= tp
    assert b.new_centroid_radius >= tp
    assert b.outer_radius >= 2 * tp
    assert b.inner_radius < tp / 2
    # slack is tiny compared to t
    assert b.tau - tp < 1e-6
    assert b.outer_radius - 2 * tp < 1e-5
    assert tp / 2 - b.inner_radius < 1e-5
    # Criterion 1 widened, never narrowed
    d_min = np.array([0.1, 0.2])
    assert b.criterion1(d_min + 2 * tp, d_min).all()
