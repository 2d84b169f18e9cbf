"""S3J join (Section 7.7) against brute force: exact, duplicate-free, bit-for-bit distances."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from simjoin.core.metric import (
    METRICS,
    CentroidState,
    brute_force_join,
    brute_force_join_windows,
    join_worksets,
    paired,
    pairwise,
    s3j_join_window,
    s3j_join_windows,
    workset_load,
)

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "s3j"


def load_reference_stream() -> tuple[np.ndarray, np.ndarray, set[tuple[int, int]]]:
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
    return np.array(X), np.array(ids, dtype=np.int64), gt


def mixed_data(n: int, dim: int, seed: int) -> np.ndarray:
    """Half uniform U[-1,1]^d, half tight clusters (so inner sets and shortcuts occur)."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-1, 1, size=(6, dim))
    k = n // 2
    clustered = centers[rng.integers(0, 6, size=k)] + rng.normal(0, 0.03, size=(k, dim))
    X = np.vstack([rng.uniform(-1, 1, size=(n - k, dim)), clustered])
    return X[rng.permutation(n)]


def pick_threshold(metric: str, X: np.ndarray, q: float) -> float:
    """A threshold equal to an actual pair distance (so strict vs inclusive differ)."""
    D = pairwise(metric, X, X)
    v = D[np.triu_indices(len(X), 1)]
    t = float(np.quantile(v, q, method="lower"))
    hi = {"angular": 1.0, "cosine": 2.0}.get(metric, math.inf)
    return min(max(t, 1e-6), hi)


def assert_same_as_brute_force(X, ids, side, metric, t, inclusive, **kw) -> object:  # type: ignore[no-untyped-def]
    L0, R0, D0 = brute_force_join(X, ids, side, metric, t, inclusive)
    res = s3j_join_window(X, ids, side, metric, t, inclusive, exact_distances=True, **kw)
    assert np.array_equal(res.left_id, L0) and np.array_equal(res.right_id, R0), (
        f"{len(res.left_id)} pairs vs brute force {len(L0)}"
    )
    assert np.array_equal(res.distance, D0)  # bit for bit, same kernel
    if side is None:
        assert (res.left_id < res.right_id).all()
    # the default (no distances for the shortcut) gives the same pairs
    res2 = s3j_join_window(X, ids, side, metric, t, inclusive, **kw)
    assert np.array_equal(res2.left_id, L0) and np.array_equal(res2.right_id, R0)
    nan = np.isnan(res2.distance)
    assert nan.sum() == res2.stats.shortcut_pairs
    assert np.array_equal(res2.distance[~nan], D0[~nan])
    return res


@pytest.mark.parametrize("dim", [2, 10, 50])
@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("inclusive", [False, True])
@pytest.mark.parametrize("two_stream", [False, True])
def test_s3j_equals_brute_force_random(dim: int, metric: str, inclusive: bool, two_stream: bool) -> None:
    seed = dim * 7 + METRICS.index(metric)
    X = mixed_data(360, dim, seed)
    ids = np.random.default_rng(seed).permutation(10_000)[: len(X)]
    side = (np.arange(len(X)) % 3 == 0).astype(np.int8) if two_stream else None
    for q in (0.01, 0.08):
        t = pick_threshold(metric, X, q)
        res = assert_same_as_brute_force(X, ids, side, metric, t, inclusive, n_workers=4, seed=seed)
        assert res.stats.result_pairs > 0


