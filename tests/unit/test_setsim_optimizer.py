"""Optimizer of the distributed SSJ (Fier & Freytag, Sec. 2.1-2.5) and the
integer bounds it is built on."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from simjoin.core.setsim import (
    RamFactors,
    candidate_ram,
    check_similarity,
    check_threshold,
    choose_parameters,
    distribute_slices,
    index_prefix,
    index_ram,
    make_plan,
    max_length,
    min_length,
    min_overlap,
    probe_prefix,
    probe_ram,
    search_plan,
    slice_costs,
    unit_ram,
)
from simjoin.core.setsim import similarity as simmod
from simjoin.core.setsim.optimizer import NodeSlices, UnitCosts, unit_load
from simjoin.core.setsim.similarity import index_prefix_array, probe_prefix_array

# Paper Table 2 (θ = 0.7).
T2_LENGTHS = np.arange(1, 9)
T2_COUNTS = np.array([10, 30, 80, 500, 400, 200, 190, 150])
T2_COSTS = {1: 100, 2: 900, 3: 86400, 4: 1800000, 5: 1416000, 6: 568000, 7: 581400, 8: 202500}

SIMS = ("jaccard", "cosine", "dice")
THETAS = (0.1, 0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)


# ---------------------------------------------------------------- bounds


def _exact_min_overlap(sim: str, t: Fraction, lx: int, ly: int) -> int:
    if sim == "jaccard":
        return math.ceil(t * (lx + ly) / (1 + t))
    if sim == "dice":
        return math.ceil(t * (lx + ly) / 2)
    need = t * t * lx * ly  # smallest o >= 0 with o² >= θ²·lx·ly
    o = math.isqrt(math.floor(need))
    while o * o < need:
        o += 1
    return o


def _exact_length_range(sim: str, t: Fraction, l: int) -> tuple[int, int]:
    if sim == "jaccard":
        return math.ceil(t * l), math.floor(l / t)
    if sim == "cosine":
        return math.ceil(t * t * l), math.floor(l / (t * t))
    return math.ceil(t * l / (2 - t)), math.floor((2 - t) * l / t)


@pytest.mark.parametrize("sim", SIMS)
@pytest.mark.parametrize("theta", THETAS)
def test_bounds_match_exact_rationals(sim: str, theta: float) -> None:
    t = Fraction(repr(theta))
    ls = np.arange(1, 121)
    for l in ls.tolist():
        lo, hi = _exact_length_range(sim, t, l)
        assert min_length(sim, theta, l) == lo
        assert max_length(sim, theta, l) == hi
        assert probe_prefix(sim, theta, l) == l - lo + 1
        assert index_prefix(sim, theta, l) == l - _exact_min_overlap(sim, t, l, l) + 1
        for ly in (l, l + 1, l + 7, 2 * l):
            assert min_overlap(sim, theta, l, ly) == _exact_min_overlap(sim, t, l, ly)
    # vectorized variants agree with the scalar ones
    assert simmod.min_length_array(sim, theta, ls).tolist() == [
        min_length(sim, theta, x) for x in ls.tolist()
    ]
    assert simmod.probe_prefix_array(sim, theta, ls).tolist() == [
        probe_prefix(sim, theta, x) for x in ls.tolist()
    ]
    assert simmod.min_overlap_array(sim, theta, ls, ls[::-1]).tolist() == [
        min_overlap(sim, theta, a, b) for a, b in zip(ls.tolist(), ls[::-1].tolist(), strict=True)
    ]


def test_epsilon_absorbs_float_error() -> None:
    # float products that land just above / below the exact integer bound
    assert 0.55 * 100 > 55 and 0.9 * 38 / 1.9 > 18 and 33 / 0.55 < 60
    assert min_length("jaccard", 0.55, 100) == 55
    assert min_overlap("jaccard", 0.9, 19, 19) == 18
    assert index_prefix("jaccard", 0.9, 19) == 2
    assert max_length("jaccard", 0.55, 33) == 60
    assert min_length("cosine", 0.2, 25) == 1
    assert min_length("jaccard", 0.7, 10) == 7
    assert min_overlap("cosine", 0.7, 10, 10) == 7
    assert probe_prefix("jaccard", 0.7, 10) == 4  # P(l) of Table 1


@pytest.mark.parametrize("bad", [0, 0.0, -0.1, 1.0000001, 2, float("nan"), float("inf"), "0.5", None, True])
def test_check_threshold_rejects(bad: object) -> None:
    with pytest.raises(ValueError, match="allowed: 0 < threshold <= 1"):
        check_threshold(bad)


def test_check_threshold_and_similarity_accept() -> None:
    assert check_threshold(1) == 1.0
    assert check_threshold(np.float32(0.5)) == 0.5
    assert check_similarity("dice") == "dice"
    with pytest.raises(ValueError, match="jaccard, cosine, dice") as err:
        check_similarity("overlap")
    assert "'overlap'" in str(err.value)
    with pytest.raises(ValueError, match="allowed"):
        slice_costs([1], [1], 0.5, "Jaccard")


# ---------------------------------------------------------------- Sec. 2.1


def test_table2_slice_costs() -> None:
    costs = slice_costs(T2_LENGTHS, T2_COUNTS, 0.7)
    assert costs == T2_COSTS
    assert all(type(c) is int for c in costs.values())


def test_slice_costs_ignore_zero_counts_and_sum_duplicates() -> None:
    lengths = [4, 1, 2, 3, 9, 5, 6, 7, 8, 4]
    counts = [250, 10, 30, 80, 0, 400, 200, 190, 150, 250]
    assert slice_costs(lengths, counts, 0.7) == T2_COSTS


def test_slice_costs_are_exact_for_huge_counts() -> None:
    costs = slice_costs([1000], [10**9], 0.6)
    assert costs == {1000: (401 * 10**9) ** 2}


def test_example2_two_nodes() -> None:
    nodes = distribute_slices(T2_COSTS, 2, theta=0.7)
    assert [(nd.node, nd.index_lengths, nd.probe_lengths, nd.cost) for nd in nodes] == [
        (0, (2, 4, 7, 8), (2, 4, 5, 7, 8), 2584800),
        (1, (1, 3, 5, 6), (1, 3, 4, 5, 6, 7, 8), 2070500),
    ]


def test_distribute_ties_by_length_and_sparse_lengths() -> None:
    nodes = distribute_slices({10: 5, 3: 5, 7: 9, 20: 1}, 2, theta=0.5)
    assert nodes[0].index_lengths == (7, 10) and nodes[1].index_lengths == (3, 20)
    # only present lengths: [7, 14] u [10, 20] -> 7, 10, 20; [3, 6] u [20, 40] -> 3, 20
    assert nodes[0].probe_lengths == (7, 10, 20)
    assert nodes[1].probe_lengths == (3, 20)
    assert (nodes[0].cost, nodes[1].cost) == (14, 6)


def test_more_nodes_than_slices() -> None:
    nodes = distribute_slices(T2_COSTS, 11, theta=0.7)
    assert len(nodes) == 11
    assert [nd.cost for nd in nodes[8:]] == [0, 0, 0]
    assert all(nd.index_lengths == () and nd.probe_lengths == () for nd in nodes[8:])
    plan = make_plan(T2_LENGTHS, T2_COUNTS, 0.7, n=11, m=3)
    assert plan.n == 11 and plan.m == 3 and plan.deviation == math.inf
    assert [u.unit for u in plan.units] == list(range(24))  # empty nodes dropped
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        distribute_slices(T2_COSTS, 0, theta=0.7)


# ---------------------------------------------------------------- Sec. 2.3


def test_ram_estimates_table2() -> None:
    counts = dict(zip(T2_LENGTHS.tolist(), T2_COUNTS.tolist(), strict=True))
    f = RamFactors()
    # index prefixes for θ=0.7: l - ceil(1.4 l / 1.7) + 1
    pref = {l: l - math.ceil(Fraction(14, 17) * l) + 1 for l in counts}
    assert index_ram((2, 4), counts, 0.7) == 12 * (pref[2] * 30 + pref[4] * 500)
    assert probe_ram((2, 4, 5), counts, 3) == sum(-(-counts[l] * (60 + 4 * l) // 3) for l in (2, 4, 5))
    assert candidate_ram((2, 4), counts) == math.ceil(530 * 12 * 2 / 3)
    f24 = RamFactors(threads=24, cand_fact=1 / 3)
    assert candidate_ram((2, 4), counts, f24) == 530 * 12 * 8
    nd = distribute_slices(T2_COSTS, 2, theta=0.7)[0]
    assert unit_ram(nd, 2, counts, 0.7, "jaccard", f) == (
        index_ram(nd.index_lengths, counts, 0.7)
        + probe_ram(nd.probe_lengths, counts, 2, f, nd.index_lengths)
        + candidate_ram(nd.index_lengths, counts)
    )
    # Sec. 2.2: index records are copied whole into every modgroup; only probe-only lengths divide by m
    assert nd.index_lengths == (2, 4, 7, 8) and nd.probe_lengths == (2, 4, 5, 7, 8)
    whole = sum(counts[l] * (60 + 4 * l) for l in (2, 4, 7, 8))
    assert probe_ram(nd.probe_lengths, counts, 2, f, nd.index_lengths) == whole + -(-counts[5] * 80 // 2)
    assert unit_ram(nd, 2, counts, 0.7) > unit_ram(nd, 4, counts, 0.7) > index_ram(nd.index_lengths, counts, 0.7)
    plan = make_plan(T2_LENGTHS, T2_COUNTS, 0.7, n=2, m=2)
    assert plan.units[0].est_ram_bytes == unit_ram(nd, 2, counts, 0.7)
    assert plan.units[0].est_cost == 2584800 / 2 and plan.units[2].est_cost == 2070500 / 2
    assert [(u.unit, u.node, u.modgroup) for u in plan.units] == [
        (0, 0, 0),
        (1, 0, 1),
        (2, 1, 0),
        (3, 1, 1),
    ]


# ---------------------------------------------------------------- Sec. 2.4/2.5


def _max_ram(n: int, m: int, lengths=T2_LENGTHS, counts=T2_COUNTS) -> int:  # type: ignore[no-untyped-def]
    return max(u.est_ram_bytes for u in make_plan(lengths, counts, 0.7, n=n, m=m).units)


def test_search_without_memory_pressure_picks_n1() -> None:
    plan = choose_parameters(T2_LENGTHS, T2_COUNTS, 0.7, "jaccard", total_units=8, memory_bytes=10**12)
    assert (plan.n, plan.m, plan.deviation) == (1, 8, 1.0)


def test_search_picks_smallest_deviation() -> None:
    # min_nodes=2 mirrors the authors' script; t=4: n=2 (1.248) beats n=4 (3.52)
    plan = choose_parameters(
        T2_LENGTHS, T2_COUNTS, 0.7, "jaccard", total_units=4, memory_bytes=10**12, min_nodes=2
    )
    assert (plan.n, plan.m) == (2, 2)
    assert plan.deviation == pytest.approx(2584800 / 2070500)
    plan4 = make_plan(T2_LENGTHS, T2_COUNTS, 0.7, n=4, m=1)
    assert plan4.deviation == pytest.approx(2002500 / 568100)


def test_search_tie_prefers_more_nodes() -> None:
    # C(10) = 2·3·2·3 = 36 = C(20) = 3·2·3·2 at θ = 0.9: n=1 and n=2 tie at 1.0
    plan = choose_parameters([10, 20], [3, 2], 0.9, "jaccard", total_units=2, memory_bytes=10**9)
    assert (plan.n, plan.m, plan.deviation) == (2, 1, 1.0)


def test_search_prunes_by_ram() -> None:
    # n=1 needs the whole index in every unit; forbid it, n=2 is next best
    limit = _max_ram(2, 4)
    assert _max_ram(1, 8) > limit
    plan = choose_parameters(T2_LENGTHS, T2_COUNTS, 0.7, "jaccard", total_units=8, memory_bytes=limit)
    assert (plan.n, plan.m) == (2, 4)
    assert max(u.est_ram_bytes for u in plan.units) <= limit
    # static bytes count against the limit too: now every n·m = 8 is pruned
    fit16 = min(_max_ram(n, 16 // n) for n in (1, 2, 4, 8, 16))
    assert min(_max_ram(n, 8 // n) for n in (1, 2, 4, 8)) > fit16
    f = RamFactors(static_bytes=1000)
    plan = choose_parameters(
        T2_LENGTHS, T2_COUNTS, 0.7, "jaccard", total_units=8, memory_bytes=fit16 + 1000, factors=f
    )
    assert plan.n * plan.m == 16
    assert max(u.est_ram_bytes for u in plan.units) + 1000 <= fit16 + 1000


def test_search_doubles_t_when_all_pruned() -> None:
    limit = min(_max_ram(1, 2), _max_ram(2, 1))
    assert _max_ram(1, 1) > limit
    plan = choose_parameters(T2_LENGTHS, T2_COUNTS, 0.7, "jaccard", total_units=1, memory_bytes=limit)
    assert plan.n * plan.m == 2
    # with min_nodes larger than t, t doubles until a divisor qualifies
    plan = choose_parameters(
        T2_LENGTHS, T2_COUNTS, 0.7, "jaccard", total_units=1, memory_bytes=10**12, min_nodes=3
    )
    assert (plan.n, plan.m) == (4, 1)


def test_search_matches_exhaustive_reference() -> None:
    rng = np.random.default_rng(7)
    for _ in range(15):
        lengths = np.unique(rng.integers(1, 60, size=rng.integers(3, 20)))
        counts = rng.integers(1, 500, size=lengths.size)
        theta = float(rng.choice([0.5, 0.6, 0.75, 0.9]))
        t = int(rng.choice([4, 6, 8]))
        rams = {
            (n, t // n): max(u.est_ram_bytes for u in make_plan(lengths, counts, theta, n=n, m=t // n).units)
            for n in range(1, t + 1)
            if t % n == 0
        }
        limit = int(np.median(list(rams.values())))
        ok = [
            (make_plan(lengths, counts, theta, n=n, m=m).deviation, -n)
            for (n, m), ram in rams.items()
            if ram <= limit
        ]
        got = choose_parameters(lengths, counts, theta, "jaccard", total_units=t, memory_bytes=limit)
        if ok:
            assert got.n == -min(ok)[1] and got.n * got.m == t
        else:
            assert got.n * got.m > t


def test_search_errors() -> None:
    with pytest.raises(ValueError, match="memory_bytes=100 is too small"):
        choose_parameters(T2_LENGTHS, T2_COUNTS, 0.7, "jaccard", total_units=4, memory_bytes=100)
    # each slice fits alone, but probes never shrink below one byte per length
    # per unit: the cap on t ends the doubling
    limit = max(
        index_ram([i], dict(zip(T2_LENGTHS.tolist(), T2_COUNTS.tolist(), strict=True)), 0.7)
        + candidate_ram([i], dict(zip(T2_LENGTHS.tolist(), T2_COUNTS.tolist(), strict=True)))
        for i in range(1, 9)
    )
    with pytest.raises(ValueError, match=f"memory_bytes={limit}"):
        choose_parameters(
            T2_LENGTHS, T2_COUNTS, 0.7, "jaccard", total_units=1, memory_bytes=limit, max_units=64
        )
    with pytest.raises(ValueError, match="total_units"):
        choose_parameters(T2_LENGTHS, T2_COUNTS, 0.7, "jaccard", total_units=0, memory_bytes=10)
    with pytest.raises(ValueError, match="lengths must be integers >= 1"):
        slice_costs([0, 1], [3, 3], 0.7)


# ---------------------------------------------------------------- routing


def _routing_case(rng: np.random.Generator, sim: str, theta: float, n: int, m: int) -> None:
    lengths = np.unique(rng.integers(1, 30, size=rng.integers(1, 12)))
    counts = rng.integers(1, 6, size=lengths.size)
    plan = make_plan(lengths, counts, theta, sim, n=n, m=m)
    rec_len = np.repeat(lengths, counts)  # sorted by length => rid order
    rids = np.cumsum(rng.integers(1, 4, size=rec_len.size)) + 1000
    pos, unit, is_index, is_probe = plan.assign_units(rec_len, rids)

    assert np.unique(pos * plan.n_units + unit).size == pos.size  # at most once
    assert set(unit.tolist()) <= set(range(plan.n_units))
    n_rec = rec_len.size
    meets = np.zeros((n_rec, n_rec), dtype=np.int64)
    for u in range(plan.n_units):
        sel = unit == u
        idx = np.zeros(n_rec, bool)
        prb = np.zeros(n_rec, bool)
        idx[pos[sel][is_index[sel]]] = True
        prb[pos[sel][is_probe[sel]]] = True
        assert (is_index[sel] | is_probe[sel]).all()
        meets += np.outer(idx, prb)
    later = np.triu(np.ones((n_rec, n_rec), bool), k=1)
    compatible = rec_len[None, :] <= simmod.max_length_array(sim, theta, rec_len)[:, None]
    assert (meets[later & compatible] == 1).all()
    assert (meets[later] <= 1).all()
    # every record is an index record somewhere and probes in exactly one unit
    assert np.bincount(pos[is_index], minlength=n_rec).tolist() == [plan.m] * n_rec
    assert np.bincount(pos[is_probe & is_index], minlength=n_rec).tolist() == [1] * n_rec

    lens, index_mask, probe_mask = plan.routing()
    assert lens.tolist() == lengths.tolist()
    assert (index_mask.sum(axis=1) == 1).all() and not (index_mask & ~probe_mask).any()


@pytest.mark.parametrize("sim", SIMS)
def test_routing_pairs_meet_exactly_once(sim: str) -> None:
    rng = np.random.default_rng(11)
    for theta in (0.5, 0.7, 0.9, 1.0):
        for n in (1, 2, 3, 5, 16):
            for m in (1, 2, 3):
                _routing_case(rng, sim, theta, n, m)


def test_assign_units_rejects_unknown_length() -> None:
    plan = make_plan(T2_LENGTHS, T2_COUNTS, 0.7, n=2, m=2)
    with pytest.raises(ValueError, match=r"record lengths \[9\]"):
        plan.assign_units([1, 9], [0, 1])
    pos, unit, _, _ = plan.assign_units(np.array([], np.int64), np.array([], np.int64))
    assert pos.size == 0 and unit.size == 0


# ---------------------------------------------------------------- search_plan (simjoin's search)


def _search_case() -> tuple[np.ndarray, np.ndarray, dict[int, float]]:
    lengths = np.arange(4, 24)
    counts = np.full(lengths.size, 10_000)
    costs = {int(length): 1e6 for length in lengths}
    costs[12] = 1e9  # one hot slice: candidate skew
    return lengths, counts, costs


def test_search_plan_tries_every_nm_and_explains() -> None:
    lengths, counts, costs = _search_case()
    plan = search_plan(lengths, counts, 0.8, slots=2, memory_bytes=2**40, costs=costs, unit_costs=UnitCosts.none())
    assert [(c.t, c.n, c.m) for c in plan.search] == [(4, 1, 4), (4, 2, 2), (4, 4, 1)]
    chosen = [c for c in plan.search if c.verdict == "chosen"]
    assert len(chosen) == 1 and chosen[0].makespan == min(c.makespan for c in plan.search)
    assert (plan.n, plan.m) == (chosen[0].n, chosen[0].m)
    assert all(c.reason for c in plan.search) and "search over 3 candidates" in plan.reason


def test_search_plan_ram_prunes_doubles_and_splits_skew() -> None:
    lengths, counts, costs = _search_case()
    f = RamFactors.kernel()
    by_len = dict(zip(lengths.tolist(), counts.tolist(), strict=True))
    ram = {n: max(unit_ram(nd, 4 // n, by_len, 0.8, "jaccard", f)
                  for nd in distribute_slices(costs, n, theta=0.8, greedy=True))
           for n in (1, 2, 4)}
    # n = 1 (every unit indexes every record) does not fit; n = 2 and 4 do
    limit = f.static_bytes + max(ram[2], ram[4])
    assert ram[1] + f.static_bytes > limit
    plan = search_plan(lengths, counts, 0.8, slots=2, memory_bytes=limit, costs=costs, factors=f,
                       unit_costs=UnitCosts.none())
    verdicts = {(c.n, c.m): c for c in plan.search}
    assert verdicts[(1, 4)].verdict == "pruned" and "GiB per unit" in verdicts[(1, 4)].reason
    assert plan.n >= 2
    # the hot slice's node is split into more modgroups than m: its units stay near the mean
    mods = [plan.unit_mod(u) for u in plan.units if u.modgroup == 0]
    assert max(mods) > plan.m and "split" in plan.reason
    unit_cost = [u.est_cost for u in plan.units]
    assert max(unit_cost) <= 1.5 * sum(costs.values()) / 4
    assert max(u.est_ram_bytes for u in plan.units) + f.static_bytes <= limit
    # all of t = 4 pruned: t doubles, and the pruned ones say why
    tight = f.static_bytes + min(c.est_ram_bytes for c in plan.search if c.t == 4) - 1
    plan = search_plan(lengths, counts, 0.8, slots=2, memory_bytes=tight, costs=costs, factors=f,
                       unit_costs=UnitCosts.none())
    assert plan.search[0].t == 4 and all(c.verdict == "pruned" for c in plan.search if c.t == 4)
    assert plan.n_units >= 8 and max(u.est_ram_bytes for u in plan.units) + f.static_bytes <= tight


def test_unit_load_copies_index_records_and_splits_probes() -> None:
    node = NodeSlices(node=0, index_lengths=(2,), probe_lengths=(2, 3), cost=0)
    counts = {2: 100, 3: 40}
    per = {2: (5.0, 13.0), 3: (6.0, 13.5)}
    # index: 100 records of length 2 in every modgroup; probes: (100 + 40) / mod
    assert unit_load(node, 1, counts, per) == 100 * 5 + (100 * 13 + 40 * 13.5)
    assert unit_load(node, 4, counts, per) == 100 * 5 + (100 * 13 + 40 * 13.5) / 4
    # a record's cost: per record, per prefix entry (index prefix indexed, probe prefix probed), per token
    uc = UnitCosts(index_record=4.0, probe_record=12.0, index_entry=2.0, probe_entry=3.0, token=0.5)
    got = uc.per_record([2, 3], 0.6, "jaccard")
    ip, pp = index_prefix_array("jaccard", 0.6, np.array([2, 3])), probe_prefix_array("jaccard", 0.6, np.array([2, 3]))
    assert got[2] == (4 + 2 * ip[0] + 1.0, 12 + 3 * pp[0] + 1.0)
    assert got[3] == (4 + 2 * ip[1] + 1.5, 12 + 3 * pp[1] + 1.5)
    assert UnitCosts.none().per_record([5], 0.8, "jaccard") == {5: (0.0, 0.0)}


def test_search_plan_balances_records_on_short_records() -> None:
    """AOL-like: almost no posting work, most records of length 1-4, so the records a unit holds
    decide its time. The plan balances them (not only the work), and each unit's est_cost is
    its work / m_k plus its records' load."""
    lengths = np.arange(1, 9)
    counts = np.array([300_000, 250_000, 200_000, 150_000, 40_000, 30_000, 20_000, 10_000])
    costs = {int(length): 1_000.0 for length in lengths}
    costs[1] = 2_000_000.0  # length 1: every candidate is a result
    plan = search_plan(lengths, counts, 0.8, slots=2, memory_bytes=2**40, costs=costs)
    by_len = dict(zip(lengths.tolist(), counts.tolist(), strict=True))
    est = [u.est_cost for u in plan.units]
    assert max(est) / min(est) <= 1.25 * 1.25
    for u in plan.units:
        nd = NodeSlices(u.node, u.index_lengths, u.probe_lengths, 0)
        mk = plan.unit_mod(u)
        work = sum(costs[i] for i in u.index_lengths) / mk
        per_record = UnitCosts().per_record(by_len, 0.8, "jaccard")
        assert u.est_cost == pytest.approx(work + unit_load(nd, mk, by_len, per_record))
    # the same plan priced on work alone would put its units far apart: the records are its cost
    assert max(u.est_cost for u in plan.units) > 10 * max(sum(costs[i] for i in u.index_lengths) / plan.unit_mod(u)
                                                          for u in plan.units if 1 not in u.index_lengths)


