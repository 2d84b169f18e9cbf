"""The Streaming HyperCube dispatcher (Qiu, Papadias & Yi, EDBT'19, Section 3.2).

* **Heavy and light.** A key b is a heavy hitter if N(b) = |R(b)| + |S(b)| > N/p and light if
  N(b) < (1/p - eps)N; in between it may be either. From a Misra-Gries summary (underestimates
  by at most eps*N on N(b)) a key is heavy when its estimate is at least (1/p - eps)N: no true
  heavy hitter is missed, no true light key is heavy, and with eps <= 1/(2p) there are at most 2p.
* **Light keys** go to task h^L(b) = pmod(hash(b), p): tasks 0..p-1, task i on worker i (PHJ).
* **Heavy key b** owns a p_R(b) x p_S(b) grid of tasks. An R tuple (a, b) goes to every task of
  row h_R(b)(a), an S tuple (b, c) to every task of column h_S(b)(c), so each output pair is
  produced by exactly one task. h_R(b)(a) = hash(a) mod p_R: doubling p_R splits row x into x and
  x + p_R by the next digit of hash(a) - h' of the paper, h_R + p_R * h' - and halving merges them.
* **Adaptation.** Desired sides p_R^d = |R(b)| / sqrt(OUT^H) * sqrt(p) (p_S^d likewise). A side
  above twice its desired value is halved, one below half of it doubled (repeatedly, one
  migration step each). A key turning heavy gets the static HyperCube's grid (Beame et al.: a
  share p(b) = p * OUT(b) / OUT^H of the tasks, see :func:`initial_grids`; its tuples leave the
  light task); one turning light goes back to h^L(b). Halving R: tasks (x, y), x >= p_R/2, send their R(b) tuples to
  (x - p_R/2, y) and are released; doubling R: p(b) new tasks, (x, y) sends its S(b) tuples to
  (x + p_R, y) and its R(b) tuples with h' = 1 move there.
* **Workers.** ``assign="tasks"``: a new task goes to the worker with the fewest tasks, a released
  task frees its slot (the paper). ``assign="load"`` (default): tasks are placed largest first on
  the least-loaded worker in every micro-batch (see ``ASSIGN``).

Pure numpy. The dispatcher is a value: :meth:`Dispatcher.plan` returns the next one and the steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from simjoin.core.hashing import spark_hash_long
from simjoin.core.hypercube.sketch import Summary

__all__ = ["ASSIGN", "Grid", "Step", "Dispatcher", "desired_sides", "best_sides", "initial_grids", "light_task",
           "coordinate", "COORD_SEED"]

#: How tasks go to workers: ``tasks`` - the paper's rule, a new task to the worker with the fewest
#: tasks (sticky); ``load`` - every micro-batch, the heavy tasks largest first to the worker with the
#: least estimated load (LPT), light load assumed even. Placement is free here: held tuples live in
#: Delta and are shipped to the workers in every micro-batch, so only tuples changing task migrate.
ASSIGN = ("load", "tasks")

#: Seed of the id hash whose low bits are a tuple's grid coordinate (independent of the key hash).
COORD_SEED = 0x5EED


def light_task(keys: np.ndarray, p: int) -> np.ndarray:
    """h^L: the light task (and worker) of each key, pmod(hash(key), p) like Spark's ``hash()``."""
    return np.mod(spark_hash_long(np.asarray(keys, np.int64)).astype(np.int64), int(p))


def coordinate(ids: np.ndarray) -> np.ndarray:
    """The hash of each tuple id whose low bits give its grid row (R) or column (S)."""
    return spark_hash_long(np.asarray(ids, np.int64), COORD_SEED).view(np.uint32).astype(np.int64)


def best_sides(r: float, s: float, cells: int) -> tuple[int, int]:
    """The grid of at most ``cells`` tasks with the least load per task, r/p_R + s/p_S."""
    best = (math.inf, 1, 1)
    for pr in range(1, max(1, cells) + 1):
        ps = max(1, cells // pr)
        load = r / pr + s / ps
        if load < best[0] - 1e-9:
            best = (load, pr, ps)
    return best[1], best[2]


#: Fractions of the static HyperCube's share p(b) = p * OUT(b) / OUT^H tried for new grids (the one
#: whose tasks pack best on p workers wins; ties: the larger share).
SHARES = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)


