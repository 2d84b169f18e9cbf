"""The plain equi-join the tests and the benchmark check Streaming HyperCube against."""

from __future__ import annotations

import numpy as np

__all__ = ["equi_pairs", "equi_counts"]


def equi_pairs(l_id: np.ndarray, l_key: np.ndarray, r_id: np.ndarray, r_key: np.ndarray,
               l_ts: np.ndarray | None = None, r_ts: np.ndarray | None = None,
               window_us: int = 0) -> set[tuple[int, int]]:
    """Every (left_id, right_id) with equal keys (and |ts_l - ts_r| < W with a window)."""
    out: set[tuple[int, int]] = set()
    by: dict[int, list[int]] = {}
    for j, k in enumerate(np.asarray(r_key).tolist()):
        by.setdefault(k, []).append(j)
    for i, k in enumerate(np.asarray(l_key).tolist()):
        for j in by.get(k, ()):
            if window_us > 0 and abs(int(l_ts[i]) - int(r_ts[j])) >= window_us:  # type: ignore[index]
                continue
            out.add((int(l_id[i]), int(r_id[j])))
    return out


def equi_counts(l_key: np.ndarray, r_key: np.ndarray) -> dict[int, int]:
    """|R(b)| * |S(b)| per key b (the whole-history join size per key)."""
    lk, lc = np.unique(np.asarray(l_key, np.int64), return_counts=True)
    rk, rc = np.unique(np.asarray(r_key, np.int64), return_counts=True)
    common, li, ri = np.intersect1d(lk, rk, return_indices=True)
    return {int(k): int(a) * int(b) for k, a, b in zip(common, lc[li], rc[ri], strict=True)}