@pytest.mark.parametrize("inclusive", [False, True])
@pytest.mark.parametrize("two_stream", [False, True])
@pytest.mark.parametrize("centroids", ["grid", "random"])
def test_euclidean_exact_boundaries_on_grid(inclusive: bool, two_stream: bool, centroids: str) -> None:
    # Dyadic grid with spacing t/2: pair distances and distances to the (grid) space and workset
    # centroids are exactly t/2, t, 2t, ... - the boundaries of inner, outlier and outer sets.
    g = np.arange(-1, 1.0001, 0.125)
    X = np.array([(a, b) for a in g for b in g])
    ids = np.arange(len(X), dtype=np.int64)
    side = (ids % 2).astype(np.int8) if two_stream else None
    C = np.array([[0.0, 0.0], [0.5, 0.0], [-0.5, 0.5], [0.25, -0.75], [1.0, 1.0]])
    kw = {"space_centroids": C} if centroids == "grid" else {}
    for t in (0.25, 0.5):
        res = assert_same_as_brute_force(X, ids, side, "euclidean", t, inclusive, n_workers=5, **kw)
        d = pairwise("euclidean", X, X)
        assert (d == t).any()  # boundary pairs exist ...
        n_bound = int(np.triu(d == t, 1).sum())
        assert n_bound > 0
        # records exactly t/2 from a workset centroid are outliers (strictly-inside rule), so
        # with spacing t/2 only t = 0.5 (spacing t/4) has inner x inner shortcut pairs
        assert (res.stats.shortcut_pairs > 0) == (t == 0.5)


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("inclusive", [False, True])
@pytest.mark.parametrize("dim", [2, 10])
def test_points_exactly_half_t_around_a_workset_centroid(metric: str, inclusive: bool, dim: int) -> None:
    # The first record opens a workset; the next ones sit exactly t/2 from it on opposite sides,
    # so they are exactly t apart: a strict join must not emit them via the inner shortcut.
    t = 0.25
    c = np.zeros(dim)
    c[0] = 1.0
    pts = [c]
    for k in range(1, dim):
        for sgn in (1.0, -1.0):
            v = c.copy()
            if metric == "euclidean":
                v[k] = sgn * t / 2
            else:  # rotate by angle (t/2) * pi (angular) towards +-e_k
                half = t / 2 if metric == "angular" else math.acos(1 - t) / math.pi / 2
                v[0], v[k] = math.cos(half * math.pi), sgn * math.sin(half * math.pi)
            pts.append(v)
    X = np.array(pts)
    ids = np.arange(len(X), dtype=np.int64)
    C = np.array([c, -c])
    res = assert_same_as_brute_force(X, ids, None, metric, t, inclusive, n_workers=2, space_centroids=C)
    got = set(zip(res.left_id.tolist(), res.right_id.tolist()))
    assert {(0, k) for k in range(1, len(X))} <= got  # every point is t/2 from the centroid
    if metric == "euclidean":  # 0.125 - (-0.125) = t exactly: only the inclusive join has it
        assert ((1, 2) in got) == inclusive


def _rounding_adversarial_triple(metric: str, inclusive: bool) -> tuple[np.ndarray, float]:
    """Collinear c, r, s with r-c and s-r at t and s-c at 2t, where rounding breaks the
    triangle inequality: computed d(c, r) <= t, d(r, s) matches, but d(c, s) > 2t.

    Without the rounding slack in the bounds, s would miss the outer set of c's workset (and
    the outer partition of c's space partition) and the pair (r, s) would be lost.
    """
    rng = np.random.default_rng(99)
    n = 200_000
    t = 0.1 if metric == "euclidean" else 0.05
    if metric == "euclidean":
        u = rng.normal(size=(n, 2))
        u /= np.linalg.norm(u, axis=1, keepdims=True)
        c = rng.uniform(-1, 1, size=(n, 2))
        tri = [c, c + u * t, c + 2 * u * t]
    else:
        a0 = rng.uniform(0, 2 * np.pi, size=n)
        th = t * np.pi if metric == "angular" else math.acos(1 - t)
        tri = [np.c_[np.cos(a0 + k * th), np.sin(a0 + k * th)] for k in range(3)]
    space = "angular" if metric == "cosine" else metric
    tp = math.acos(1 - t) / math.pi if metric == "cosine" else t
    d01, d02, d12 = (paired(space, tri[a], tri[b]) for a, b in ((0, 1), (0, 2), (1, 2)))
    m12 = paired(metric, tri[1], tri[2])
    ok = (d01 <= tp) & (d01 <= d12) & (d02 > 2 * tp) & ((m12 <= t) if inclusive else (m12 < t))
    k = int(np.flatnonzero(ok)[0])
    return np.array([tri[0][k], tri[1][k], tri[2][k]]), t


