"""Optimizer of the distributed set-similarity join (Fier & Freytag, Sec. 2.1-2.5).

* Sec. 2.1 — cost-based heuristic: one *slice* per index length i, with the
  probe lengths [i, maxlen(i)] and the cost
  C(i) = P(i)·|R_i|·Σ_{p=i}^{maxlen(i)} P(p)·|R_p| (Eq. 1, :func:`slice_costs`);
  slices sorted by descending cost are dealt round-robin to n nodes
  (:func:`distribute_slices`).
* Sec. 2.2 — data-independent scaling: each node is split into m sub slices;
  a probe record goes to ``modgroup = rid % m`` (Eq. 2), index records go to
  every modgroup of their node. One (node, modgroup) is a *unit*.
* Sec. 2.3 — RAM estimates per unit (Eq. 3-5, :class:`RamFactors`).
* Sec. 2.4/2.5 — parameter search: for t units try every n·m = t, prune
  combinations whose RAM estimate exceeds the memory limit, keep the smallest
  max/min node-cost deviation (Eq. 6); if all are pruned, double t
  (:func:`choose_parameters`, the paper's search as published).
* :func:`search_plan` is the search simjoin runs: the same (n, m) grid with
  n·m = t, RAM pruning and doubling of t, but it scores a candidate by its
  estimated makespan on the cluster's task slots (unit costs from measured
  prefix work, plus the records every unit must hold), and it splits a node
  whose units stay costlier than ``skew_factor`` × the mean into finer
  modgroups (a per-node modulo: still exact, see below). Every candidate it
  tried is kept in ``Plan.search`` with the reason it was pruned, kept or
  chosen.

Lengths are record lengths (number of distinct tokens); ``counts`` are |R_l|.
Costs are exact Python ints. Records must get their rids in length order
(ties in any fixed order), which is what makes a pair (x, y) with
x.rid < y.rid meet exactly once: in the unit (node owning |x|, y.rid % m_k),
where m_k is the modulo of that node (``PlanUnit.mod``; m unless the node was
split for skew). Index records of node k are copied to all m_k modgroups, a
probe record to modgroup rid % m_k only, so the rule holds for any m_k.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import cached_property, partial
from typing import Any

import numpy as np
import numpy.typing as npt

from simjoin.core.unique import unique

from .similarity import (
    check_similarity,
    check_threshold,
    index_prefix_array,
    max_length_array,
    probe_prefix_array,
)

__all__ = [
    "Candidate",
    "NodeSlices",
    "Plan",
    "PlanUnit",
    "RamFactors",
    "UnitCosts",
    "candidate_ram",
    "choose_parameters",
    "cost_deviation",
    "distribute_slices",
    "index_ram",
    "length_stats",
    "make_plan",
    "probe_ram",
    "search_plan",
    "slice_costs",
    "unit_load",
    "unit_ram",
]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class NodeSlices:
    """The slices dealt to one node (Sec. 2.1): its indexLengths, the union of
    their probe lengths that occur in the data, and the summed slice cost."""

    node: int
    index_lengths: tuple[int, ...]
    probe_lengths: tuple[int, ...]
    cost: int


@dataclass(frozen=True)
class RamFactors:
    """Byte sizes of the RAM estimate (Sec. 2.3, Eq. 3-5).

    Defaults are the paper's (12-byte postings entry, 60 bytes + 4 per token
    per record, 12-byte candidate, candFact up to 2/3). ``threads`` is 1
    because one unit runs one single-threaded kernel (the paper ran 24
    threads per node). ``static_bytes`` is memory the unit needs besides the
    estimate (the paper measured < 4 GB for its process); it is added before
    comparing with the memory limit.
    """

    index_entry_bytes: int = 12
    record_bytes: int = 60
    token_bytes: int = 4
    candidate_bytes: int = 12
    threads: int = 1
    cand_fact: float = 2 / 3
    static_bytes: int = 0

    @classmethod
    def kernel(cls) -> RamFactors:
        """Byte sizes of simjoin's own unit (``ppjoin`` inside one Spark Python worker).

        Measured on the peak resident memory of one unit's kernel (Arrow batches in,
        pairs out): a record holds its Arrow row plus about a dozen int64 arrays
        (rids, lengths, prefixes, bitmaps, candidate counters); a token its Arrow value,
        its dense id and the transients that compute it; an index prefix entry the
        postings' keys and CSR arrays (record, position, length, bitmap); a result its
        pair buffers and its Arrow output (left, right, similarity and a null stats string:
        about 37 bytes). ``static_bytes`` is a Python worker with
        numpy, pyarrow, numba and the kernel loaded. See ``tests/spark/test_ssj_ram.py``.
        """
        return cls(index_entry_bytes=48, record_bytes=80, token_bytes=20, candidate_bytes=120,
                   threads=1, cand_fact=2 / 3, static_bytes=256 * 2**20)


@dataclass(frozen=True)
class PlanUnit:
    """One independently computable unit: sub slice ``modgroup`` of ``node``."""

    unit: int
    node: int
    modgroup: int
    index_lengths: tuple[int, ...]
    probe_lengths: tuple[int, ...]
    est_cost: float  # node cost / m, as in the paper
    est_ram_bytes: int  # index + probe + candidate (without static_bytes)
    mod: int = 0  # the node's modulo m_k (0: the plan's m); > m when the node was split for skew


@dataclass(frozen=True)
class Candidate:
    """One (n, m) that :func:`search_plan` tried, and its verdict.

    ``mods`` are the per-node modulos after the skew split (empty when
    pruned); ``makespan`` is the estimated time on the task slots in cost
    units; ``deviation`` is max/min unit cost; ``verdict`` is ``chosen``,
    ``kept`` or ``pruned``, with the reason in words.
    """

    t: int
    n: int
    m: int
    mods: tuple[int, ...]
    units: int
    est_ram_bytes: int
    makespan: float
    deviation: float
    verdict: str
    reason: str


@dataclass(frozen=True)
class Plan:
    """Output of the optimizer: which unit indexes and probes which lengths.

    Units have dense ids ``unit = node * m + modgroup``. Nodes that received
    no slice (n larger than the number of distinct lengths) get no units, so
    ``len(units) == m * min(n, number of lengths)``.
    """

    theta: float
    sim: str
    n: int
    m: int
    units: tuple[PlanUnit, ...]
    deviation: float = 1.0  # max/min node cost (Eq. 6); inf if a node is empty
    search: tuple[Candidate, ...] = ()  # what the search tried (search_plan only)
    reason: str = ""  # why this plan: the user's n and m, or the search's choice

    def unit_mod(self, u: PlanUnit) -> int:
        """The modulo of ``u``'s node: its own ``mod``, else the plan's m."""
        return u.mod or self.m

    @property
    def n_units(self) -> int:
        return len(self.units)

    @cached_property
    def _routing(self) -> tuple[IntArray, BoolArray, BoolArray]:
        nodes = sorted({u.node for u in self.units})
        lengths = np.array(
            sorted({length for u in self.units for length in u.index_lengths}),
            dtype=np.int64,
        )
        index_mask = np.zeros((lengths.size, len(nodes)), dtype=bool)
        probe_mask = np.zeros((lengths.size, len(nodes)), dtype=bool)
        for u in self.units:
            if u.modgroup != 0:
                continue
            index_mask[np.searchsorted(lengths, u.index_lengths), u.node] = True
            probe_mask[np.searchsorted(lengths, u.probe_lengths), u.node] = True
        return lengths, index_mask, probe_mask

    @cached_property
    def _node_units(self) -> tuple[IntArray, IntArray]:
        """(first unit id, modulo) per node id."""
        n_nodes = max((u.node for u in self.units), default=-1) + 1
        base = np.zeros(n_nodes, dtype=np.int64)
        mods = np.ones(n_nodes, dtype=np.int64)
        for u in self.units:
            if u.modgroup == 0:
                base[u.node], mods[u.node] = u.unit, self.unit_mod(u)
        return base, mods

    def routing(self) -> tuple[IntArray, BoolArray, BoolArray]:
        """``(lengths, index_node_mask, probe_node_mask)``.

        ``lengths`` are the sorted lengths of the statistics; the masks have
        shape (len(lengths), number of non-empty nodes): node k indexes
        (probes) length ``lengths[i]`` iff ``mask[i, k]``. Each row of the
        index mask has exactly one True (the node owning that slice).
        """
        lengths, index_mask, probe_mask = self._routing
        return lengths.copy(), index_mask.copy(), probe_mask.copy()

    def assign_units(
        self, lengths: npt.ArrayLike, rids: npt.ArrayLike
    ) -> tuple[IntArray, IntArray, BoolArray, BoolArray]:
        """Replicate records to units (Sec. 2.1 + Eq. 2), vectorized.

        A record of length l and rid r goes to unit (node, g) iff l is an
        index length of node (every g), or l is a probe length of node and
        r % m == g. Each record reaches a unit at most once.

        Returns ``(record_pos, unit, is_index, is_probe)``, sorted by
        (record_pos, unit); ``record_pos`` indexes the input arrays.
        Raises ValueError for a length that is not in the plan's statistics
        (its record would silently miss its pairs otherwise).
        """
        rec_len = np.asarray(lengths, dtype=np.int64).ravel()
        rec_rid = np.asarray(rids, dtype=np.int64).ravel()
        if rec_len.shape != rec_rid.shape:
            raise ValueError(
                f"lengths and rids must have the same shape, got {rec_len.shape} and {rec_rid.shape}"
            )
        plan_lengths, index_mask, probe_mask = self._routing
        li = np.searchsorted(plan_lengths, rec_len)
        li_clip = np.minimum(li, max(plan_lengths.size - 1, 0))
        known = (li < plan_lengths.size) & (plan_lengths[li_clip] == rec_len)
        if not known.all():
            unknown = unique(rec_len[~known])[:10].tolist()
            raise ValueError(
                f"record lengths {unknown} are not in the plan's length statistics; "
                "allowed: lengths counted when the plan was made"
            )
        base, mods = self._node_units
        n_rec = rec_len.size

        # Index copies: every modgroup of the owning node.
        owner = np.argmax(index_mask, axis=1)[li]
        k_i = mods[owner]
        pos_i = np.repeat(np.arange(n_rec, dtype=np.int64), k_i)
        g_i = np.arange(pos_i.size, dtype=np.int64) - np.repeat(np.cumsum(k_i) - k_i, k_i)
        unit_i = base[owner[pos_i]] + g_i
        probe_i = g_i == rec_rid[pos_i] % k_i[pos_i]

        # Probe-only copies: the other nodes probing this length, one modgroup.
        probe_only = probe_mask & ~index_mask
        ptr = np.zeros(plan_lengths.size + 1, dtype=np.int64)
        ptr[1:] = np.cumsum(probe_only.sum(axis=1))
        nodes_csr = np.nonzero(probe_only)[1].astype(np.int64)  # row-major order
        cnt = ptr[li + 1] - ptr[li]
        pos_p = np.repeat(np.arange(n_rec, dtype=np.int64), cnt)
        within = np.arange(pos_p.size, dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        node_p = nodes_csr[ptr[li][pos_p] + within]
        unit_p = base[node_p] + rec_rid[pos_p] % mods[node_p]

        record_pos = np.concatenate([pos_i, pos_p])
        unit = np.concatenate([unit_i, unit_p])
        is_index = np.concatenate([np.ones(pos_i.size, bool), np.zeros(pos_p.size, bool)])
        is_probe = np.concatenate([probe_i, np.ones(pos_p.size, bool)])
        order = np.lexsort((unit, record_pos))
        return record_pos[order], unit[order], is_index[order], is_probe[order]


def length_stats(lengths: npt.ArrayLike, counts: npt.ArrayLike) -> dict[int, int]:
    """Validate the length statistic {(l, |R_l|)}: sorted dict without zero counts.

    Duplicate lengths are summed. Lengths must be >= 1 (empty records are
    quarantined before planning).
    """
    ls = np.asarray(lengths).ravel()
    cs = np.asarray(counts).ravel()
    if ls.shape != cs.shape:
        raise ValueError(f"lengths and counts must have the same shape, got {ls.shape} and {cs.shape}")
    if ls.size and (not np.issubdtype(ls.dtype, np.integer) or ls.min() < 1):
        raise ValueError(
            f"record lengths must be integers >= 1, got min {ls.min()!r}; "
            "empty records must be removed before planning"
        )
    if cs.size and (not np.issubdtype(cs.dtype, np.integer) or cs.min() < 0):
        raise ValueError(f"length counts must be integers >= 0, got min {cs.min()!r}")
    stats: dict[int, int] = {}
    for length, count in zip(ls.tolist(), cs.tolist(), strict=True):
        if count:
            stats[length] = stats.get(length, 0) + count
    return dict(sorted(stats.items()))


def slice_costs(
    lengths: npt.ArrayLike, counts: npt.ArrayLike, theta: float, sim: str = "jaccard"
) -> dict[int, int]:
    """Slice cost C(i) of every index length i present (Eq. 1), exact ints.

    C(i) = P(i)·|R_i|·Σ_{p=i}^{maxlen(i)} P(p)·|R_p| over present lengths p.
    """
    theta, sim = check_threshold(theta), check_similarity(sim)
    stats = length_stats(lengths, counts)
    if not stats:
        return {}
    ls = np.fromiter(stats.keys(), dtype=np.int64, count=len(stats))
    weights = [
        int(p) * c for p, c in zip(probe_prefix_array(sim, theta, ls).tolist(), stats.values(), strict=True)
    ]
    cumulative = [0]
    for w in weights:
        cumulative.append(cumulative[-1] + w)
    upper = np.searchsorted(ls, max_length_array(sim, theta, ls), side="right").tolist()
    return {int(i): weights[k] * (cumulative[upper[k]] - cumulative[k]) for k, i in enumerate(ls.tolist())}


def _probe_lengths(
    index_lengths: Iterable[int], present: IntArray | list[int], upper: Mapping[int, int]
) -> tuple[int, ...]:
    """Present lengths in the union of the probe ranges [i, maxlen(i)]."""
    intervals: list[list[int]] = []
    for i in sorted(index_lengths):
        if intervals and i <= intervals[-1][1]:
            intervals[-1][1] = max(intervals[-1][1], upper[i])
        else:
            intervals.append([i, upper[i]])
    out: list[int] = []
    have = present.tolist() if isinstance(present, np.ndarray) else list(present)
    for lo, hi in intervals:
        out.extend(have[bisect.bisect_left(have, lo):bisect.bisect_right(have, hi)])
    return tuple(out)


def distribute_slices(
    costs: Mapping[int, int], n: int, *, theta: float, sim: str = "jaccard", greedy: bool = False,
    balance: Callable[[NodeSlices], float] | None = None,
) -> list[NodeSlices]:
    """Deal slices to n nodes (Sec. 2.1, Example 2).

    Slices are sorted by descending cost, ties by ascending length, and dealt
    round-robin (with ``greedy``: each to the node with the least cost so far,
    ties to the lower node id, i.e. LPT). Always returns n NodeSlices (node ids 0..n-1); when n exceeds
    the number of slices, the trailing nodes are kept empty with cost 0.
    ``theta``/``sim`` give the probe ranges [i, maxlen(i)]; ``costs`` must
    have one entry per length present in the data.

    With ``balance`` (a node's real cost: its units' work and the records they hold, probe
    ranges included, which a slice's own cost cannot know), the dealt nodes are then improved
    by :func:`_rebalance_nodes`.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"number of nodes n must be an integer >= 1, got {n!r}")
    theta, sim = check_threshold(theta), check_similarity(sim)
    n = int(n)
    present = np.array(sorted(costs), dtype=np.int64)
    upper = dict(zip(present.tolist(), max_length_array(sim, theta, present).tolist(), strict=True))
    have = present.tolist()
    order = sorted(costs, key=lambda i: (-costs[i], i))
    dealt: list[list[int]] = [[] for _ in range(n)]
    load = [0.0] * n
    for rank, i in enumerate(order):
        k = load.index(min(load)) if greedy else rank % n
        dealt[k].append(int(i))
        load[k] += float(costs[i])

    def node(k: int, idx: Iterable[int]) -> NodeSlices:
        return NodeSlices(node=k, index_lengths=tuple(sorted(idx)), probe_lengths=_probe_lengths(idx, have, upper),
                          cost=sum(costs[i] for i in idx))  # type: ignore[misc]

    if balance is not None and n > 1:
        seen: dict[tuple[int, tuple[int, ...]], float] = {}  # the local search prices a node many times

        def priced(k: int, idx: list[int]) -> float:
            key = (k, tuple(sorted(idx)))
            if key not in seen:
                seen[key] = balance(node(k, idx))  # type: ignore[misc]
            return seen[key]

        dealt = _rebalance_nodes(dealt, priced)
    return [node(k, idx) for k, idx in enumerate(dealt)]


