"""The centroid index (pivot filtering) of simjoin.core.metric.worksets against brute force.

Pass 1 (home workset, Criterion 2) and pass 2 (outer sets) must return exactly what a scan
over every centroid returns - same homes, same computed home distances, same outer rows in
the same order - while evaluating no more distances. Cases: euclidean, angular and cosine,
d = 1..5, uniform data, grid points (ties), duplicate vectors, scaled copies (angular
distance 0), radii exactly equal to a computed distance, and centroids from earlier windows.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from simjoin.core.metric import (
    INNER,
    METRICS,
    OUTER,
    OUTLIER,
    formulate_partition_worksets,
    pairwise,
    partition_bounds,
)
from simjoin.core.metric.distance import METRIC_CODES, row_norms
from simjoin.core.metric.worksets import _NO_INDEX, _open_worksets, _outer_sets, _pivots

N_CASES = int(os.environ.get("SIMJOIN_PROPERTY_CASES", "60"))


def _data(rng: np.random.Generator, kind: str, n: int, d: int, metric: str) -> np.ndarray:
    if kind == "uniform":
        X = rng.uniform(-1, 1, (n, d))
    elif kind == "grid":  # ties and duplicates
        X = rng.integers(-3, 4, (n, d)).astype(np.float64) / 4
    elif kind == "duplicates":
        pool = rng.uniform(-1, 1, (max(2, n // 6), d))
        X = pool[rng.integers(0, pool.shape[0], n)]
    else:  # scaled copies: angular distance exactly 0 between different vectors
        pool = rng.integers(-2, 3, (max(2, n // 5), d)).astype(np.float64)
        X = pool[rng.integers(0, pool.shape[0], n)] * rng.choice([0.5, 1.0, 2.0, 4.0], (n, 1))
    if metric != "euclidean":
        X[~X.any(axis=1)] = 1.0
    return np.ascontiguousarray(X)


def _case(seed: int) -> tuple[str, int, str, np.ndarray, np.ndarray, float, np.ndarray | None, bool]:
    rng = np.random.default_rng(seed)
    metric = METRICS[seed % len(METRICS)]
    d = 1 + (seed // len(METRICS)) % 5
    kind = ("uniform", "grid", "duplicates", "scaled")[(seed // 15) % 4]
    n = int(rng.integers(60, 220))
    X = _data(rng, kind, n, d, metric)
    is_outer = rng.random(n) < 0.3
    D = pairwise(metric, X, X)
    pos = D[np.triu_indices(n, 1)]
    pos = pos[pos > 0]
    q = float(rng.choice([0.01, 0.03, 0.1]))
    t = float(np.quantile(pos, q, method="lower")) if pos.size else 0.5  # a computed distance: ties at t
    t = min(t, 1.0 if metric == "angular" else 2.0) if metric != "euclidean" else t
    C0 = _data(rng, kind, int(rng.integers(0, 12)), d, metric) if rng.random() < 0.5 else None
    return metric, d, kind, X, is_outer, t, C0, bool(rng.integers(0, 2))


def _brute_force(
    X: np.ndarray, is_outer: np.ndarray, metric: str, t: float, C0: np.ndarray | None, prune_outer: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Both passes written out: every record against every centroid.

    Returns (record, workset_id, role, new centroids, member radius, the scan's count).
    """
    d = X.shape[1]
    b = partition_bounds(metric, t, d)
    cents = [] if C0 is None else list(C0)
    k0 = len(cents)
    inner = np.flatnonzero(~is_outer)
    home, d_home, comps = [], [], 0
    for i in inner:
        if cents:
            dist = pairwise(b.space, X[i : i + 1], np.array(cents))[0]
            comps += len(cents)
            j = int(np.argmin(dist))  # first of the minima: the scan's tie rule
            if dist[j] <= b.new_centroid_radius:
                home.append(j)
                d_home.append(dist[j])
                continue
        cents.append(X[i])
        home.append(len(cents) - 1)
        d_home.append(0.0)
    K = len(cents)
    C = np.array(cents).reshape(K, d)
    h = np.array(home, dtype=np.int64)
    dh = np.array(d_home)
    m = np.full(K, -np.inf)
    np.maximum.at(m, h, dh)
    rad = np.asarray(b.outer_radius_for(m)) if prune_outer else np.full(K, b.outer_radius)
    act = np.isfinite(rad)
    lim = np.full(len(X), K)
    lim[inner] = h
    rec = [inner]
    ws = [h + 1]
    role = [np.where(dh <= b.inner_radius, INNER, OUTLIER)]
    if act.any() and len(X):
        Dc = pairwise(b.space, X, C)
        r, w = np.nonzero((rad[None, :] >= Dc) & act[None, :] & (np.arange(K)[None, :] < lim[:, None]))
        rec.append(r)
        ws.append(w + 1)
        role.append(np.full(r.shape[0], OUTER))
        comps += len(X) * int(act.sum())
    return np.concatenate(rec), np.concatenate(ws), np.concatenate(role), C[k0:], m, comps


@pytest.mark.parametrize("seed", range(N_CASES * 3))
def test_formulation_equals_brute_force_scan(seed: int) -> None:
    metric, d, kind, X, is_outer, t, C0, prune = _case(seed)
    ids0 = None if C0 is None else np.arange(1, len(C0) + 1)
    got = formulate_partition_worksets(X, is_outer, metric, t, workset_id=ids0, centroid=C0, prune_outer=prune)
    rec, ws, role, new_c, radius, comps = _brute_force(X, is_outer, metric, t, C0, prune)
    assert np.array_equal(got.record, rec)  # same rows, same order
    assert np.array_equal(got.member_radius, radius)  # same computed home distances
    assert np.array_equal(got.workset_id, ws)
    assert np.array_equal(got.role, role)
    assert np.array_equal(got.new_centroid, new_c)
    assert got.centroid_distance_computations <= comps, (metric, d, kind)


