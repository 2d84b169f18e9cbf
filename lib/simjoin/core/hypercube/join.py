"""The per-task local join of Streaming HyperCube: a hash join of a micro-batch's new tuples
with the tuples the task holds (numba; never per-pair Python).

Input: the copies one worker received, each with its task, side (0 = R, 1 = S), key, id, ts
(microseconds) and whether it is new in this micro-batch. Copies are grouped by (task, key); in
a group R_new x S and R_old x S_new are the pairs (old x old pairs were reported before). With a
window W > 0 a pair also needs |ts_R - ts_S| < W: the S copies of a group are sorted by ts and
each R copy takes a binary-searched range, so counting never enumerates pairs. A pair's ``ts``
is the later of its two timestamps.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["local_join", "local_counts"]


def _order(task: np.ndarray, side: np.ndarray, key: np.ndarray, new: np.ndarray, ts: np.ndarray) -> np.ndarray:
    return np.lexsort((ts, new, side, key, task))


@njit(cache=True, nogil=True)
def _bounds(a: np.ndarray, lo: int, hi: int, x: int, upper: bool) -> int:
    while lo < hi:
        m = (lo + hi) >> 1
        if a[m] < x or (upper and a[m] == x):
            lo = m + 1
        else:
            hi = m
    return lo


@njit(cache=True, nogil=True)
def _walk(task, side, key, new, ts, ids, window, fill, out_l, out_r, out_k, out_ts, gkey, gcount):
    n = task.shape[0]
    total = 0
    ng = 0
    a = 0
    while a < n:
        b = a
        while b < n and task[b] == task[a] and key[b] == key[a]:
            b += 1
        m = a
        while m < b and side[m] == 0:
            m += 1
        rn = a
        while rn < m and new[rn] == 0:
            rn += 1
        sn = m
        while sn < b and new[sn] == 0:
            sn += 1
        cnt = 0
        for i in range(a, m):
            s_lo = m if i >= rn else sn  # an old R copy meets only new S copies
            lo1, hi1 = s_lo, sn  # old S part (empty for an old R copy)
            lo2, hi2 = sn, b
            if window > 0:
                t0 = ts[i] - window
                t1 = ts[i] + window
                lo1 = _bounds(ts, lo1, hi1, t0, True)
                hi1 = _bounds(ts, lo1, hi1, t1, False)
                lo2 = _bounds(ts, lo2, hi2, t0, True)
                hi2 = _bounds(ts, lo2, hi2, t1, False)
            c = max(0, hi1 - lo1) + max(0, hi2 - lo2)
            if fill:
                for lo, hi in ((lo1, hi1), (lo2, hi2)):
                    for j in range(lo, hi):
                        out_l[total] = ids[i]
                        out_r[total] = ids[j]
                        out_k[total] = key[i]
                        out_ts[total] = ts[i] if ts[i] > ts[j] else ts[j]
                        total += 1
            else:
                total += c
            cnt += c
        if cnt > 0 and gkey.shape[0] > 0:
            gkey[ng] = key[a]
            gcount[ng] = cnt
            ng += 1
        a = b
    return total, ng


def _prepare(task, side, key, new, ts, ids):
    o = _order(task, side, key, new, ts)
    return (np.ascontiguousarray(task[o], np.int64), np.ascontiguousarray(side[o], np.int64),
            np.ascontiguousarray(key[o], np.int64), np.ascontiguousarray(new[o], np.int64),
            np.ascontiguousarray(ts[o], np.int64), np.ascontiguousarray(ids[o], np.int64))


def local_join(task: np.ndarray, side: np.ndarray, key: np.ndarray, new: np.ndarray, ts: np.ndarray,
               ids: np.ndarray, window_us: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pairs (left_id, right_id, key, ts) that hold a new copy, from one worker's copies."""
    args = _prepare(task, side, key, new, ts, ids)
    e = np.zeros(0, np.int64)
    total, _ = _walk(*args, int(window_us), False, e, e, e, e, e, e)  # type: ignore[call-arg]
    out = [np.empty(total, np.int64) for _ in range(4)]
    _walk(*args, int(window_us), True, *out, e, e)  # type: ignore[call-arg]
    return out[0], out[1], out[2], out[3]


def local_counts(task: np.ndarray, side: np.ndarray, key: np.ndarray, new: np.ndarray, ts: np.ndarray,
                 ids: np.ndarray, window_us: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """New pairs per key (keys, counts) from one worker's copies, without enumerating them."""
    args = _prepare(task, side, key, new, ts, ids)
    n = args[0].shape[0]
    gk, gc = np.empty(n, np.int64), np.empty(n, np.int64)
    e = np.zeros(0, np.int64)
    _, ng = _walk(*args, int(window_us), False, e, e, e, e, gk, gc)  # type: ignore[call-arg]
    if ng == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    u, inv = np.unique(gk[:ng], return_inverse=True)
    return u, np.bincount(inv.ravel(), weights=gc[:ng], minlength=len(u)).astype(np.int64)