def _rebalance_nodes(
    dealt: list[list[int]], cost: Callable[[int, list[int]], float], max_rounds: int = 50,
    max_evaluations: int = 20_000, min_gain: float = 1e-3,
) -> list[list[int]]:
    """Local search after LPT dealing, on the nodes' real costs (``cost``). A step moves one slice
    between the costliest (or the cheapest) node and another node, or swaps two of their slices.

    1. Steps that lower the two nodes' sum of squared costs, best first, until none is left:
       this groups slices whose probe ranges overlap, so the records they share are held once,
       and lowers the total and the largest cost.
    2. Then steps that narrow the spread: lower the largest node cost, or raise the smallest
       without raising the largest.

    Each step improves its phase's objective by at least ``min_gain`` (relative), so both end;
    ``max_rounds`` steps per phase and ``max_evaluations`` node costs in all bound the time (a
    fraction of a second on hundreds of lengths). A node never becomes empty."""
    dealt = [list(d) for d in dealt]
    budget = [max_evaluations]

    def priced(k: int, d: list[int]) -> float:
        budget[0] -= 1
        return cost(k, d)

    have = [priced(k, d) for k, d in enumerate(dealt)]

    def trials(h: int, k: int) -> list[tuple[list[int], list[int]]]:
        a, b = dealt[h], dealt[k]
        out = [([x for x in a if x != i], [*b, i]) for i in a if len(a) > 1]
        out += [([*a, j], [x for x in b if x != j]) for j in b if len(b) > 1]
        if len(a) * len(b) <= 256:
            out += [([x if x != i else j for x in a], [x if x != j else i for x in b]) for i in a for j in b]
        return out

    def spread_key(costs: list[float]) -> tuple[float, float]:
        return (max(costs), -min(costs))

    for phase in (1, 2):
        for _ in range(max_rounds):
            best: tuple[Any, int, int, list[int], list[int], float, float] | None = None
            now = spread_key(have)
            ends = {max(range(len(have)), key=have.__getitem__), min(range(len(have)), key=have.__getitem__)}
            for h in ends:
                for k in range(len(dealt)):
                    if k == h:
                        continue
                    for na, nb in trials(h, k):
                        if budget[0] <= 0:
                            break
                        ca, cb = priced(h, na), priced(k, nb)
                        if phase == 1:
                            base = have[h] ** 2 + have[k] ** 2
                            gain = base - (ca**2 + cb**2)
                            score: Any = -gain if gain > min_gain * base else None
                        else:
                            after = list(have)
                            after[h], after[k] = ca, cb
                            key = spread_key(after)
                            better = (key[0] < now[0] * (1 - min_gain)
                                      or (key[0] <= now[0] and key[1] < now[1] * (1 - min_gain)))
                            score = key if better else None
                        if score is not None and (best is None or score < best[0]):
                            best = (score, h, k, na, nb, ca, cb)
            if best is None:
                break
            _, h, k, na, nb, ca, cb = best
            dealt[h], dealt[k], have[h], have[k] = na, nb, ca, cb
    return dealt