# A strict euclidean triple does not occur (computed euclidean distances are too accurate).
@pytest.mark.parametrize(
    "metric,inclusive",
    [("angular", False), ("angular", True), ("cosine", False), ("cosine", True), ("euclidean", True)],
)
def test_rounding_slack_keeps_pairs(metric: str, inclusive: bool) -> None:
    X, t = _rounding_adversarial_triple(metric, inclusive)
    ids = np.arange(3, dtype=np.int64)
    # one partition: worksets (c opens one, r is its outlier/inner, s opens another)
    res = assert_same_as_brute_force(X, ids, None, metric, t, inclusive, n_workers=1)
    assert (1, 2) in set(zip(res.left_id.tolist(), res.right_id.tolist()))
    # two partitions centred on c and s: r is homed with c, s must be copied there (Criterion 1)
    res = assert_same_as_brute_force(
        X, ids, None, metric, t, inclusive, n_workers=2, space_centroids=X[[0, 2]]
    )
    assert (1, 2) in set(zip(res.left_id.tolist(), res.right_id.tolist()))
    assert_same_as_brute_force(X, ids, np.array([0, 0, 1], np.int8), metric, t, inclusive, n_workers=1)


@pytest.mark.parametrize("inclusive", [False, True])
def test_euclidean_boundaries_on_axes_10d(inclusive: bool) -> None:
    dim = 10
    steps = np.arange(-8, 9) * 0.125
    pts = [np.zeros(dim)]
    for k in range(dim):
        for s in steps:
            v = np.zeros(dim)
            v[k] = s
            pts.append(v)
    X = np.unique(np.array(pts), axis=0)
    ids = np.arange(len(X), dtype=np.int64)
    C = np.zeros((3, dim))
    C[1, 0] = 0.5
    C[2, 1] = -0.25
    for t in (0.125, 0.25):
        assert_same_as_brute_force(X, ids, None, "euclidean", t, inclusive, n_workers=3, space_centroids=C)


@pytest.mark.parametrize("metric", ["angular", "cosine"])
@pytest.mark.parametrize("inclusive", [False, True])
@pytest.mark.parametrize("two_stream", [False, True])
def test_angular_cosine_boundaries(metric: str, inclusive: bool, two_stream: bool) -> None:
    # Directions at multiples of pi/16 with different lengths (identical directions -> distance ~0).
    ang = np.arange(32) * np.pi / 16
    X = np.vstack([r * np.c_[np.cos(ang), np.sin(ang)] for r in (1.0, 2.0, 0.5)])
    X = np.vstack([X, [[1, 0], [0, 1], [-1, 0], [0, -1], [1, 1], [-1, 1]]])
    ids = np.arange(len(X), dtype=np.int64)
    side = (ids % 2).astype(np.int8) if two_stream else None
    ts = (0.0625, 0.125, 0.25, 0.5) if metric == "angular" else (1 - math.cos(math.pi / 8), 1.0, 1.5)
    for t in ts:
        for n_workers in (1, 5):
            assert_same_as_brute_force(X, ids, side, metric, t, inclusive, n_workers=n_workers)


@pytest.mark.parametrize("metric", METRICS)
def test_duplicates_and_identical_vectors(metric: str) -> None:
    rng = np.random.default_rng(2)
    base = rng.uniform(-1, 1, size=(60, 3))
    X = np.vstack([base, base, base, base[:10] * 3.0])  # exact copies and scaled copies
    ids = rng.permutation(len(X)).astype(np.int64)
    for side in (None, (np.arange(len(X)) % 2).astype(np.int8)):
        for inclusive in (False, True):
            res = assert_same_as_brute_force(X, ids, side, metric, 0.05, inclusive, n_workers=3)
            if side is None:
                assert res.stats.result_pairs >= 3 * 60


