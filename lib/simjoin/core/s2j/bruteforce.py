"""Brute-force reference of an S2J task: every (l, r) pair of the whole streams, its predicates
evaluated literally with numpy broadcasting, the lifespan ``|ts_l - ts_r| < W``, and ``x != y``
in a self-join."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from simjoin.core.inequality.spo import Tuples
from simjoin.core.s2j.task import JoinTask

__all__ = ["brute_force"]


def brute_force(task: JoinTask, left: Tuples, right: Tuples | None, window_us: int) -> set[tuple[int, int]]:
    """The pairs (left_id, right_id) of ``task``; ``right`` None is a self-join."""
    r = left if right is None else right
    out: set[tuple[int, int]] = set()
    step = max(1, 4_000_000 // max(1, len(r)))
    for a in range(0, len(left), step):
        sl = slice(a, a + step)
        lc: Mapping[str, np.ndarray] = {k: v[sl, None] for k, v in left.cols.items()}
        rc: Mapping[str, np.ndarray] = {k: v[None, :] for k, v in r.cols.items()}
        m = task.holds(lc, rc) & (np.abs(left.ts[sl, None] - r.ts[None, :]) < window_us)
        if right is None:
            m &= left.id[sl, None] != r.id[None, :]
        ii, jj = np.nonzero(m)
        out.update(zip(left.id[sl][ii].tolist(), r.id[jj].tolist()))
    return out
