"""Where the dispatcher sends tuples (Qiu et al., Section 3.2): every tuple's copies as
(row, task, worker), vectorized.

A light key's tuple has one copy, on task h^L(b). A heavy key's R tuple (side 0) has p_S(b)
copies, the tasks of row h_R(b)(id) of b's grid; an S tuple (side 1) has p_R(b) copies, the
tasks of column h_S(b)(id). :func:`moved_copies` counts what a configuration change migrates:
the copies a tuple gets on tasks it was not on before (a released task's copies are dropped,
not sent)."""

from __future__ import annotations

import numpy as np

from simjoin.core.hypercube.dispatch import Dispatcher, Grid, coordinate, light_task
from simjoin.core.unique import unique

__all__ = ["Copies", "route", "moved_copies", "worker_loads", "phj_loads"]


class Copies:
    """Copies of n tuples: ``row`` (index into the tuples), ``task`` and ``worker``, each int64."""

    __slots__ = ("row", "task", "worker")

    def __init__(self, row: np.ndarray, task: np.ndarray, worker: np.ndarray) -> None:
        self.row, self.task, self.worker = row, task, worker

    def __len__(self) -> int:
        return int(self.row.shape[0])


def route(side: np.ndarray, ids: np.ndarray, keys: np.ndarray, disp: Dispatcher) -> Copies:
    side = np.asarray(side, np.int64)
    ids = np.asarray(ids, np.int64)
    keys = np.asarray(keys, np.int64)
    n = keys.shape[0]
    task_one = light_task(keys, disp.p)
    grids = sorted(disp.grids.values(), key=lambda g: g.key)
    if not grids or n == 0:
        rows = np.arange(n, dtype=np.int64)
        return Copies(rows, task_one, disp.worker_of(task_one))
    hk = np.array([g.key for g in grids], np.int64)
    pr = np.array([g.p_r for g in grids], np.int64)
    ps = np.array([g.p_s for g in grids], np.int64)
    base = np.concatenate([[0], np.cumsum(pr * ps)[:-1]]).astype(np.int64)
    cells = np.concatenate([g.tasks.ravel() for g in grids]).astype(np.int64)
    gi = np.clip(np.searchsorted(hk, keys), 0, len(hk) - 1)
    heavy = hk[gi] == keys
    copies = np.where(heavy, np.where(side == 0, ps[gi], pr[gi]), 1)
    rows = np.repeat(np.arange(n, dtype=np.int64), copies)
    starts = np.cumsum(copies) - copies
    j = np.arange(rows.shape[0], dtype=np.int64) - np.repeat(starts, copies)
    task = task_one[rows]
    h = heavy[rows]
    if h.any():
        r = rows[h]
        g = gi[r]
        c = coordinate(ids[r])
        jj = j[h]
        is_r = side[r] == 0
        x = np.where(is_r, c % pr[g], jj)
        y = np.where(is_r, jj, c % ps[g])
        task[h] = cells[base[g] + x * ps[g] + y]
    return Copies(rows, task, disp.worker_of(task))


def _one(g: Grid | None, p: int) -> Dispatcher:
    d = Dispatcher(p, 1.0 / (2 * p))
    if g is None:
        return d
    tw = {int(t): 0 for t in g.tasks.ravel()}
    return Dispatcher(p, d.eps, {g.key: g}, tw, max(tw) + 1, "tasks")


def moved_copies(before: Grid | None, after: Grid | None, side: np.ndarray, ids: np.ndarray, key: int,
                 p: int) -> int:
    """Copies of one key's held tuples that a change of its grid (None: the key is light)
    creates on tasks they were not on: the migration volume of Section 3.2."""
    side = np.asarray(side, np.int64)
    if side.size == 0:
        return 0
    keys = np.full(side.shape, int(key), np.int64)
    a = route(side, ids, keys, _one(before, p))
    b = route(side, ids, keys, _one(after, p))
    # a light key's task id (< p) never equals a grid task's (>= p)
    old = unique(a.row * (1 << 32) + a.task)
    new = unique(b.row * (1 << 32) + b.task)
    return int(np.setdiff1d(new, old, assume_unique=True).size)


def worker_loads(side: np.ndarray, ids: np.ndarray, keys: np.ndarray, disp: Dispatcher) -> np.ndarray:
    """Tuple copies each worker holds: the paper's load."""
    c = route(side, ids, keys, disp)
    return np.bincount(c.worker, minlength=disp.p).astype(np.int64)


def phj_loads(keys: np.ndarray, p: int) -> np.ndarray:
    """Tuples each worker holds under the plain Parallel Hash Join."""
    return np.bincount(light_task(keys, p), minlength=p).astype(np.int64)