def test_authors_reference_stream_self_join() -> None:
    X, ids, gt = load_reference_stream()
    assert len(X) == 1000 and len(gt) == 26_263
    res = s3j_join_window(X, ids, None, "angular", 0.05, False, n_workers=5)
    got = list(zip(res.left_id.tolist(), res.right_id.tolist()))
    assert len(got) == len(set(got)) == 26_263
    assert set(got) == gt
    s = res.stats
    assert s.result_pairs == 26_263
    assert s.shortcut_pairs > 0 and s.comparisons_ratio < 2.5
    assert s.distance_computations == s.worker_computations.sum()


def test_rows_join_per_worker_independently() -> None:
    """What the Spark layer does: route rows by worker, shuffle, join each worker's rows alone."""
    rng = np.random.default_rng(4)
    X = mixed_data(500, 4, 4)
    ids = np.arange(len(X), dtype=np.int64) * 3 + 1
    side = (rng.random(len(X)) < 0.5).astype(np.int8)
    t = pick_threshold("euclidean", X, 0.03)
    res = s3j_join_window(X, ids, side, "euclidean", t, n_workers=4)
    rows = res.copies.rows
    perm = rng.permutation(len(rows))
    pairs = set()
    total_comp = 0
    for w in range(4):
        sel = perm[rows.worker[perm] == w]
        r = rows.record[sel]
        jr = join_worksets(
            X[r],
            ids[r],
            rows.role[sel],
            rows.partition[sel],
            rows.workset_id[sel],
            "euclidean",
            t,
            side=side[r],
        )
        new = set(zip(jr.left_id.tolist(), jr.right_id.tolist()))
        assert not (new & pairs)
        pairs |= new
        total_comp += int(jr.computations.sum())
        assert total_comp >= 0
    assert pairs == set(zip(res.left_id.tolist(), res.right_id.tolist()))
    assert total_comp == res.stats.distance_computations


def test_stats_consistency() -> None:
    X = mixed_data(600, 2, 9)
    ids = np.arange(len(X), dtype=np.int64)
    res = s3j_join_window(X, ids, None, "angular", 0.03, n_workers=5)
    s = res.stats
    assert s.result_pairs == len(res.left_id)
    assert s.copies == len(res.copies.rows) == s.worker_rows.sum()
    assert s.n_inner + s.n_outlier == len(X)  # one home row per record
    assert s.duplication_ratio == pytest.approx(s.copies / len(X))
    assert s.space_duplication_ratio == pytest.approx(res.copies.space.duplication_ratio)
    assert s.comparisons_ratio == pytest.approx(s.distance_computations / s.result_pairs)
    assert s.shortcut_pairs == s.worker_shortcut_pairs.sum()
    assert s.result_pairs == s.worker_result_pairs.sum()
    # self-join with cleared state: the paper's load formula counts exactly the computations
    assert np.array_equal(s.worker_load, s.worker_computations.astype(float))
    assert s.n_new_worksets == len(res.centroid_state) == s.n_worksets
    d = s.to_dict()
    assert d["result_pairs"] == s.result_pairs and d["algorithm"] == "s3j"
    assert set(s.per_worker()) >= {"worker", "load", "distance_computations", "inner", "outlier", "outer"}
    # zero results: the ratio reports the computations
    far = np.array([[0.0, 0.0], [10.0, 0.0], [20.0, 0.0]])
    r0 = s3j_join_window(far, np.arange(3), None, "euclidean", 5.5, n_workers=2)
    assert r0.stats.result_pairs == 0
    assert r0.stats.comparisons_ratio == float(r0.stats.distance_computations)
    empty = s3j_join_window(np.zeros((0, 2)), np.zeros(0), None, "euclidean", 1.0)
    assert len(empty.left_id) == 0 and empty.stats.comparisons_ratio == 0.0