def cost_deviation(nodes: Iterable[NodeSlices]) -> Fraction | float:
    """max/min node cost (Eq. 6); ``inf`` if some node has cost 0 (e.g. empty)."""
    node_costs = [nd.cost for nd in nodes]
    lo = min(node_costs)
    if lo <= 0:
        return math.inf
    hi = max(node_costs)
    return Fraction(hi, lo) if isinstance(hi, int) and isinstance(lo, int) else hi / lo


def index_ram(
    index_lengths: Iterable[int],
    counts: Mapping[int, int],
    theta: float,
    sim: str = "jaccard",
    factors: RamFactors = RamFactors(),
) -> int:
    """Inverted-index bytes (Eq. 3): Σ prefix(l)·|R_l|·index_entry_bytes.

    Uses the index prefix that ``ppjoin`` actually stores (shorter than the
    paper's P(l)); a ``ppjoin`` postings entry is int64 rec + int32 pos = 12 B.
    """
    ls = np.array(sorted(index_lengths), dtype=np.int64)
    prefixes: list[int] = index_prefix_array(sim, theta, ls).tolist()
    return (
        sum(p * counts[length] for p, length in zip(prefixes, ls.tolist(), strict=True))
        * factors.index_entry_bytes
    )


def probe_ram(
    probe_lengths: Iterable[int],
    counts: Mapping[int, int],
    m: int,
    factors: RamFactors = RamFactors(),
    index_lengths: Iterable[int] = (),
) -> int:
    """Record bytes (Eq. 4): Σ |R_l|·(record_bytes + token_bytes·l) / m, rounded up.

    Records of the ``index_lengths`` are not divided by m: they are copied whole
    into every modgroup (Sec. 2.2), so Eq. 4 as printed underestimates a unit
    of m > 1 by every index record it holds.
    """
    whole = set(index_lengths)
    total = 0
    for length in probe_lengths:
        size = counts[length] * (factors.record_bytes + factors.token_bytes * length)
        total += size if length in whole else -(-size // m)
    return total


def candidate_ram(
    index_lengths: Iterable[int], counts: Mapping[int, int], factors: RamFactors = RamFactors()
) -> int:
    """Candidate bytes (Eq. 5): Σ |R_l|·candidate_bytes·threads·candFact, rounded up."""
    records = sum(counts[length] for length in index_lengths)
    return math.ceil(records * factors.candidate_bytes * factors.threads * factors.cand_fact)


def unit_ram(
    node: NodeSlices,
    m: int,
    counts: Mapping[int, int],
    theta: float,
    sim: str = "jaccard",
    factors: RamFactors = RamFactors(),
) -> int:
    """Estimated bytes of one unit of ``node``: index + probe + candidate
    (``factors.static_bytes`` not included)."""
    return (
        index_ram(node.index_lengths, counts, theta, sim, factors)
        + probe_ram(node.probe_lengths, counts, m, factors, node.index_lengths)
        + candidate_ram(node.index_lengths, counts, factors)
    )


def _check_positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _build_plan(
    nodes: list[NodeSlices],
    m: int,
    counts: Mapping[int, int],
    theta: float,
    sim: str,
    factors: RamFactors,
    mods: Sequence[int] | None = None,
    unit_cost: Callable[[NodeSlices, int], float] | None = None,
    **extra: Any,
) -> Plan:
    """Units of ``nodes``: node k gets ``mods[k]`` modgroups (m for all without ``mods``);
    unit ids are dense in (node, modgroup) order. A unit's ``est_cost`` is ``unit_cost(node, m_k)``,
    by default its node's cost / m_k."""
    units: list[PlanUnit] = []
    for nd in nodes:
        if not nd.index_lengths:
            continue  # round-robin fills nodes in order: empty ones are trailing
        mk = int(mods[nd.node]) if mods is not None else m
        ram = unit_ram(nd, mk, counts, theta, sim, factors)
        first = len(units)
        units.extend(
            PlanUnit(
                unit=first + g,
                node=nd.node,
                modgroup=g,
                index_lengths=nd.index_lengths,
                probe_lengths=nd.probe_lengths,
                est_cost=unit_cost(nd, mk) if unit_cost is not None else nd.cost / mk,
                est_ram_bytes=ram,
                mod=mk if mk != m else 0,
            )
            for g in range(mk)
        )
    return Plan(
        theta=theta,
        sim=sim,
        n=len(nodes),
        m=m,
        units=tuple(units),
        deviation=float(cost_deviation(nodes)),
        **extra,
    )


def make_plan(
    lengths: npt.ArrayLike,
    counts: npt.ArrayLike,
    theta: float,
    sim: str = "jaccard",
    n: int = 1,
    m: int = 1,
    factors: RamFactors = RamFactors(),
    mods: Sequence[int] | None = None,
) -> Plan:
    """Plan for user-fixed n and m (no RAM pruning; see ``PlanUnit.est_ram_bytes``).

    ``mods`` (one per node, each >= 1) gives every node its own modulo instead of m.
    """
    theta, sim = check_threshold(theta), check_similarity(sim)
    n, m = _check_positive("number of nodes n", n), _check_positive("modulo m", m)
    if mods is not None:
        if len(mods) != n:
            raise ValueError(f"mods must hold one modulo per node ({n}), got {len(mods)}")
        mods = [_check_positive("a node's modulo", k) for k in mods]
    counts_by_length = length_stats(lengths, counts)
    costs = slice_costs(list(counts_by_length), list(counts_by_length.values()), theta, sim)
    nodes = distribute_slices(costs, n, theta=theta, sim=sim) if costs else []
    if not nodes:
        return Plan(theta=theta, sim=sim, n=n, m=m, units=())
    return _build_plan(nodes, m, counts_by_length, theta, sim, factors, mods)


def choose_parameters(
    lengths: npt.ArrayLike,
    counts: npt.ArrayLike,
    theta: float,
    sim: str,
    total_units: int,
    memory_bytes: int,
    factors: RamFactors = RamFactors(),
    *,
    min_nodes: int = 1,
    max_units: int = 2**16,
) -> Plan:
    """Parameter search of Sec. 2.5.

    For t = ``total_units``: every n with n·m = t and n >= ``min_nodes`` is
    tried; a combination is pruned if the largest unit estimate plus
    ``factors.static_bytes`` exceeds ``memory_bytes``; among the survivors the
    smallest deviation max/min node cost (Eq. 6) wins, ties going to the
    larger n (hence the smaller m). If every combination is pruned, t doubles,
    up to ``max_units``; then ValueError.

    Note: n = 1 is perfectly balanced (deviation 1), so without memory
    pressure the search returns n = 1, m = t, i.e. every unit indexes all
    lengths. The authors' script only considers n >= 4; pass ``min_nodes`` to
    do the same.
    """
    theta, sim = check_threshold(theta), check_similarity(sim)
    t = _check_positive("total_units", total_units)
    memory = _check_positive("memory_bytes", memory_bytes)
    min_nodes = _check_positive("min_nodes", min_nodes)
    counts_by_length = length_stats(lengths, counts)
    if not counts_by_length:
        return Plan(theta=theta, sim=sim, n=1, m=1, units=())
    costs = slice_costs(list(counts_by_length), list(counts_by_length.values()), theta, sim)
    budget = memory - factors.static_bytes

    # A slice cannot be split further by n or m (Sec. 2.3, last paragraph).
    worst = max(
        index_ram([i], counts_by_length, theta, sim, factors) + candidate_ram([i], counts_by_length, factors)
        for i in counts_by_length
    )
    if worst > budget:
        raise ValueError(
            f"memory_bytes={memory} is too small: the largest single slice needs an "
            f"estimated {worst + factors.static_bytes} bytes (index + candidates + "
            "static) however n and m are chosen"
        )

    while t <= max_units:
        best: tuple[Fraction | float, int] | None = None
        for n in range(min_nodes, t + 1):
            if t % n:
                continue
            m = t // n
            nodes = distribute_slices(costs, n, theta=theta, sim=sim)
            ram = max(
                unit_ram(nd, m, counts_by_length, theta, sim, factors) for nd in nodes if nd.index_lengths
            )
            if ram > budget:
                continue
            key = (cost_deviation(nodes), -n)
            if best is None or key < best:
                best = key
        if best is not None:
            n = -best[1]
            nodes = distribute_slices(costs, n, theta=theta, sim=sim)
            return _build_plan(nodes, t // n, counts_by_length, theta, sim, factors)
        t *= 2
    raise ValueError(
        f"no n*m <= max_units={max_units} keeps every unit within memory_bytes={memory} "
        f"(static_bytes={factors.static_bytes}); raise memory_bytes or max_units"
    )


def _lpt_makespan(costs: Sequence[float], slots: int) -> float:
    """Longest-processing-time-first schedule of unit costs on ``slots`` task slots: its makespan."""
    loads = [0.0] * max(1, slots)
    for c in sorted(costs, reverse=True):
        k = loads.index(min(loads))
        loads[k] += c
    return max(loads)


@dataclass(frozen=True)
class UnitCosts:
    """What a unit's records cost besides its slices' posting visits, in posting visits.

    A record costs ``index_record`` when indexed (copied whole into every modgroup) plus
    ``index_entry`` per entry of its index prefix (building the postings); a probed record
    ``probe_record`` plus ``probe_entry`` per token of its probe prefix (each starts a posting
    list walk); every token held ``token``. Defaults fitted (least squares on relative error,
    median error 6 %, worst 23 %) on the steady CPU time of 270 units run one at a time outside
    Spark, their records arriving as a shuffle delivers them (a few rid-ordered runs): Zipf,
    AOL-like and near-duplicate data, θ 0.6-0.9, six plans each. A visit is then about 7 ns.
    Result pairs are priced in the slices' costs (``simjoin.core.setsim.work``).
    """

    index_record: float = 8.8
    probe_record: float = 0.0
    index_entry: float = 13.7
    probe_entry: float = 5.4
    token: float = 0.4

    @classmethod
    def none(cls) -> UnitCosts:
        """Records cost nothing: units are priced by their slices' work alone."""
        return cls(0.0, 0.0, 0.0, 0.0, 0.0)

    def per_record(self, lengths: Iterable[int], theta: float, sim: str) -> dict[int, tuple[float, float]]:
        """(indexed, probed) cost of one record of each length."""
        ls = np.array(sorted(set(lengths)), dtype=np.int64)
        ip = index_prefix_array(sim, theta, ls).tolist()
        pp = probe_prefix_array(sim, theta, ls).tolist()
        return {int(length): (self.index_record + self.index_entry * a + self.token * int(length),
                              self.probe_record + self.probe_entry * b + self.token * int(length))
                for length, a, b in zip(ls.tolist(), ip, pp, strict=True)}


def unit_load(
    node: NodeSlices, mod: int, counts: Mapping[int, int], per_record: Mapping[int, tuple[float, float]]
) -> float:
    """Cost of the records a unit of ``node`` holds, at ``per_record`` = length -> (indexed, probed)
    cost of one record (:meth:`UnitCosts.per_record`): its index records whole (copied to every
    modgroup), plus 1/mod of the records it probes (every probe length, the index lengths included)."""
    return (sum(counts[i] * per_record[i][0] for i in node.index_lengths)
            + sum(counts[p] * per_record[p][1] for p in node.probe_lengths) / mod)


def _skew_mod(cost: Callable[[int], float], m: int, target: float, max_mod: int) -> int:
    """Smallest modulo >= m whose unit cost is <= ``target``; it stops early where one more modgroup
    saves under 5 % (the index records, copied to every modgroup, put a floor under the unit cost)."""
    mk = m
    while mk < max_mod and cost(mk) > target:
        if cost(mk + 1) > 0.95 * cost(mk):
            break
        mk += 1
    return mk


def search_plan(
    lengths: npt.ArrayLike,
    counts: npt.ArrayLike,
    theta: float,
    sim: str = "jaccard",
    *,
    slots: int,
    memory_bytes: int,
    factors: RamFactors | None = None,
    costs: Mapping[int, float] | None = None,
    total_units: int | None = None,
    units_per_slot: int = 2,
    skew_factor: float = 1.25,
    unit_costs: UnitCosts | None = None,
    max_units: int = 4096,
) -> Plan:
    """simjoin's parameter search: Sec. 2.5's grid, scored by makespan, with a skew split.

    * t starts at ``total_units`` (default ``units_per_slot`` × ``slots``: the
      number of units follows the cluster). Every n·m = t is tried; a
      candidate is pruned when its largest unit's RAM estimate plus
      ``factors.static_bytes`` exceeds ``memory_bytes`` (per unit, i.e. per
      task slot), or when it has more nodes than slices. If all are pruned, t
      doubles (Sec. 2.5).
    * ``costs`` are the slices' costs in posting visits (``simjoin.core.setsim.work.
      slice_work`` measures them from the data's prefixes, which sees token and
      candidate skew that Eq. 1 cannot); without them Eq. 1's costs are used.
    * Unit cost: a unit of node k with modulo m_k costs its slices' work / m_k plus
      what its records cost (``unit_costs``, :class:`UnitCosts`: routing, CSR, rid
      order, index build, probing; index records count in every modgroup, which is
      what makes n = 1 expensive). On short records (AOL-like: 80 % of length 1-4)
      the records, not the posting visits, decide a unit's time.
    * Slices go to nodes costliest-first onto the least loaded node (LPT), not
      round-robin as in Sec. 2.1: with a few heavy slices round-robin leaves
      nodes up to 2x apart, and every unit of the lighter node idles. A slice
      weighs its work plus its records' load twice (once indexed, once probed).
    * Skew split (beyond the paper, which "is not robust against candidate skew by
      design"): a node whose unit cost stays above ``skew_factor`` × the mean unit
      cost gets a larger modulo m_k, the smallest whose unit cost is within it, so
      its probe records spread over more units. Exact: see the module docstring.
    * Score: the units are scheduled longest-first on ``slots`` slots. The lowest
      makespan wins, then the lowest deviation (max/min unit cost), then the
      larger n. Eq. 6's node deviation alone always prefers n = 1 (every unit
      indexes everything), which is why the authors' script needs n >= 4.

    Every candidate is returned in ``Plan.search`` with its verdict and reason.
    """
    theta, sim = check_threshold(theta), check_similarity(sim)
    slots = _check_positive("slots", slots)
    memory = _check_positive("memory_bytes", memory_bytes)
    factors = factors or RamFactors.kernel()
    if not (skew_factor >= 1.0):
        raise ValueError(f"skew_factor must be >= 1, got {skew_factor!r}")
    counts_by_length = length_stats(lengths, counts)
    t = _check_positive("total_units", total_units if total_units is not None else units_per_slot * slots)
    if not counts_by_length:
        return Plan(theta=theta, sim=sim, n=1, m=1, units=(), reason="no records")
    if costs is None:
        cost_of: dict[int, float] = dict(
            slice_costs(list(counts_by_length), list(counts_by_length.values()), theta, sim))
        basis = "Eq. 1 slice costs"
    else:
        missing = [length for length in counts_by_length if length not in costs]
        if missing:
            raise ValueError(f"costs lack the lengths {missing[:10]}; allowed: one cost per length present")
        cost_of = {length: float(costs[length]) for length in counts_by_length}
        basis = "measured prefix work"
    per_record = (unit_costs or UnitCosts()).per_record(counts_by_length, theta, sim)
    weight = {i: cost_of[i] + c * sum(per_record[i]) for i, c in counts_by_length.items()}

    def unit_cost(nd: NodeSlices, mk: int) -> float:
        return (sum(cost_of[i] for i in nd.index_lengths) / mk
                + unit_load(nd, mk, counts_by_length, per_record))

    budget = memory - factors.static_bytes
    worst = max(
        index_ram([i], counts_by_length, theta, sim, factors) + candidate_ram([i], counts_by_length, factors)
        + probe_ram([i], counts_by_length, 1, factors, [i])
        for i in counts_by_length
    )
    if worst > budget:
        raise ValueError(
            f"memory_bytes={memory} is too small: the largest single slice needs an estimated "
            f"{worst + factors.static_bytes} bytes (its index and records + static) however n and m are chosen"
        )
    gib = 2**30
    tried: list[Candidate] = []
    kept: list[tuple[tuple[float, float, int], Candidate, list[NodeSlices]]] = []
    while t <= max_units and not kept:
        for n in range(1, t + 1):
            if t % n:
                continue
            m = t // n
            if n > len(counts_by_length):
                tried.append(Candidate(t, n, m, (), 0, 0, math.inf, math.inf, "pruned",
                                       f"n={n} nodes but only {len(counts_by_length)} slices (lengths)"))
                continue
            nodes = distribute_slices(weight, n, theta=theta, sim=sim, greedy=True,  # type: ignore[arg-type]
                                      balance=partial(lambda mk, nd: unit_cost(nd, mk), m))
            rams = [unit_ram(nd, m, counts_by_length, theta, sim, factors) for nd in nodes]
            big = max(range(n), key=lambda k: rams[k])
            if rams[big] > budget:
                tried.append(Candidate(
                    t, n, m, (), 0, rams[big], math.inf, math.inf, "pruned",
                    f"a unit of node {big} needs an estimated {(rams[big] + factors.static_bytes) / gib:.2f} GiB "
                    f"> {memory / gib:.2f} GiB per unit"))
                continue
            costs_k = [partial(unit_cost, nd) for nd in nodes]
            mean = sum(m * cost(m) for cost in costs_k) / t
            mods = [_skew_mod(cost, m, skew_factor * mean, max_units) for cost in costs_k]
            each_unit = [cost(mk) for cost, mk in zip(costs_k, mods, strict=True) for _ in range(mk)]
            makespan = _lpt_makespan(each_unit, slots)
            lo = min(each_unit)
            dev = max(each_unit) / lo if lo > 0 else math.inf
            split = [k for k in range(n) if mods[k] > m]
            note = (f"; node{'s' if len(split) > 1 else ''} {', '.join(map(str, split))} split into "
                    f"{', '.join(str(mods[k]) for k in split)} modgroups (cost > {skew_factor:g}x the mean unit)"
                    if split else "")
            ram = max(unit_ram(nd, mk, counts_by_length, theta, sim, factors)
                      for nd, mk in zip(nodes, mods, strict=True))
            c = Candidate(t, n, m, tuple(mods), len(each_unit), ram, makespan, dev, "kept",
                          f"est. makespan {makespan:.3g} on {slots} slots, unit cost max/min {dev:.2f}{note}")
            tried.append(c)
            kept.append(((makespan, dev, -n), c, nodes))
        if not kept:
            t *= 2
    if not kept:
        raise ValueError(
            f"no n*m <= max_units={max_units} keeps every unit within memory_bytes={memory} "
            f"(static_bytes={factors.static_bytes}); raise memory_bytes or max_units"
        )
    _, best, nodes = min(kept, key=lambda k: k[0])
    search = tuple(
        replace(c, verdict="chosen", reason=f"lowest {c.reason}") if c is best
        else replace(c, reason=f"{c.reason} (chosen: {best.makespan:.3g})") if c.verdict == "kept" else c
        for c in tried
    )
    reason = (f"search over {len(tried)} candidates (t={best.t}, {slots} slots, {basis}, "
              f"{memory / gib:.2f} GiB per unit): n={best.n} m={best.m}, {best.reason}")
    return _build_plan(nodes, best.m, counts_by_length, theta, sim, factors, best.mods, search=search,
                       reason=reason, unit_cost=unit_cost)
