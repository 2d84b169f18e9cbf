"""The sorted distinct values of a 1-D array, by sorting.

numpy 2.3+ finds ``np.unique(a)``'s values by hashing when it is asked for nothing else, and on
this machine's numpy (2.4) that is 6-70x slower than a sort for integer arrays: 0.73 s against
0.011 s for 1M distinct int64, 0.05 s against 0.009 s for 1M values of a 0/1 side column. Every
distinct-values call in simjoin goes through :func:`unique`; a test keeps ``np.unique(a)`` without
``return_*`` out of ``lib/`` and ``jobs/``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["unique"]


def unique(a: Any) -> np.ndarray:
    """``np.unique(a)`` (sorted distinct values, NaNs as one) for any array-like; sort-based for
    1-D integer, boolean and NaN-free float arrays."""
    x = np.asarray(a)
    if x.ndim != 1 or x.dtype.kind not in "iubf" or (x.dtype.kind == "f" and np.isnan(x).any()):
        return np.unique(x)
    if x.size == 0:
        return x.copy()
    s = np.sort(x)
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]