def test_workset_load_matches_join_computations_per_workset() -> None:
    X = mixed_data(400, 3, 12)
    ids = np.arange(len(X), dtype=np.int64)
    res = s3j_join_window(X, ids, None, "euclidean", 0.2, n_workers=3)
    rows = res.copies.rows
    jr = join_worksets(
        X[rows.record], ids[rows.record], rows.role, rows.partition, rows.workset_id, "euclidean", 0.2
    )
    assert np.array_equal(workset_load(jr.n_inner, jr.n_outlier, jr.n_outer), jr.computations.astype(float))


@pytest.mark.parametrize("two_stream", [False, True])
def test_multi_window_with_state(two_stream: bool) -> None:
    rng = np.random.default_rng(21)
    X = mixed_data(800, 2, 21)
    ids = np.arange(len(X), dtype=np.int64)
    window = np.sort(rng.integers(0, 4, size=len(X)))
    side = (rng.random(len(X)) < 0.5).astype(np.int8) if two_stream else None
    t = 0.06
    mw = s3j_join_windows(X, ids, window, side, "euclidean", t, n_workers=3)
    W0, L0, R0, _ = brute_force_join_windows(X, ids, window, side, "euclidean", t)
    got = sorted(zip(mw.window.tolist(), mw.left_id.tolist(), mw.right_id.tolist()))
    assert got == sorted(zip(W0.tolist(), L0.tolist(), R0.tolist()))
    # never a pair across windows
    assert all(window[a] == window[b] == w for w, a, b in got)
    # the state grows monotonically and is reused (later windows open fewer worksets per record)
    assert len(mw.stats) == 4
    assert len(mw.centroid_state) == sum(s.n_new_worksets for s in mw.stats)
    # state passed in explicitly: same pairs, continuing ids
    sel = window == 3
    r_state = s3j_join_window(
        X[sel],
        ids[sel],
        None if side is None else side[sel],
        "euclidean",
        t,
        n_workers=3,
        centroid_state=mw.centroid_state,
    )
    r_fresh = s3j_join_window(
        X[sel], ids[sel], None if side is None else side[sel], "euclidean", t, n_workers=3
    )
    assert np.array_equal(r_state.left_id, r_fresh.left_id) and np.array_equal(
        r_state.right_id, r_fresh.right_id
    )


def test_rebalanced_state_routes_worksets_to_other_workers() -> None:
    X = mixed_data(500, 2, 30)
    ids = np.arange(len(X), dtype=np.int64)
    first = s3j_join_window(X, ids, None, "euclidean", 0.1, n_workers=3)
    st = first.centroid_state
    moved = st.with_workers((st.worker + 1) % 3)
    again = s3j_join_window(X, ids, None, "euclidean", 0.1, n_workers=3, centroid_state=moved)
    rows = again.copies.rows
    assert np.array_equal(rows.worker, moved.lookup_worker(rows.partition, rows.workset_id))
    assert np.array_equal(again.left_id, first.left_id) and np.array_equal(again.right_id, first.right_id)


def test_input_errors() -> None:
    X = np.random.default_rng(0).uniform(-1, 1, size=(10, 2))
    ids = np.arange(10)
    with pytest.raises(ValueError, match="side must be 0"):
        s3j_join_window(X, ids, np.full(10, 2), "angular", 0.1)
    with pytest.raises(ValueError, match="ids has 9 entries"):
        s3j_join_window(X, ids[:9], None, "angular", 0.1)
    with pytest.raises(ValueError, match="n_workers"):
        s3j_join_window(X, ids, None, "angular", 0.1, n_workers=0)
    with pytest.raises(ValueError, match=r"t=1\.5"):
        s3j_join_window(X, ids, None, "angular", 1.5)
    with pytest.raises(ValueError, match="dimension"):
        s3j_join_window(
            X, ids, None, "angular", 0.1, centroid_state=CentroidState.from_arrays([0], [1], [[1, 0, 0]])
        )
    with pytest.raises(ValueError, match="worker 7"):
        s3j_join_window(
            X,
            ids,
            None,
            "angular",
            0.1,
            n_workers=2,
            centroid_state=CentroidState.from_arrays([0], [1], [[1.0, 0.0]], [7]),
        )
