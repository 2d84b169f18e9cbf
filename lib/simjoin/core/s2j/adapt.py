"""Adapting to a varying workload (S2J, Section 3.2) and the tuple-block size (Section 3.3,
Problem 1 and Appendix A). Pure functions of the measured workload; the stages call them once per
micro-batch.

Notation (the paper's): ``w`` the average workload of a worker in tuples, ``W`` a worker's
capacity in tuples, ``τ = w / W`` the utilisation, thresholds ``0 < τ0 < τ* < τ1 <= τ2 <= 1``,
``E(ϖ)`` the expected input rate (tuples/s), ``φ`` the join window (s), ``m`` the workers,
``ς`` the tuple-block size, ``α`` the weight of imbalance against serialisation in Problem 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simjoin.core.hashing import splitmix64
from simjoin.core.unique import unique

__all__ = ["Thresholds", "utilization", "initial_workers", "shed_ratio", "shed_count", "shed_mask",
           "scaled_workers", "block_size", "block_candidates", "problem1_cost", "Decision", "decide", "window_load",
           "assign_blocks"]


@dataclass(frozen=True)
class Thresholds:
    """τ0 (release workers), τ1 (start shedding), τ2 (add workers), β (τ* = β·τ1), B (base shed
    ratio), the shedding model, how many consecutive micro-batches make a load "sustained", and
    the worker bounds."""

    tau0: float = 0.2
    tau1: float = 0.8
    tau2: float = 0.9
    beta: float = 0.5
    base: float = 0.0
    model: str = "linear"
    sustain: int = 2
    min_workers: int = 1
    max_workers: int = 64

    def __post_init__(self) -> None:
        if not 0 < self.tau0 < self.tau_star < self.tau1 <= self.tau2 <= 1 or self.tau1 >= 1:
            raise ValueError(f"invalid thresholds tau0={self.tau0}, tau*={self.tau_star} (beta {self.beta} x tau1), "
                             f"tau1={self.tau1}, tau2={self.tau2}: allowed 0 < tau0 < tau* < tau1 <= tau2 <= 1, "
                             "tau1 < 1")
        if self.model not in ("linear", "quadratic"):
            raise ValueError(f"invalid shed model {self.model!r}: allowed linear, quadratic")

    @property
    def tau_star(self) -> float:
        """τ* = β·τ1 (the paper suggests β = 0.5)."""
        return self.beta * self.tau1


def utilization(workload: float, workers: int, capacity: float | None) -> float:
    """τ = w / W with ``w`` = ``workload`` tuples spread over ``workers``; 0 without a capacity."""
    if capacity is None or capacity <= 0 or workers <= 0:
        return 0.0
    return float(workload) / workers / float(capacity)


def initial_workers(rate: float, window_s: float, capacity: float, th: Thresholds) -> int:
    """m = ⌈E(ϖ)·φ / (W·τ*)⌉, within the worker bounds."""
    m = math.ceil(rate * window_s / (capacity * th.tau_star) - 1e-12)
    return int(min(th.max_workers, max(th.min_workers, m)))


def shed_ratio(tau: float, th: Thresholds) -> float:
    """SR: 0 up to τ1; above it B + (1 - B)/(1 - τ1)·(τ - τ1) (linear) or
    B + (1 - B)·((τ - τ1)/(1 - τ1))² (quadratic), at most 1."""
    if tau <= th.tau1:
        return 0.0
    x = (tau - th.tau1) / (1.0 - th.tau1)
    sr = th.base + (1.0 - th.base) * (x if th.model == "linear" else x * x)
    return float(min(1.0, max(0.0, sr)))


def shed_count(sr: float, n: int) -> int:
    """How many of ``n`` incoming tuples a shed ratio ``sr`` drops: ⌊SR·n + ½⌋."""
    return int(min(n, max(0, math.floor(sr * n + 0.5))))


def shed_mask(sides: np.ndarray, ids: np.ndarray, count: int, seed: int = 0) -> np.ndarray:
    """Which tuples to shed: the ``count`` with the smallest hash of (side, id, seed). Random
    across the input, deterministic, so a retried micro-batch sheds the same tuples."""
    n = int(ids.shape[0])
    out = np.zeros(n, dtype=bool)
    if count <= 0 or n == 0:
        return out
    h = splitmix64(np.asarray(ids, np.int64).view(np.uint64) ^ splitmix64(
        np.asarray(sides, np.int64).view(np.uint64) + np.uint64(seed)))
    order = np.lexsort((np.asarray(ids, np.int64), h))
    out[order[:count]] = True
    return out


def scaled_workers(workload: float, workers: int, capacity: float | None, th: Thresholds,
                   high: int, low: int) -> tuple[int, int, int]:
    """Scaling (Sections 3.2.3-3.2.4): τ > τ2 for ``sustain`` consecutive micro-batches adds
    workers and τ < τ0 for as long releases them, in both cases to bring τ back to about τ*.
    Returns (workers, high streak, low streak) after this micro-batch."""
    tau = utilization(workload, workers, capacity)
    if capacity is None:
        return workers, 0, 0
    high = high + 1 if tau > th.tau2 else 0
    low = low + 1 if tau < th.tau0 else 0
    target = max(1, math.ceil(workload / (capacity * th.tau_star) - 1e-12))
    if high >= th.sustain and target > workers:
        return min(th.max_workers, target), 0, 0
    if low >= th.sustain and target < workers:
        return max(th.min_workers, target), 0, 0
    return workers, high, low


def problem1_cost(sigma: float, per_worker: float, alpha: float) -> float:
    """f(ς) = (1 - α)·ST + α·IC with ST = ϖφ/(mς) and IC = mς/(ϖφ)."""
    return (1 - alpha) * per_worker / sigma + alpha * sigma / per_worker


def block_candidates(per_worker: float, beta: float, count: int) -> list[float]:
    """ς_i = ϖφ / (m·(⌈ϖφ/(m·β)⌉ + i - 1)), i = 1..count: the block sizes that split a worker's
    load into a whole number of blocks, largest first."""
    st1 = math.ceil(per_worker / beta - 1e-12)
    return [per_worker / (st1 + i - 1) for i in range(1, count + 1)]


def block_size(per_worker: float, capacity: float | None, tau1: float, alpha: float) -> float:
    """The tuple-block size ς solving Problem 1 (Appendix A). ``per_worker`` is ϖφ/m. With too
    few workers (ϖφ/m >= τ1·W) the paper sets ς = 1."""
    if per_worker <= 0:
        return 1.0
    room = math.inf if capacity is None else tau1 * capacity - per_worker
    if room <= 0:
        return 1.0
    beta = min(room, per_worker)
    first = block_candidates(per_worker, beta, 1)[0]
    star = math.sqrt((1 - alpha) / alpha) * per_worker
    if not (0.5 < alpha < 1 and star < beta):
        return first
    st1 = math.ceil(per_worker / beta - 1e-12)
    # ς_t = min{ς_i >= ς*}: the largest ST with per_worker / ST >= ς*
    st_t = max(st1, math.floor(per_worker / star + 1e-12))
    cands = [per_worker / st_t, per_worker / (st_t + 1)]
    return min(cands, key=lambda s: (problem1_cost(s, per_worker, alpha), -s))


@dataclass(frozen=True)
class Decision:
    """One micro-batch's adaptation: utilisation before shedding, workers, shed ratio and count,
    block size, and the scaling streaks to carry on."""

    tau: float
    workers: int
    shed_ratio: float
    shed: int
    block_size: int
    high: int
    low: int
    scaled: int  # +1 scaled up, -1 down, 0 not


def window_load(incoming_ts: np.ndarray, blocks: Sequence[tuple[int, int, int]], window_us: int,
                samples: int = 512) -> tuple[float, float]:
    """The workload w·m of a micro-batch: the most tuples the window holds at once while it
    arrives (the paper's ϖφ), and the incoming tuples' part of it. At sampled arrival times t:
    the incoming tuples dated in (t - W, t] plus the stored ones dated after t - W (a block's
    ``n`` tuples taken as spread evenly over [ts_min, ts_max]); before the first arrival, the
    whole stored state. A micro-batch shorter than the window gives ``live + incoming``; a longer
    one no more than its busiest window."""
    ts = np.sort(np.asarray(incoming_ts, np.int64))
    bmin = np.array([b[0] for b in blocks], np.float64)
    bmax = np.array([b[1] for b in blocks], np.float64)
    bn = np.array([b[2] for b in blocks], np.float64)
    best, best_inc = float(bn.sum()), 0.0
    if ts.shape[0] == 0:
        return best, best_inc
    at = ts[unique(np.linspace(0, ts.shape[0] - 1, min(samples, ts.shape[0])).round().astype(np.int64))]
    inc = np.searchsorted(ts, at, "right") - np.searchsorted(ts, at - window_us, "right")
    if bn.shape[0]:
        cut = (at - window_us).astype(np.float64)[:, None]
        span = np.maximum(bmax - bmin, 1.0)[None, :]
        frac = np.where(bmax[None, :] > cut, np.clip((bmax[None, :] - cut) / span, 0.0, 1.0), 0.0)
        frac = np.where((bmax == bmin)[None, :], (bmax[None, :] > cut).astype(np.float64), frac)
        stored = (frac * bn[None, :]).sum(axis=1)
    else:
        stored = np.zeros(at.shape[0])
    total = inc + stored
    k = int(np.argmax(total))
    if total[k] > best:
        best, best_inc = float(total[k]), float(inc[k])
    return best, best_inc


def decide(live: int, incoming: int, workers: int, capacity: float | None, th: Thresholds, alpha: float,
           high: int = 0, low: int = 0, min_block: int = 1,
           load: tuple[float, float] | None = None) -> Decision:
    """Scale first (a sustained load), then shed what the workers still cannot hold (a transitory
    one), then size the blocks for the load that remains. ``live``: tuples in the window state;
    ``incoming``: this micro-batch's tuples; ``load``: the window's workload and its incoming
    part (:func:`window_load`; default ``live + incoming``, all of the incoming). SR is applied to
    the incoming tuples."""
    total, inc_part = load if load is not None else (float(live + incoming), float(incoming))
    m, hi, lo = scaled_workers(total, workers, capacity, th, high, low)
    tau = utilization(total, m, capacity)
    sr = shed_ratio(tau, th)
    shed = shed_count(sr, incoming)
    per_worker = max(0.0, total - sr * inc_part) / m
    sigma = block_size(per_worker, capacity, th.tau1, alpha)
    return Decision(tau, m, sr, shed, max(int(min_block), math.floor(sigma + 1e-9)), hi, lo,
                    (m > workers) - (m < workers))


def assign_blocks(sizes: Sequence[int], current: Sequence[int], workers: int, sigma: int) -> list[int]:
    """Blocks -> workers. A block keeps its worker while that worker exists; blocks of released
    workers, and new blocks (``current`` -1), go to the least-loaded worker; then, as in S2J's
    forwarding criterion, a worker whose load exceeds another's by more than ς hands its newest
    blocks over until no such pair remains (or no move helps). Deterministic."""
    loads = [0] * workers
    out = [-1] * len(sizes)
    for i, (n, w) in enumerate(zip(sizes, current)):
        if 0 <= w < workers:
            out[i] = w
            loads[w] += n
    for i, n in enumerate(sizes):
        if out[i] < 0:
            w = min(range(workers), key=lambda k: (loads[k], k))
            out[i] = w
            loads[w] += n
    for _ in range(len(sizes)):
        hi = max(range(workers), key=lambda k: (loads[k], -k))
        lo = min(range(workers), key=lambda k: (loads[k], k))
        if loads[hi] - loads[lo] <= sigma:
            break
        gap = loads[hi] - loads[lo]
        mine = [i for i in range(len(sizes)) if out[i] == hi and 0 < sizes[i] < gap]
        if not mine:
            break
        i = max(mine)  # the newest block
        out[i] = lo
        loads[hi] -= sizes[i]
        loads[lo] += sizes[i]
    return out