def _kernel_case(seed: int) -> tuple[int, np.ndarray, np.ndarray, float, float, float, str]:
    """Data, earlier centroids and radii that equal computed distances (ties at the radius)."""
    rng = np.random.default_rng(1000 + seed)
    metric = METRICS[seed % len(METRICS)]
    d = 1 + (seed // 3) % 5
    kind = ("grid", "duplicates", "scaled", "uniform")[(seed // 15) % 4]
    X = _data(rng, kind, int(rng.integers(30, 150)), d, metric)
    C0 = _data(rng, kind, int(rng.integers(0, 10)), d, metric)
    b = partition_bounds(metric, 0.1, d)
    D = pairwise(b.space, X, X)
    radius = float(rng.choice(D.ravel()))  # a computed distance: some pairs are exactly at it
    return METRIC_CODES[b.space], X, C0, radius, b.rel, b.abs, b.space


@pytest.mark.parametrize("seed", range(N_CASES * 2))
@pytest.mark.parametrize("scan_max", [0, 3])
def test_kernels_with_index_equal_the_scan(seed: int, scan_max: int) -> None:
    code, X, C0, radius, rel, ab, space = _kernel_case(seed)
    n, d = X.shape
    P = _pivots(d)
    m = P.shape[0]
    norms, n0 = row_norms(X), row_norms(C0)

    def pass1(smax: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray, np.ndarray]:
        PX, hx = np.full((n, m), np.nan), np.zeros(n, bool)
        PC0, hc = np.full((len(C0), m), np.nan), np.zeros(len(C0), bool)
        h, dh, new, c = _open_worksets(code, X, norms, C0, n0, radius, P, PX, hx, PC0, hc, rel, ab, smax)
        return h, dh, new, c, PX, hx

    h_s, dh_s, new_s, comps_s, _, _ = pass1(int(_NO_INDEX))
    h_i, dh_i, new_i, _, PX, hx = pass1(scan_max)
    assert np.array_equal(h_s, h_i) and np.array_equal(dh_s, dh_i) and np.array_equal(new_s, new_i)
    assert np.array_equal(np.isnan(PX).any(axis=1), ~hx)  # pivot distances filled in when computed
    if hx.any():
        assert np.array_equal(PX[hx], pairwise(space, X[hx], P))
    # The scan counts every centroid at every arrival.
    k_at = len(C0) + np.concatenate([[0], np.cumsum(np.isin(np.arange(n), new_s))[:-1]])
    assert comps_s == int(k_at.sum())

    # Pass 2 against the final centroids, radii picked among computed distances.
    rng = np.random.default_rng(seed)
    C = np.ascontiguousarray(np.concatenate([C0, X[new_s]]))
    K = len(C)
    Dc = pairwise(space, X, C)
    rad = rng.choice(Dc.ravel(), K) if K else np.zeros(0)
    rad[rng.random(K) < 0.2] = -np.inf  # worksets without members
    act = np.flatnonzero(np.isfinite(rad)).astype(np.int64)
    lim = np.where(rng.random(n) < 0.5, K, rng.integers(0, K + 1, n)).astype(np.int64)
    ref = np.nonzero((rad[None, act] >= Dc[:, act]) & (act[None, :] < lim[:, None]))
    crow = np.concatenate([np.full(len(C0), -1), new_s]).astype(np.int64)
    for smax in (int(_NO_INDEX), scan_max):
        PXc, hxc = PX.copy(), hx.copy()
        PC = np.full((K, m), np.nan)
        hc = np.zeros(K, bool)
        r, c, comps2 = _outer_sets(code, X, norms, C, row_norms(C), act, rad, lim, P, PXc, hxc, PC, hc, crow,
                                   rel, ab, smax)
        assert np.array_equal(r, ref[0]) and np.array_equal(c, act[ref[1]])
        if smax == _NO_INDEX:  # the scan: every active centroid below the row's limit
            assert comps2 == int((act[None, :] < lim[:, None]).sum())


@pytest.mark.parametrize("metric", METRICS)
def test_huge_and_tiny_norms_fall_back_to_the_scan(metric: str) -> None:
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, (200, 3))
    X[::7] *= 1e120 if metric == "euclidean" else 1e-120
    is_outer = rng.random(200) < 0.3
    t = 0.2
    got = formulate_partition_worksets(X, is_outer, metric, t)
    rec, ws, role, new_c, _, comps = _brute_force(X, is_outer, metric, t, None, True)
    assert got.centroid_distance_computations <= comps
    assert np.array_equal(got.record, rec) and np.array_equal(got.workset_id, ws) and np.array_equal(got.role, role)
    assert np.array_equal(got.new_centroid, new_c)


def test_index_saves_computations_on_many_worksets() -> None:
    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, (3000, 2))
    is_outer = rng.random(3000) < 0.4
    for metric, t in (("angular", 0.005), ("euclidean", 0.02), ("cosine", 1e-4)):
        got = formulate_partition_worksets(X, is_outer, metric, t)
        *_, comps = _brute_force(X, is_outer, metric, t, None, True)
        assert got.centroid_distance_computations < comps / 10, metric