def test_search_plan_units_follow_slots_and_errors() -> None:
    lengths, counts, costs = _search_case()
    assert search_plan(lengths, counts, 0.8, slots=3, memory_bytes=2**40, costs=costs).search[0].t == 6
    assert search_plan(lengths, counts, 0.8, slots=3, memory_bytes=2**40, costs=costs,
                       total_units=5).search[0].t == 5
    with pytest.raises(ValueError, match="too small"):
        search_plan(lengths, counts, 0.8, slots=2, memory_bytes=2**20, costs=costs)
    with pytest.raises(ValueError, match="costs lack the lengths"):
        search_plan(lengths, counts, 0.8, slots=2, memory_bytes=2**40, costs={4: 1.0})
    with pytest.raises(ValueError, match="slots"):
        search_plan(lengths, counts, 0.8, slots=0, memory_bytes=2**40)


def test_distribute_slices_balance_refines_lpt_on_real_node_costs() -> None:
    """LPT deals slices by their own cost; a node's real cost also holds the records of its probe
    ranges. ``balance`` refines the dealing by moves and swaps: the same slices, every node kept,
    and a costliest/cheapest ratio no wider than LPT's (here strictly narrower)."""
    lengths = list(range(1, 21))
    counts = {i: 50_000 if i <= 4 else 5_000 for i in lengths}
    costs = {i: 1_000 * i for i in lengths}
    per = UnitCosts().per_record(counts, 0.6, "jaccard")

    def real(nd: NodeSlices) -> float:
        return sum(costs[i] for i in nd.index_lengths) + unit_load(nd, 1, counts, per)

    for n in (2, 3, 4, 6):
        lpt = distribute_slices(costs, n, theta=0.6, greedy=True)
        ref = distribute_slices(costs, n, theta=0.6, greedy=True, balance=real)
        assert sorted(i for nd in ref for i in nd.index_lengths) == lengths
        assert all(nd.index_lengths for nd in ref)
        dev = [max(map(real, d)) / min(map(real, d)) for d in (lpt, ref)]
        assert dev[1] <= dev[0] + 1e-9
        if n == 4:
            assert dev[1] < dev[0]