def initial_grids(new: dict[int, tuple[int, int]], fixed: list[float], heavy: dict[int, tuple[int, int]],
                  out_h: float, n: int, p: int) -> dict[int, tuple[int, int]]:
    """Sides of the grids of keys turning heavy: Beame et al.'s share p(b) = p * OUT(b) / OUT^H
    of the p tasks, as the grid of at most that many cells with the least load per task. Shares
    round to whole tasks, so a dominant key's grid may cover every worker and leave the next key's
    task doubling up with one of them: a few scaled shares are tried and the one whose tasks (with
    the ``fixed`` loads of existing tasks) pack on p workers with the least maximum load wins."""
    best: tuple[float, dict[int, tuple[int, int]]] = (math.inf, {})
    light = max(0.0, n - sum(r + s for r, s in heavy.values())) / p
    for f in SHARES:
        sides = {}
        for k, (r, s) in new.items():
            share = p * r * s / out_h if out_h > 0 else float(p)
            sides[k] = best_sides(r, s, max(1, math.floor(f * share + 0.5)))
        loads = list(fixed) + [r / sides[k][0] + s / sides[k][1] for k, (r, s) in new.items()
                               for _ in range(sides[k][0] * sides[k][1])]
        m = _lpt_max(loads, p, light)
        if m < best[0] - 1e-9:
            best = (m, sides)
    return best[1]


def _lpt_max(loads: list[float], p: int, light: float) -> float:
    w = np.full(p, light)
    for x in sorted(loads, reverse=True):
        w[int(np.argmin(w))] += x
    return float(w.max())


def desired_sides(r: float, s: float, out_h: float, p: int) -> tuple[float, float]:
    """(p_R^d, p_S^d) = (|R(b)|, |S(b)|) * sqrt(p / OUT^H), each at most p. Without any
    heavy output yet (OUT^H = 0) a side that has tuples spreads over p rows or columns."""
    if out_h > 0:
        f = math.sqrt(p / out_h)
        dr, ds = r * f, s * f
    else:
        dr, ds = (float(p) if r > 0 else 1.0), (float(p) if s > 0 else 1.0)
    return min(dr, float(p)), min(ds, float(p))


def _balance(grids: dict[int, Grid], heavy: dict[int, tuple[int, int]], n: int, p: int) -> dict[int, int]:
    """LPT: heavy tasks by estimated load |R(b)|/p_R + |S(b)|/p_S, largest first, each to the worker
    with the least load so far (ties: fewest tasks, then the lowest worker); light tasks, one per
    worker, carry the light tuples evenly."""
    light = max(0.0, n - sum(r + s for r, s in heavy.values())) / p
    load = np.full(p, light)
    count = np.ones(p, np.int64)
    tasks = []
    for k, g in grids.items():
        r, s = heavy.get(k, (0, 0))
        per = r / g.p_r + s / g.p_s
        tasks += [(per, int(t)) for t in g.tasks.ravel()]
    out: dict[int, int] = {}
    for per, t in sorted(tasks, key=lambda x: (-x[0], x[1])):
        w = int(np.lexsort((np.arange(p), count, load))[0])
        out[t] = w
        load[w] += per
        count[w] += 1
    return out


@dataclass(frozen=True)
class Grid:
    """A heavy key's tasks: ``tasks[x, y]`` is the task of row x (R side) and column y (S side)."""

    key: int
    tasks: np.ndarray  # int64 (p_R, p_S)

    @property
    def p_r(self) -> int:
        return int(self.tasks.shape[0])

    @property
    def p_s(self) -> int:
        return int(self.tasks.shape[1])

    def to_json(self) -> dict[str, Any]:
        return {"key": int(self.key), "tasks": self.tasks.tolist()}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Grid:
        return cls(int(d["key"]), np.asarray(d["tasks"], np.int64).reshape(len(d["tasks"]), -1))


@dataclass(frozen=True)
class Step:
    """One migration step of one key: ``heavy`` (light -> 1 x 1 grid), ``light`` (grid -> h^L),
    ``double_r``, ``halve_r``, ``double_s``, ``halve_s``; grid sides before and after."""

    key: int
    action: str
    before: tuple[int, int]
    after: tuple[int, int]


