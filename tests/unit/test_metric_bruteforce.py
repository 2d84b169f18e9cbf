"""Brute-force reference of the metric join (simjoin.core.metric.bruteforce) vs plain numpy."""

from __future__ import annotations

import numpy as np
import pytest

from simjoin.core.metric import METRICS, brute_force_join, brute_force_join_windows


def _numpy_pairs(metric, X, ids, side, t, inclusive):  # type: ignore[no-untyped-def]
    if metric == "euclidean":
        D = np.linalg.norm(X[:, None] - X[None], axis=2)
    else:
        c = np.clip((X @ X.T) / np.outer(np.linalg.norm(X, axis=1), np.linalg.norm(X, axis=1)), -1, 1)
        D = np.arccos(c) / np.pi if metric == "angular" else 1 - c
    ok = t >= D if inclusive else t > D
    out = set()
    for i, j in zip(*np.nonzero(ok)):
        if side is None and i < j:
            out.add((min(ids[i], ids[j]), max(ids[i], ids[j])))
        elif side is not None and side[i] == 0 and side[j] == 1:
            out.add((ids[i], ids[j]))
    return out, D


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("two_stream", [False, True])
def test_brute_force_matches_numpy(metric: str, two_stream: bool) -> None:
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, size=(150, 4))
    ids = rng.permutation(1000)[:150].astype(np.int64)
    side = (rng.random(150) < 0.4).astype(np.int8) if two_stream else None
    t = 0.3 if metric != "euclidean" else 0.6
    L, R, D = brute_force_join(X, ids, side, metric, t)
    ref, Dn = _numpy_pairs(metric, X, ids, side, t, False)
    got = set(zip(L.tolist(), R.tolist()))
    # numpy's BLAS rounding may differ at the very boundary only
    pos = {int(v): k for k, v in enumerate(ids)}
    sym = got ^ ref
    assert all(abs(Dn[pos[a], pos[b]] - t) < 1e-9 for a, b in sym)
    assert len(got) == len(L)  # duplicate-free
    assert np.all(np.diff(L) >= 0)  # sorted
    if not two_stream:
        assert (L < R).all()
    assert (t > D).all()


def test_brute_force_windows_never_cross() -> None:
    X = np.zeros((6, 2))
    X[:, 0] = np.arange(6) * 0.01
    ids = np.arange(6)
    win = np.array([0, 0, 0, 1, 1, 1])
    W, L, R, _ = brute_force_join_windows(X, ids, win, None, "euclidean", 1.0)
    assert sorted(zip(W.tolist(), L.tolist(), R.tolist())) == [
        (0, 0, 1),
        (0, 0, 2),
        (0, 1, 2),
        (1, 3, 4),
        (1, 3, 5),
        (1, 4, 5),
    ]
