"""Streaming HyperCube over micro-batches, in one process: the steps the Spark pipeline runs,
composed (and the reference its tests and the benchmark's load figures use).

Each micro-batch: (1) the heavy-hitter summary takes the batch's counts (whole history: one
running summary; window: the merge of the live micro-batches' summaries); (2) the dispatcher
plans the grids and the migration steps, whose volume is counted on the held tuples; (3) the
new tuples and the held tuples of their keys on the other side are routed under the new
configuration, and every worker joins its copies (new x held and new x new); (4) the new tuples
join the held ones, and with a window the tuples no future tuple can meet are dropped - with an
allowed lateness L a tuple may arrive up to L behind its side's largest ts, so tuples are held W + L
behind the other side's (the join's |ts_R - ts_S| < W test is symmetric: a tuple older than held
ones joins them as if it had arrived in order).

Every pair with a new tuple meets in exactly one task under one configuration, so a key turning
heavy or light between micro-batches loses and repeats nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from simjoin.core.hypercube.dispatch import Dispatcher, Step
from simjoin.core.hypercube.join import local_counts, local_join
from simjoin.core.hypercube.route import moved_copies, phj_loads, route, worker_loads
from simjoin.core.hypercube.sketch import Summary, counters_for, exact_counts, merge_all

__all__ = ["HyperCubeStream", "BatchResult", "optimal_bound", "expiry_marks"]


def optimal_bound(n: int, out: int, p: int) -> float:
    """N/p + sqrt(OUT/p), the optimal load (Beame et al.)."""
    return n / p + math.sqrt(max(out, 0) / p)


def expiry_marks(max_ts: dict[int, int], window_us: int, lateness_us: int = 0) -> dict[int, int]:
    """Per side s: a held tuple of s with ts <= mark can meet no future tuple of the other side,
    whose ts is at least that side's largest committed ts less the allowed lateness L (rows
    further behind are quarantined as late): mark = max_ts[1 - s] - W - L."""
    return {s: max_ts[1 - s] - window_us - lateness_us for s in (0, 1) if (1 - s) in max_ts}


@dataclass
class BatchResult:
    left: np.ndarray
    right: np.ndarray
    key: np.ndarray
    ts: np.ndarray
    count_keys: np.ndarray
    counts: np.ndarray
    steps: list[Step]
    migrated: int
    received: np.ndarray  # copies per worker this micro-batch
    loads: np.ndarray  # held copies per worker after it
    phj: np.ndarray
    bound: float


@dataclass
class HyperCubeStream:
    p: int
    eps: float | None = None
    window_us: int = 0
    count_only: bool = False
    assign: str = "load"
    #: the allowed lateness L: a tuple may arrive up to L behind its side's largest ts so far
    lateness_us: int = 0
    disp: Dispatcher = field(init=False)
    held: dict[str, np.ndarray] = field(init=False)
    summaries: list[tuple[int, Summary]] = field(init=False)
    max_ts: dict[int, int] = field(init=False)

    def __post_init__(self) -> None:
        self.eps = self.eps or 1.0 / (2 * self.p)
        self.disp = Dispatcher(self.p, self.eps, assign=self.assign)
        self.held = {c: np.zeros(0, np.int64) for c in ("side", "id", "ts", "key")}
        self.summaries = []
        self.max_ts = {}

    @property
    def capacity(self) -> int:
        return counters_for(float(self.eps or 1.0 / (2 * self.p)))

    def estimates(self, side: np.ndarray, keys: np.ndarray, ts: np.ndarray) -> Summary:
        s, k, c = exact_counts(side, keys)
        batch = Summary.of(self.capacity, s, k, c)
        if self.window_us <= 0:
            prev = self.summaries[-1][1] if self.summaries else Summary.empty(self.capacity)
            self.summaries = [(int(ts.max()), prev.merge(batch))]
            return self.summaries[-1][1]
        self.summaries.append((int(ts.max()), batch))
        now = max(t for t, _ in self.summaries)
        self.summaries = [(t, s) for t, s in self.summaries if t > now - self.window_us]
        return merge_all(self.capacity, (s for _, s in self.summaries))

    def process(self, side: np.ndarray, ids: np.ndarray, ts: np.ndarray, keys: np.ndarray) -> BatchResult:
        side, ids, ts, keys = (np.asarray(a, np.int64) for a in (side, ids, ts, keys))
        est = self.estimates(side, keys, ts)
        disp, steps, _ = self.disp.plan(est)
        h = self.held
        migrated = 0
        for k in sorted({s.key for s in steps}):
            m = h["key"] == k
            migrated += moved_copies(self.disp.grids.get(k), disp.grids.get(k), h["side"][m], h["id"][m], k, self.p)
        self.disp = disp
        # held tuples of side s join only if a new tuple of the other side has their key
        need = np.zeros(h["key"].shape, bool)
        for s in (0, 1):
            need |= (h["side"] == s) & np.isin(h["key"], keys[side == 1 - s])
        allside = np.concatenate([side, h["side"][need]])
        allid = np.concatenate([ids, h["id"][need]])
        allts = np.concatenate([ts, h["ts"][need]])
        allkey = np.concatenate([keys, h["key"][need]])
        allnew = np.concatenate([np.ones(side.shape, np.int64), np.zeros(int(need.sum()), np.int64)])
        c = route(allside, allid, allkey, disp)
        received = np.bincount(c.worker, minlength=self.p).astype(np.int64)
        outs: list[list[np.ndarray]] = [[], [], [], [], [], []]
        for w in range(self.p):
            sel = c.worker == w
            r = c.row[sel]
            args = (c.task[sel], allside[r], allkey[r], allnew[r], allts[r], allid[r], self.window_us)
            if self.count_only:
                k_, n_ = local_counts(*args)
                outs[4].append(k_)
                outs[5].append(n_)
            else:
                for i, a in enumerate(local_join(*args)):
                    outs[i].append(a)
        cat = [np.concatenate(o) if o else np.zeros(0, np.int64) for o in outs]
        if self.count_only and cat[4].size:
            u, inv = np.unique(cat[4], return_inverse=True)
            cat[4], cat[5] = u, np.bincount(inv.ravel(), weights=cat[5], minlength=len(u)).astype(np.int64)
        for s in (0, 1):
            if (side == s).any():
                self.max_ts[s] = max(self.max_ts.get(s, int(ts[side == s].max())), int(ts[side == s].max()))
        self.held = {"side": np.concatenate([h["side"], side]), "id": np.concatenate([h["id"], ids]),
                     "ts": np.concatenate([h["ts"], ts]), "key": np.concatenate([h["key"], keys])}
        if self.window_us > 0:
            marks = expiry_marks(self.max_ts, self.window_us, self.lateness_us)
            h = self.held
            dead = np.zeros(h["side"].shape, bool)
            for s, mk in marks.items():
                dead |= (h["side"] == s) & (h["ts"] <= mk)
            self.held = {k: v[~dead] for k, v in h.items()}
        h = self.held
        loads = worker_loads(h["side"], h["id"], h["key"], disp)
        _, kk, cc = exact_counts(h["side"], h["key"])
        sides = exact_counts(h["side"], h["key"])[0]
        r_cnt = dict(zip(kk[sides == 0].tolist(), cc[sides == 0].tolist(), strict=True))
        out = sum(v * r_cnt.get(k, 0) for k, v in zip(kk[sides == 1].tolist(), cc[sides == 1].tolist(), strict=True))
        return BatchResult(cat[0], cat[1], cat[2], cat[3], cat[4], cat[5], steps, migrated, received, loads,
                           phj_loads(h["key"], self.p), optimal_bound(int(h["side"].size), int(out), self.p))