@dataclass(frozen=True)
class Dispatcher:
    """The dispatcher's state: p, eps, the heavy keys' grids and each task's worker."""

    p: int
    eps: float
    grids: dict[int, Grid] = field(default_factory=dict)
    task_worker: dict[int, int] = field(default_factory=dict)  # heavy tasks only; light task i is on worker i
    next_task: int = -1
    assign: str = "load"

    def __post_init__(self) -> None:
        if self.p < 1:
            raise ValueError(f"invalid workers {self.p}: allowed >= 1")
        if not 0 < self.eps <= 1.0 / (2 * self.p):
            raise ValueError(f"invalid epsilon {self.eps}: allowed 0 < epsilon <= 1/(2p) = {1 / (2 * self.p):g}")
        if self.assign not in ASSIGN:
            raise ValueError(f"invalid assign {self.assign!r}: allowed {', '.join(ASSIGN)}")
        if self.next_task < 0:
            object.__setattr__(self, "next_task", self.p)

    # ------------------------------------------------------------------ persistence

    def to_json(self) -> dict[str, Any]:
        return {"p": self.p, "eps": self.eps, "next_task": self.next_task, "assign": self.assign,
                "grids": [g.to_json() for g in sorted(self.grids.values(), key=lambda g: g.key)],
                "task_worker": [[int(t), int(w)] for t, w in sorted(self.task_worker.items())]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Dispatcher:
        grids = {int(g["key"]): Grid.from_json(g) for g in d.get("grids", [])}
        return cls(int(d["p"]), float(d["eps"]), grids, {int(t): int(w) for t, w in d.get("task_worker", [])},
                   int(d["next_task"]), str(d.get("assign", "load")))

    # ------------------------------------------------------------------ workers

    def tasks_per_worker(self) -> np.ndarray:
        n = np.ones(self.p, np.int64)  # light task i
        for w in self.task_worker.values():
            n[w] += 1
        return n

    def worker_of(self, tasks: np.ndarray) -> np.ndarray:
        """Worker of each task id (light task i: worker i)."""
        tasks = np.asarray(tasks, np.int64)
        lut = np.arange(max(self.next_task, self.p), dtype=np.int64)
        for t, w in self.task_worker.items():
            lut[t] = w
        return lut[tasks]

    # ------------------------------------------------------------------ heavy hitters

    def classify(self, est: Summary) -> dict[int, tuple[int, int]]:
        """Heavy keys with their estimated (|R(b)|, |S(b)|): those whose estimated N(b) is at least
        (1/p - eps)N. Estimates undercount N(b) by at most eps*N, so every key with N(b) > N/p is
        heavy and none with N(b) < (1/p - eps)N is (the paper's two conditions); a key in between
        is heavy, so a hot key that just misses N/p does not load one light task alone."""
        n, p, eps = est.n, self.p, self.eps
        if n == 0:
            return {}
        keys = est.keys()
        r, s = est.estimate(0, keys), est.estimate(1, keys)
        heavy = (r + s) >= (1.0 / p - eps) * n
        return {int(k): (int(a), int(b)) for k, a, b in zip(keys[heavy], r[heavy], s[heavy], strict=True)}

    # ------------------------------------------------------------------ adaptation

    def plan(self, est: Summary) -> tuple[Dispatcher, list[Step], dict[int, tuple[float, float]]]:
        """The next dispatcher for the estimates ``est``, the migration steps that lead there, and
        each heavy key's desired sides."""
        heavy = self.classify(est)
        out_h = float(sum(r * s for r, s in heavy.values()))
        grids = dict(self.grids)
        tw = dict(self.task_worker)
        nxt = self.next_task
        counts = self.tasks_per_worker()
        steps: list[Step] = []
        desired: dict[int, tuple[float, float]] = {}

        def new_tasks(k: int) -> np.ndarray:
            nonlocal nxt
            out = np.empty(k, np.int64)
            for i in range(k):
                w = int(np.argmin(counts))  # fewest tasks (ties: the lowest worker)
                counts[w] += 1
                tw[nxt] = w
                out[i] = nxt
                nxt += 1
            return out

        def release(tasks: np.ndarray) -> None:
            for t in np.asarray(tasks).ravel():
                counts[tw.pop(int(t))] -= 1

        for k in sorted(set(grids) - set(heavy)):
            gone = grids.pop(k)
            release(gone.tasks)
            steps.append(Step(k, "light", (gone.p_r, gone.p_s), (0, 0)))
        fixed = [heavy[k][0] / g.p_r + heavy[k][1] / g.p_s for k, g in grids.items() for _ in range(g.tasks.size)]
        sizes = initial_grids({k: heavy[k] for k in heavy if k not in grids}, fixed, heavy, out_h, est.n, self.p)
        for k in sorted(heavy):
            r, s = heavy[k]
            dr, ds = desired_sides(r, s, out_h, self.p)
            desired[k] = (dr, ds)
            if k in grids:
                g = grids[k]
            else:
                pr, ps = sizes[k]
                g = Grid(k, new_tasks(pr * ps).reshape(pr, ps))
                steps.append(Step(k, "heavy", (0, 0), (pr, ps)))
            while True:
                t = g.tasks
                if g.p_r > 2 * dr and g.p_r > 1:  # an odd side halves to its floor
                    half = g.p_r // 2
                    release(t[half:])
                    g2 = replace(g, tasks=t[:half].copy())
                    act = "halve_r"
                elif g.p_r < dr / 2:
                    g2 = replace(g, tasks=np.vstack([t, new_tasks(t.size).reshape(t.shape)]))
                    act = "double_r"
                elif g.p_s > 2 * ds and g.p_s > 1:
                    half = g.p_s // 2
                    release(t[:, half:])
                    g2 = replace(g, tasks=t[:, :half].copy())
                    act = "halve_s"
                elif g.p_s < ds / 2:
                    g2 = replace(g, tasks=np.hstack([t, new_tasks(t.size).reshape(t.shape)]))
                    act = "double_s"
                else:
                    break
                steps.append(Step(k, act, (g.p_r, g.p_s), (g2.p_r, g2.p_s)))
                g = g2
            grids[k] = g
        if self.assign == "load":
            tw = _balance(grids, heavy, est.n, self.p)
        return Dispatcher(self.p, self.eps, grids, tw, nxt, self.assign), steps, desired
