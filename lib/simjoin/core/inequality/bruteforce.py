"""Brute-force reference of the stream inequality join: every pair of two whole streams, plain numpy.

Aslam et al., *SPO-Join* (Section 2.1): a pair joins when every predicate of θ holds and the two tuples share a
sliding window. The oracle evaluates each normalised predicate with ``Predicate.holds`` (``fl(l.x + off) OP
r.y``), the same float64 expression the kernels evaluate, so results agree exactly.

Windows (``window`` W):

* time (``count=False``): ``|ts_l - ts_r| < W``;
* count, self join: ``|seq_x - seq_y| <= W``;
* count, two streams: every tuple carries ``seq`` (0-based arrival order in its stream) and ``cnt`` (number of
  opposite-stream tuples that arrived before or with it); ``x`` in L and ``y`` in R join iff
  ``cnt_x - W <= seq_y < cnt_x`` (y is among the last W R tuples when x arrives) or
  ``cnt_y - W <= seq_x < cnt_y`` (the converse).

A self join (``R`` None) pairs distinct tuples ``x != y`` of L with ``x`` in role ``l`` and ``y`` in role ``r``
(ordered pairs: both ``(x, y)`` and ``(y, x)`` when both satisfy θ).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from .query import Query

__all__ = ["brute_force_pairs", "pair_set"]

_BLOCK = 1024


def pair_set(left_ids: npt.ArrayLike, right_ids: npt.ArrayLike) -> set[tuple[int, int]]:
    """``{(l, r)}`` of two aligned id arrays."""
    return set(zip(np.asarray(left_ids).tolist(), np.asarray(right_ids).tolist()))


def brute_force_pairs(
    query: Query,
    L: Mapping[str, npt.ArrayLike],
    R: Mapping[str, npt.ArrayLike] | None,
    window: int,
    count: bool = False,
) -> set[tuple[int, int]]:
    """All ``(l id, r id)`` pairs of the whole streams that satisfy ``query`` within ``window``."""
    self_join = R is None
    Lc = {c: np.asarray(v) for c, v in L.items()}
    Rc = Lc if R is None else {c: np.asarray(v) for c, v in R.items()}
    nl = Lc["id"].shape[0]
    nr = Rc["id"].shape[0]
    out: set[tuple[int, int]] = set()
    r_index = np.arange(nr)
    for b0 in range(0, nl, _BLOCK):
        b1 = min(nl, b0 + _BLOCK)
        mask = np.ones((b1 - b0, nr), dtype=bool)
        for p in query.predicates:
            mask &= p.holds(Lc[p.left][b0:b1, None], Rc[p.right][None, :])
        if count and self_join:
            d = Lc["seq"][b0:b1, None].astype(np.int64) - Rc["seq"][None, :].astype(np.int64)
            mask &= np.abs(d) <= window
        elif count:
            cnt_x = Lc["cnt"][b0:b1, None].astype(np.int64)
            seq_x = Lc["seq"][b0:b1, None].astype(np.int64)
            cnt_y = Rc["cnt"][None, :].astype(np.int64)
            seq_y = Rc["seq"][None, :].astype(np.int64)
            mask &= ((cnt_x - window <= seq_y) & (seq_y < cnt_x)) | ((cnt_y - window <= seq_x) & (seq_x < cnt_y))
        else:
            d = Lc["ts"][b0:b1, None].astype(np.int64) - Rc["ts"][None, :].astype(np.int64)
            mask &= np.abs(d) < window
        if self_join:
            mask &= np.arange(b0, b1)[:, None] != r_index[None, :]
        li, ri = np.nonzero(mask)
        out |= pair_set(Lc["id"][b0 + li], Rc["id"][ri])
    return out
