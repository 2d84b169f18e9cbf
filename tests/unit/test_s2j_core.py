"""S2J core (``simjoin.core.s2j``): the task grammar, every adaptation formula against values
computed by hand, and the operator against brute force pair for pair - every task type, ties and
boundary values, self- and two-stream joins, streams cut into micro-batches anywhere, concurrent
tasks equal to each task alone, forced overload (shed + processed = input, exact on what is
processed), and scaling up and down.

``SIMJOIN_PROPERTY_CASES`` (default 80) sets the number of random cases."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from simjoin.core.s2j import adapt
from simjoin.core.s2j.adapt import Thresholds
from simjoin.core.s2j.bruteforce import brute_force
from simjoin.core.s2j.join import Block, probe
from simjoin.core.s2j.operator import S2JParams, S2JStream, make_tuples
from simjoin.core.s2j.task import TaskError, parse_task, parse_tasks

CASES = int(os.environ.get("SIMJOIN_PROPERTY_CASES", "80"))
TASKS = ["gap: abs(l.a - r.a) > 4", "eq: l.k = r.k AND l.b < r.b", "band: abs(l.a - r.b) <= 2.5",
         "ineq: l.a + 1 >= r.b", "multi: l.a < r.a AND abs(l.b - r.b) < 1.5 AND l.k != r.k",
         "sel: l.a > 5 AND l.b <= r.b AND r.k <= 2", "gap0: abs(l.b - r.a) >= 0", "eqoff: l.k + 1 = r.k",
         "gapd: abs(l.d - r.d) > 0.3", "bandd: abs(r.d - l.d) < 0.3", "lt: l.d - 0.1 < r.d", "ne: l.k != r.k"]


# ---------------------------------------------------------------- the task grammar

def test_task_forms_and_the_index_each_leads_with():
    t = parse_task("gap: abs(l.pm25 - r.pm25) > 30")
    assert (t.kind, t.index, t.main_theta.family) == ("gap", "sorted", "gap")
    t = parse_task("eq: l.station = r.station AND l.pm10 < r.pm10")
    assert (t.kind, t.index, t.main_theta.left, [a.op for a in t.aux]) == ("multi-attribute", "hash", "station", ["<"])
    t = parse_task("x: r.b > l.a + 5")  # r written first: normalised to l.a + 5 < r.b
    assert str(t) == "x: l.a + 5 < r.b" and parse_task(str(t)) == t
    t = parse_task("s: l.a > 100 AND abs(r.b - l.c) <= 2")
    assert [str(s) for s in t.selections] == ["l.a > 100"] and t.main_theta.left == "c"
    assert t.columns("l") == ("a", "c") and t.columns("r") == ("b",)
    assert parse_task("n: l.k != r.k").index == "scan"


def test_main_predicate_follows_domain_statistics():
    text = "m: l.k = r.k AND l.a < r.a"
    assert parse_task(text).main_theta.op == "="  # no statistics: the hash index leads
    skewed = parse_task(text, domain={"k": 0.9, "a": 0.01})
    assert skewed.main_theta.op == "<" and [a.op for a in skewed.aux] == ["="]


@pytest.mark.parametrize("text, needle", [
    ("gap abs(l.a - r.a) > 3", "NAME: PREDICATE"),
    ("_x: l.a < r.a", "NAME: PREDICATE"),
    ("g: abs(l.a - r.a) = 3", "needs <, <=, > or >="),
    ("g: l.a < l.b", "compares two columns of role l"),
    ("g: l.a << r.a", "unexpected token '<<' at position 4"),
    ("g: l.id < r.a", "reserved"),
    ("g: l.a > 3", "at least one predicate between l and r"),
    ("g: ", "empty predicate"),
])
def test_bad_tasks_fail_with_one_line(text, needle):
    with pytest.raises(TaskError) as e:
        parse_task(text)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_task_lists_unknown_columns_and_duplicates():
    assert [t.name for t in parse_tasks("a: l.x < r.x; b: abs(l.y - r.y) > 1")] == ["a", "b"]
    with pytest.raises(TaskError, match="unknown column 'zz'"):
        parse_tasks(["a: l.zz < r.x"], columns=["x", "y"])
    with pytest.raises(TaskError, match="'a' is used twice"):
        parse_tasks(["a: l.x < r.x", "a: l.y < r.y"])


# ---------------------------------------------------------------- formulas, by hand

TH = Thresholds(tau0=0.2, tau1=0.8, tau2=0.9, beta=0.5, base=0.1)


def test_utilization_and_initial_workers():
    assert adapt.utilization(6000, 3, 4000) == pytest.approx(0.5)  # 2000 per worker / 4000
    assert adapt.utilization(6000, 3, None) == 0.0  # no capacity: never overloaded
    # m = ceil(E(rate)·φ / (W·τ*)) = ceil(100·60 / (1000·0.4)) = 15
    assert TH.tau_star == pytest.approx(0.4)
    assert adapt.initial_workers(100, 60, 1000, TH) == 15
    assert adapt.initial_workers(101, 60, 1000, TH) == 16  # 6060/400 = 15.15
    assert adapt.initial_workers(1e6, 60, 1000, TH) == TH.max_workers


def test_shed_ratio_linear_and_quadratic():
    assert adapt.shed_ratio(0.8, TH) == 0.0 and adapt.shed_ratio(0.5, TH) == 0.0
    # linear: B + (1 - B)/(1 - τ1)·(τ - τ1) = 0.1 + 0.9/0.2·0.1 = 0.55
    assert adapt.shed_ratio(0.9, TH) == pytest.approx(0.55)
    quad = Thresholds(tau0=0.2, tau1=0.8, tau2=0.9, beta=0.5, base=0.1, model="quadratic")
    # quadratic: B + (1 - B)·((τ - τ1)/(1 - τ1))² = 0.1 + 0.9·0.25 = 0.325
    assert adapt.shed_ratio(0.9, quad) == pytest.approx(0.325)
    assert adapt.shed_ratio(1.5, TH) == 1.0 and adapt.shed_ratio(1.0, quad) == pytest.approx(1.0)
    assert adapt.shed_count(0.55, 200) == 110 and adapt.shed_count(0.0, 200) == 0 and adapt.shed_count(1.0, 7) == 7


def test_shed_mask_is_deterministic_and_exact_in_count():
    ids = np.arange(1000, dtype=np.int64)
    sides = ids % 2
    a, b = adapt.shed_mask(sides, ids, 137), adapt.shed_mask(sides, ids, 137)
    assert a.sum() == 137 and (a == b).all()
    assert 40 < a[sides == 0].sum() < 100  # spread over both streams, not the first ids
    assert not adapt.shed_mask(sides, ids, 0).any()


def test_block_size_solves_problem_1():
    # α <= 0.5: ς1 = N / ⌈N/β⌉ with β = min(τ1·W - N, N)
    assert adapt.block_size(1000, 2000, 0.8, 0.3) == pytest.approx(1000 / math.ceil(1000 / 600))  # β = 600 -> 500
    # α = 0.8, no capacity: ς* = 0.5·N = 500 < β = N; ς_i = N/i -> {500, 333.3}; f(500) = 0.8 < f(333) = 0.867
    assert adapt.block_size(1000, None, 0.8, 0.8) == pytest.approx(500)
    assert adapt.problem1_cost(500, 1000, 0.8) == pytest.approx(0.8)
    assert adapt.problem1_cost(1000 / 3, 1000, 0.8) == pytest.approx(0.2 * 3 + 0.8 / 3)
    # α = 0.9, N = 900: ς* = 300; candidates 300 (ST 3) and 225 (ST 4): f = 0.6 vs 0.625
    assert adapt.block_size(900, None, 0.8, 0.9) == pytest.approx(300)
    # ς* >= β = τ1·W - N: ς1 = N / ⌈N/β⌉ = 1000 / ⌈1000/200⌉ = 200
    assert adapt.block_size(1000, 1500, 0.8, 0.8) == pytest.approx(200)
    # too few workers (N >= τ1·W): the paper's footnote, ς = 1
    assert adapt.block_size(1000, 1200, 0.8, 0.8) == 1.0
    assert adapt.block_candidates(1000, 300, 3) == pytest.approx([250, 200, 1000 / 6])


def test_scaling_needs_a_sustained_load():
    th = Thresholds(tau0=0.2, tau1=0.8, tau2=0.9, beta=0.5, sustain=2, max_workers=10)
    # 2 workers of 100: load 190 -> τ = 0.95 > τ2; first time only a streak
    assert adapt.scaled_workers(190, 2, 100, th, 0, 0) == (2, 1, 0)
    # sustained: to ⌈190 / (100·0.4)⌉ = 5 workers
    assert adapt.scaled_workers(190, 2, 100, th, 1, 0) == (5, 0, 0)
    # τ = 30/(5·100) = 0.06 < τ0 twice: down to ⌈30/40⌉ = 1
    assert adapt.scaled_workers(30, 5, 100, th, 0, 1) == (1, 0, 0)
    assert adapt.scaled_workers(30, 5, None, th, 5, 5) == (5, 0, 0)  # no capacity: no scaling
    d = adapt.decide(150, 50, 2, 100, th, 0.8, high=1)
    assert (d.workers, d.scaled, d.shed) == (5, 1, 0) and d.tau == pytest.approx(200 / 500)


def test_window_load_is_what_the_window_holds_at_once():
    s = 1_000_000
    # no state, four arrivals within W: all of them
    assert adapt.window_load(np.array([0, 1, 2, 3]) * s, [], 15 * s) == (4.0, 4.0)
    # arrivals 10 s apart, W = 15 s: at most 2 at once, however long the micro-batch
    assert adapt.window_load(np.arange(0, 100, 10) * s, [], 15 * s) == (2.0, 2.0)
    # a stored block of 10 tuples over [0, 10] s; arrivals at 20 and 30 s, W = 15 s:
    # before any arrival the state holds 10; at 20 s, tuples after 5 s: half the block + 1 = 6
    assert adapt.window_load(np.array([20, 30]) * s, [(0, 10 * s, 10)], 15 * s) == (10.0, 0.0)
    # arrivals at 0..4 s while the block is still whole: 10 + 5 = 15, of which 5 incoming
    assert adapt.window_load(np.arange(5) * s, [(0, 10 * s, 10)], 15 * s) == (15.0, 5.0)


def test_assign_blocks_keeps_workers_within_one_block():
    out = adapt.assign_blocks([100] * 8, [0] * 8, 4, 100)
    loads = np.bincount(out, weights=[100] * 8, minlength=4)
    assert loads.max() - loads.min() <= 100
    # released workers' blocks move; kept workers keep theirs
    out = adapt.assign_blocks([10, 10, 10, 10], [0, 1, 2, 3], 2, 10)
    assert out[:2] == [0, 1] and sorted(out) == [0, 0, 1, 1]


def test_thresholds_are_checked():
    with pytest.raises(ValueError, match="tau0 < tau"):
        Thresholds(tau0=0.5, tau1=0.8)
    with pytest.raises(ValueError, match="linear, quadratic"):
        Thresholds(model="cubic")


# ---------------------------------------------------------------- exactness

def _stream(rng, n, base, t_max=60):
    ts = np.sort(rng.integers(0, t_max, n)) * 1_000_000  # whole seconds: ties and exact window bounds
    return make_tuples(np.arange(n) * 3 + base, ts, {
        "a": rng.integers(0, 12, n).astype(float), "b": rng.integers(0, 9, n) * 0.5,
        "k": rng.integers(0, 4, n).astype(float), "d": np.round(rng.uniform(0, 2, n), 1)})


def _cuts(rng, n, parts):
    return np.split(np.arange(n), np.sort(rng.integers(0, n + 1, parts - 1)))


def _run(op, L, R, rng, parts):
    cl = _cuts(rng, len(L), parts)
    cr = _cuts(rng, len(R), parts) if R is not None else None
    got = {t.name: [] for t in op.p.tasks}
    shed = {0: [], 1: []}
    for b in range(parts):
        new = {0: L.take(cl[b])}
        if R is not None:
            new[1] = R.take(cr[b])
        res = op.step(new)
        for k, v in res.pairs.items():
            got[k] += v
        for s, ids in res.shed.items():
            shed[s] += ids.tolist()
    return got, shed


def test_operator_equals_brute_force_on_random_streams():
    for case in range(CASES):
        rng = np.random.default_rng(case)
        self_join = case % 3 == 0
        L = _stream(rng, int(rng.integers(0, 90)), 1)
        R = None if self_join else _stream(rng, int(rng.integers(0, 90)), 2)
        W = int(rng.integers(1, 25)) * 1_000_000
        tasks = parse_tasks(list(rng.choice(TASKS, size=int(rng.integers(1, 5)), replace=False)))
        op = S2JStream(S2JParams(tasks, W, self_join), workers=int(rng.integers(1, 4)),
                       min_block=int(rng.integers(1, 30)))
        got, _ = _run(op, L, R, rng, int(rng.integers(1, 5)))
        for t in tasks:
            ref = brute_force(t, L, R, W)
            assert len(got[t.name]) == len(set(got[t.name])), (case, t.name, "a pair reported twice")
            assert set(got[t.name]) == ref, (case, str(t), len(ref - set(got[t.name])), len(set(got[t.name]) - ref))


def test_concurrent_tasks_equal_each_task_alone():
    rng = np.random.default_rng(7)
    L, R = _stream(rng, 120, 1), _stream(rng, 120, 2)
    tasks = parse_tasks(TASKS)
    together, _ = _run(S2JStream(S2JParams(tasks, 10_000_000, False), min_block=16), L, R,
                       np.random.default_rng(1), 3)
    for t in tasks:
        alone, _ = _run(S2JStream(S2JParams((t,), 10_000_000, False), min_block=16), L, R, np.random.default_rng(1), 3)
        assert sorted(alone[t.name]) == sorted(together[t.name]), t.name


def test_boundaries_strict_and_inclusive():
    # |l.d - r.d| exactly 0.3 in decimal is 0.30000000000000004 or 0.29999999999999993 in float64:
    # the literal evaluation decides, in the kernel as in the brute force
    d = np.round(np.arange(0, 2.0, 0.1), 1)
    n = d.shape[0]
    L = make_tuples(np.arange(n), np.zeros(n, np.int64), {"d": d})
    R = make_tuples(np.arange(n) + 100, np.full(n, 5_000_000), {"d": d})
    for text in ("g: abs(l.d - r.d) > 0.3", "g: abs(l.d - r.d) >= 0.3", "g: abs(l.d - r.d) < 0.3",
                 "g: abs(l.d - r.d) <= 0.3", "g: l.d + 0.3 < r.d", "g: l.d + 0.3 <= r.d", "g: l.d = r.d - 0.3"):
        t = parse_task(text)
        for W, expect_any in ((5_000_000, False), (5_000_001, True)):  # 0 <= 5 s - 0 < W
            op = S2JStream(S2JParams((t,), W, False))
            got = op.step({0: L, 1: R}).pairs["g"]
            ref = brute_force(t, L, R, W)
            assert set(got) == ref and len(got) == len(ref) and bool(ref) == expect_any, (text, W)


def test_index_returns_exactly_the_main_predicates_tuples():
    rng = np.random.default_rng(3)
    S = _stream(rng, 300, 1)
    P = _stream(rng, 50, 2)
    for text in TASKS:
        t = parse_task(text)
        if t.selections:
            continue
        for role in ("l", "r"):
            res = probe(t, Block(S), P, role, 10**12)
            pi, si = res.probe_idx, res.stored_idx
            ls, rs = (S, P) if role == "l" else (P, S)
            li, ri = (si, pi) if role == "l" else (pi, si)
            ok = t.holds({k: v[li] for k, v in ls.cols.items()}, {k: v[ri] for k, v in rs.cols.items()})
            assert ok.all() and len(set(zip(pi.tolist(), si.tolist()))) == len(pi)
            full = t.holds({k: v[:, None] for k, v in ls.cols.items()}, {k: v[None, :] for k, v in rs.cols.items()})
            assert len(pi) == int(full.sum()), (text, role)
            if t.index != "scan" and len(t.thetas) == 1:
                assert res.candidates == len(pi)  # the index alone answers a one-predicate task


def test_empty_streams_and_equal_keys():
    z = make_tuples(np.zeros(0, np.int64), np.zeros(0, np.int64), {"k": np.zeros(0)})
    t = parse_task("e: l.k = r.k")
    op = S2JStream(S2JParams((t,), 1_000_000, False))
    assert op.step({0: z, 1: z}).pairs["e"] == []
    one = make_tuples(np.arange(50), np.zeros(50, np.int64), {"k": np.zeros(50)})
    two = make_tuples(np.arange(50) + 100, np.zeros(50, np.int64), {"k": -np.zeros(50)})  # -0.0 = 0.0
    assert len(op.step({0: one, 1: two}).pairs["e"]) == 2500


def test_forced_overload_sheds_by_the_model_and_stays_exact_on_what_is_processed():
    th = Thresholds(tau0=0.1, tau1=0.6, tau2=1.0, beta=0.5, base=0.2, sustain=1000)
    rng = np.random.default_rng(11)
    L, R = _stream(rng, 400, 1, t_max=100), _stream(rng, 400, 2, t_max=100)
    tasks = parse_tasks(["gap: abs(l.a - r.a) > 4", "eq: l.k = r.k AND l.b < r.b"])
    op = S2JStream(S2JParams(tasks, 30_000_000, False), workers=2, capacity=150, th=th, min_block=8)
    cl, cr = _cuts(rng, 400, 4), _cuts(rng, 400, 4)
    got = {t.name: [] for t in tasks}
    shed: dict[int, list[int]] = {0: [], 1: []}
    for b in range(4):
        blocks = [(x.block.ts_min, x.block.ts_max, len(x.block)) for x in op.stored]
        new = {0: L.take(cl[b]), 1: R.take(cr[b])}
        load, _ = adapt.window_load(np.concatenate([new[0].ts, new[1].ts]), blocks, 30_000_000)
        res = op.step(new)
        n = len(cl[b]) + len(cr[b])
        tau = load / (2 * 150)
        assert res.decision.tau == pytest.approx(tau)
        assert res.decision.shed_ratio == pytest.approx(adapt.shed_ratio(tau, th))
        assert sum(len(v) for v in res.shed.values()) == adapt.shed_count(res.decision.shed_ratio, n)
        for k, v in res.pairs.items():
            got[k] += v
        for s, ids in res.shed.items():
            shed[s] += ids.tolist()
    assert sum(map(len, shed.values())) > 100, "the test must overload"
    kept_l = L.take(np.flatnonzero(~np.isin(L.id, shed[0])))
    kept_r = R.take(np.flatnonzero(~np.isin(R.id, shed[1])))
    assert len(kept_l) + len(shed[0]) == len(L) and len(kept_r) + len(shed[1]) == len(R)
    for t in tasks:
        assert sorted(got[t.name]) == sorted(brute_force(t, kept_l, kept_r, 30_000_000))


def test_no_capacity_never_sheds():
    rng = np.random.default_rng(5)
    L, R = _stream(rng, 300, 1), _stream(rng, 300, 2)
    op = S2JStream(S2JParams(parse_tasks("g: abs(l.a - r.a) > 1"), 60_000_000, False))
    _, shed = _run(op, L, R, rng, 3)
    assert not shed[0] and not shed[1]


def test_scaling_up_and_down_stays_exact():
    th = Thresholds(tau0=0.3, tau1=0.95, tau2=0.96, beta=0.9, sustain=1, max_workers=8)
    rng = np.random.default_rng(2)
    # a burst, then a trickle: workers go up, then down
    L = _stream(rng, 300, 1, t_max=40)
    L2 = make_tuples(np.arange(20) * 3 + 5001, np.sort(rng.integers(200, 400, 20)) * 1_000_000,
                     {c: rng.integers(0, 9, 20).astype(float) for c in ("a", "b", "k", "d")})
    tasks = parse_tasks(["gap: abs(l.a - r.a) > 4", "e: l.k = r.k"])
    op = S2JStream(S2JParams(tasks, 30_000_000, True), workers=1, capacity=60, th=th, min_block=4)
    got = {t.name: [] for t in tasks}
    workers = []
    for idx in np.split(np.arange(300), [100, 200]):
        res = op.step({0: L.take(idx)})
        workers.append(res.decision.workers)
        for k, v in res.pairs.items():
            got[k] += v
    for idx in np.split(np.arange(20), [5, 10, 15]):
        res = op.step({0: L2.take(idx)})
        workers.append(res.decision.workers)
        assert not len(res.shed.get(0, []))
        for k, v in res.pairs.items():
            got[k] += v
    assert max(workers) > 1 and workers[-1] < max(workers), workers
    both = make_tuples(np.concatenate([L.id, L2.id]), np.concatenate([L.ts, L2.ts]),
                       {c: np.concatenate([L.cols[c], L2.cols[c]]) for c in L.cols})
    for t in tasks:
        assert sorted(got[t.name]) == sorted(brute_force(t, both, None, 30_000_000))
