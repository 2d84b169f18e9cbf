"""Brute-force reference for the S3J metric-space join (Section 3, Definition 3).

Compares every pair of one window with the same scalar distance kernel as the
S3J and ClusterJoin joins (``distance._dist``), so results agree bit for bit.

API:

* ``brute_force_join(X, ids, side, metric, t, inclusive=False)
  -> (left_id, right_id, distance)`` sorted by (left, right). ``side`` None is
  a self-join ((smaller id, larger id), each unordered pair once), else 0/1 per
  record and pairs are (left id, right id).
* ``brute_force_join_windows(X, ids, window, side, metric, t, inclusive=False)
  -> (window, left_id, right_id, distance)``: pairs only inside a window.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

from simjoin.core.unique import unique

from .distance import METRIC_CODES, _dist, check_threshold, check_vectors, row_norms
from .join import check_ids_side

__all__ = ["brute_force_join", "brute_force_join_windows"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@njit(cache=True, nogil=True)
def _all_pairs(
    code: int,
    A: FloatArray,
    na: FloatArray,
    ida: IntArray,
    B: FloatArray,
    nb: FloatArray,
    idb: IntArray,
    tri: bool,
    t: float,
    inclusive: bool,
) -> tuple[IntArray, IntArray, FloatArray]:
    cap = 1024
    L = np.empty(cap, dtype=np.int64)
    R = np.empty(cap, dtype=np.int64)
    D = np.empty(cap, dtype=np.float64)
    n = 0
    for i in range(A.shape[0]):
        start = i + 1 if tri else 0
        for j in range(start, B.shape[0]):
            dd = _dist(code, A, i, B, j, na[i], nb[j])
            ok = dd <= t if inclusive else dd < t
            if not ok:
                continue
            if n == L.shape[0]:
                L2 = np.empty(2 * n, dtype=np.int64)
                R2 = np.empty(2 * n, dtype=np.int64)
                D2 = np.empty(2 * n, dtype=np.float64)
                L2[:n] = L
                R2[:n] = R
                D2[:n] = D
                L, R, D = L2, R2, D2
            a = ida[i]
            b = idb[j]
            if tri and a > b:
                a, b = b, a
            L[n] = a
            R[n] = b
            D[n] = dd
            n += 1
    return L[:n].copy(), R[:n].copy(), D[:n].copy()


def brute_force_join(
    X: npt.ArrayLike,
    ids: npt.ArrayLike,
    side: npt.ArrayLike | None,
    metric: str,
    t: float,
    inclusive: bool = False,
) -> tuple[IntArray, IntArray, FloatArray]:
    """All matching pairs of one window by exhaustive comparison."""
    t = check_threshold(metric, t)
    Xv = check_vectors(X, metric)
    id_arr, sd = check_ids_side(Xv.shape[0], ids, side)
    nrm = row_norms(Xv) if metric != "euclidean" else np.zeros(Xv.shape[0])
    code = METRIC_CODES[metric]
    if sd is None:
        L, R, D = _all_pairs(code, Xv, nrm, id_arr, Xv, nrm, id_arr, True, t, bool(inclusive))
    else:
        a = sd == 0
        b = ~a
        L, R, D = _all_pairs(
            code,
            np.ascontiguousarray(Xv[a]),
            nrm[a],
            id_arr[a],
            np.ascontiguousarray(Xv[b]),
            nrm[b],
            id_arr[b],
            False,
            t,
            bool(inclusive),
        )
    o = np.lexsort((R, L))
    return L[o], R[o], D[o]


def brute_force_join_windows(
    X: npt.ArrayLike,
    ids: npt.ArrayLike,
    window: npt.ArrayLike,
    side: npt.ArrayLike | None,
    metric: str,
    t: float,
    inclusive: bool = False,
) -> tuple[IntArray, IntArray, IntArray, FloatArray]:
    """Brute force per window label (ascending); pairs never cross windows."""
    Xv = check_vectors(X, metric)
    n = Xv.shape[0]
    id_arr, sd = check_ids_side(n, ids, side)
    win = np.asarray(window, dtype=np.int64).reshape(-1)
    if win.shape[0] != n:
        raise ValueError(f"window has {win.shape[0]} entries, X has {n} rows")
    out_w, out_l, out_r, out_d = [], [], [], []
    for lab in unique(win):
        m = win == lab
        L, R, D = brute_force_join(Xv[m], id_arr[m], None if sd is None else sd[m], metric, t, inclusive)
        out_w.append(np.full(L.shape[0], lab, dtype=np.int64))
        out_l.append(L)
        out_r.append(R)
        out_d.append(D)
    z = np.zeros(0, np.int64)
    return (
        np.concatenate(out_w) if out_w else z,
        np.concatenate(out_l) if out_l else z.copy(),
        np.concatenate(out_r) if out_r else z.copy(),
        np.concatenate(out_d) if out_d else np.zeros(0),
    )
