"""The compiled steps of numpy-only core modules (``membership``, ``hashing``), imported on their
first use so that importing those modules stays cheap for callers that never reach them.

They live at module level: numba caches a kernel defined inside a function (a closure) under a new
index entry in every process and compiles it again there (0.7 s per run for the membership lookup);
a module-level kernel is compiled once and then loaded from its cache.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from simjoin.core.hashing import _GOLDEN, _M1, _M2
from simjoin.core.inequality.kernels import lower_bound

__all__ = ["member", "mix_into"]


@njit(cache=True, nogil=True)
def member(groups: np.ndarray, scale: int, shift: int, ids: np.ndarray, keys: np.ndarray, offsets: np.ndarray,
           values: np.ndarray, lo: np.ndarray, bit_at: np.ndarray, bits: np.ndarray,
           out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``membership.member_of``'s pass: ``out[i] = True`` where ``(groups[i] * scale + shift, ids[i])`` is staged."""
    nk = keys.shape[0]
    last_g, k = groups[0] * scale + shift, -1
    for i in range(groups.shape[0]):
        g = groups[i] * scale + shift
        if k < 0 or g != last_g:  # the group's key: binary search among the few keys
            a = lower_bound(keys, 0, nk, g)
            k = a if a < nk and keys[a] == g else nk
            last_g = g
        if k == nk:
            continue
        x = ids[i]
        first, end = offsets[k], offsets[k + 1]
        if x < values[first] or x > values[end - 1]:
            continue
        if bit_at[k] >= 0:
            if bits[bit_at[k] + (x - lo[k])]:
                out[i] = True
            continue
        a = lower_bound(values, first, end, x)  # the id among the group's sorted ids
        if a < end and values[a] == x:
            out[i] = True


@njit(cache=True, nogil=True)
def mix_into(h: np.ndarray, k: np.ndarray) -> None:  # pragma: no cover - compiled
    """``hashing.mix_keys``' step: fold the uint64 column ``k`` into the running hashes ``h``."""
    s6, s2, s30, s27, s31 = np.uint64(6), np.uint64(2), np.uint64(30), np.uint64(27), np.uint64(31)
    for i in range(h.shape[0]):
        x = h[i]
        x = x ^ (k[i] + _GOLDEN + (x << s6) + (x >> s2))
        x = (x ^ (x >> s30)) * _M1
        x = (x ^ (x >> s27)) * _M2
        h[i] = x ^ (x >> s31)
