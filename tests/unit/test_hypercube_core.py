"""Streaming HyperCube core: the heavy-hitter guarantee, the paper's running example, routing
(every pair in exactly one task), migration volume, and exactness over micro-batches against a
plain join - keys turning heavy mid-stream and back, windows, counts."""

from __future__ import annotations

import os

import numpy as np
import pytest

from simjoin.core.hypercube.bruteforce import equi_counts, equi_pairs
from simjoin.core.hypercube.dispatch import Dispatcher, Grid
from simjoin.core.hypercube.route import moved_copies, route
from simjoin.core.hypercube.sketch import Summary, counters_for, exact_counts, merge_all
from simjoin.core.hypercube.stream import HyperCubeStream

CASES = int(os.environ.get("SIMJOIN_PROPERTY_CASES", "24"))


def zipf_keys(rng: np.random.Generator, n: int, alpha: float, domain: int) -> np.ndarray:
    p = 1.0 / np.arange(1, domain + 1) ** alpha
    return rng.choice(domain, n, p=p / p.sum()).astype(np.int64) * 7 + 3


@pytest.mark.parametrize("alpha", [0.0, 1.0, 1.5, 2.0])
@pytest.mark.parametrize("p", [4, 16])
def test_summary_underestimates_by_at_most_eps_n(alpha, p):
    rng = np.random.default_rng(int(alpha * 10) + p)
    eps = 1 / (2 * p)
    cap = counters_for(eps)
    side = rng.integers(0, 2, 20_000)
    keys = zipf_keys(rng, 20_000, alpha, 2000)
    # micro-batches merged one by one, as the pipeline does
    s = Summary.empty(cap)
    for a in range(0, 20_000, 3000):
        s = s.merge(Summary.of(cap, side[a:a + 3000], keys[a:a + 3000]))
    assert s.n == 20_000 and s.count.size <= cap
    ts, tk, tc = exact_counts(side, keys)
    for sd in (0, 1):
        est = s.estimate(sd, tk[ts == sd])
        true = tc[ts == sd]
        assert (est <= true).all()
        assert (true - est <= eps * s.n / 2).all()
    # the per-window summary: merging per-batch summaries keeps the bound
    parts = [Summary.of(cap, side[a:a + 5000], keys[a:a + 5000]) for a in range(0, 20_000, 5000)]
    m = merge_all(cap, parts)
    est = m.estimate(0, tk[ts == 0])
    assert (tc[ts == 0] - est <= eps * m.n / 2).all() and (est <= tc[ts == 0]).all()


def test_summary_from_top_counts_only():
    """A micro-batch may hand over only its top capacity+1 items (a top-k query): same guarantee."""
    rng = np.random.default_rng(3)
    side, keys = rng.integers(0, 2, 5000), zipf_keys(rng, 5000, 1.2, 500)
    cap = 16
    s, k, c = exact_counts(side, keys)
    top = np.argsort(-c, kind="stable")[: cap + 1]
    a = Summary.of(cap, s[top], k[top], c[top], n=5000)
    for sd in (0, 1):
        est = a.estimate(sd, k[s == sd])
        assert (est <= c[s == sd]).all() and (c[s == sd] - est <= 5000 / (cap + 1)).all()


def _summary(counts: dict[tuple[int, int], int], p: int) -> Summary:
    items = sorted(counts)
    return Summary.of(counters_for(1 / (2 * p)) * 4, np.array([i[0] for i in items]),
                      np.array([i[1] for i in items]), np.array([counts[i] for i in items]))


def test_running_example_p8():
    """Section 3.3: p = 8; b1 (100 R, 100 S) on a 2 x 2 grid and b2 (50 R, 200 S) on 1 x 4; 50
    light tuples. S(b1) grows to 300: p_S(b1)^d = 4.243 > 2 * 2, so b1 goes to 2 x 4 (4 new
    tasks); b2's desired sides (0.707, 2.828) keep its 1 x 4 grid."""
    p, b1, b2 = 8, 101, 202
    light = {(s, 1000 + i): 1 for i in range(50) for s in (i % 2,)}
    d0, steps, want = Dispatcher(p, 1 / 16, assign="tasks").plan(_summary({(0, b1): 100, (1, b1): 100, (0, b2): 50,
                                                             (1, b2): 200, **light}, p))
    assert (d0.grids[b1].p_r, d0.grids[b1].p_s) == (2, 2)
    assert (d0.grids[b2].p_r, d0.grids[b2].p_s) == (1, 4)
    assert want[b1] == pytest.approx((2.0, 2.0)) and want[b2] == pytest.approx((1.0, 4.0))
    assert sorted(s.action for s in steps) == ["heavy", "heavy"]
    d1, steps, want = d0.plan(_summary({(0, b1): 100, (1, b1): 300, (0, b2): 50, (1, b2): 200, **light}, p))
    assert want[b1] == pytest.approx((1.414, 4.243), abs=1e-3)
    assert want[b2] == pytest.approx((0.707, 2.828), abs=1e-3)
    assert [(s.key, s.action, s.before, s.after) for s in steps] == [(b1, "double_s", (2, 2), (2, 4))]
    g0, g1 = d0.grids[b1], d1.grids[b1]
    assert (g1.tasks[:, :2] == g0.tasks).all()  # old tasks keep their place; 4 new tasks
    assert len(set(g1.tasks[:, 2:].ravel()) - set(g0.tasks.ravel())) == 4
    assert (d1.grids[b2].tasks == d0.grids[b2].tasks).all()
    # the new tasks go to the workers with the fewest tasks
    assert d1.tasks_per_worker().max() - d1.tasks_per_worker().min() <= 1
    # migration: doubling p_S sends every R(b1) tuple to the p_S new tasks of its row, and moves
    # the S(b1) tuples whose new hash bit is 1 to (x, y + p_S) - in every row
    rng = np.random.default_rng(0)
    ids = rng.permutation(10_000)[:400].astype(np.int64)
    side = np.r_[np.zeros(100), np.ones(300)].astype(np.int64)
    moved = moved_copies(g0, g1, side, ids, b1, p)
    from simjoin.core.hypercube.dispatch import coordinate

    bit = (coordinate(ids[100:]) >> 1) & 1
    assert moved == 100 * 2 + int(bit.sum()) * 2
    # halving back: the upper columns' R copies are released, moved S tuples come back
    assert moved_copies(g1, g0, side, ids, b1, p) == int(bit.sum()) * 2


def test_every_pair_meets_in_exactly_one_task():
    p = 8
    g = Grid(5, np.arange(8, 16).reshape(2, 4))
    d = Dispatcher(p, 1 / 16, {5: g}, {t: t % p for t in range(8, 16)}, 16)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 1 << 40, 300)
    side = np.r_[np.zeros(150), np.ones(150)].astype(np.int64)
    keys = np.where(rng.random(300) < 0.7, 5, rng.integers(100, 110, 300))
    c = route(side, ids, keys, d)
    where: dict[int, set[int]] = {}
    for r, t in zip(c.row.tolist(), c.task.tolist(), strict=True):
        where.setdefault(r, set()).add(t)
    for i in range(150):
        for j in range(150, 300):
            if keys[i] == keys[j]:
                assert len(where[i] & where[j]) == 1


def _stream(rng, n, alpha, domain, base):
    return dict(id=np.arange(n, dtype=np.int64) * 2 + base, ts=np.sort(rng.uniform(0, 120e6, n)).astype(np.int64),
                k=zipf_keys(rng, n, alpha, domain))


def _run(L, R, pieces, p, window_us=0, count_only=False, eps=None):
    hc = HyperCubeStream(p, eps, window_us, count_only)
    n = len(L["id"])
    got, counts, steps = [], {}, []
    for piece in range(pieces):
        m = (np.arange(n) * pieces // n) == piece
        side = np.r_[np.zeros(m.sum()), np.ones(m.sum())]
        r = hc.process(side, np.r_[L["id"][m], R["id"][m]], np.r_[L["ts"][m], R["ts"][m]], np.r_[L["k"][m], R["k"][m]])
        got += list(zip(r.left.tolist(), r.right.tolist(), strict=True))
        for k, c in zip(r.count_keys.tolist(), r.counts.tolist(), strict=True):
            counts[k] = counts.get(k, 0) + c
        steps += r.steps
    return got, counts, steps, hc


@pytest.mark.parametrize("case", range(CASES))
def test_exact_over_micro_batches(case):
    rng = np.random.default_rng(1000 + case)
    alpha = [0.0, 1.0, 1.5, 2.0][case % 4]
    n = int(rng.integers(50, 500))
    p = int(rng.choice([2, 4, 8, 16]))
    window = int(rng.choice([0, 0, 10_000_000, 30_000_000]))
    pieces = int(rng.integers(1, 6))
    L, R = _stream(rng, n, alpha, int(rng.integers(3, 200)), 1), _stream(rng, n, alpha, 150, 1_000_001)
    R["k"] = np.where(rng.random(n) < 0.5, L["k"][rng.permutation(n)], R["k"])  # shared keys, ties on ts too
    R["ts"] = np.sort(np.r_[L["ts"][: n // 3], R["ts"][n // 3:]])  # equal timestamps across streams
    got, _, _, _ = _run(L, R, pieces, p, window)
    ref = equi_pairs(L["id"], L["k"], R["id"], R["k"], L["ts"], R["ts"], window)
    assert len(got) == len(set(got)) and set(got) == ref
    _, counts, _, _ = _run(L, R, pieces, p, window, count_only=True)
    want: dict[int, int] = {}
    for a, b in ref:
        k = int(L["k"][(a - 1) // 2])
        want[k] = want.get(k, 0) + 1
    assert {k: c for k, c in counts.items() if c} == want


def test_window_boundary_is_strict():
    W = 10_000_000
    L = dict(id=np.array([1, 3, 5]), ts=np.array([0, 5_000_000, 20_000_000]), k=np.array([7, 7, 7]))
    R = dict(id=np.array([2, 4, 6]), ts=np.array([10_000_000, 10_000_000, 29_999_999]), k=np.array([7, 7, 7]))
    got, _, _, _ = _run(L, R, 3, 4, W)
    assert set(got) == equi_pairs(L["id"], L["k"], R["id"], R["k"], L["ts"], R["ts"], W)
    assert (1, 2) not in got and (5, 6) in got


def test_key_turns_heavy_and_back_loses_nothing():
    """A key light in the first micro-batches, heavy in the middle ones, light again after."""
    rng = np.random.default_rng(9)
    parts = []
    for hot in (0.0, 0.0, 0.9, 0.9, 0.0, 0.0, 0.0, 0.0):
        k = np.where(rng.random(200) < hot, 42, rng.integers(1000, 1400, 200))
        parts.append(k)
    keys = np.concatenate(parts)
    n = keys.size
    L = dict(id=np.arange(n) * 2 + 1, ts=np.arange(n) * 1000, k=keys)
    R = dict(id=np.arange(n) * 2 + 2, ts=np.arange(n) * 1000, k=np.roll(keys, 37))
    for window in (0, 600_000):
        got, _, steps, hc = _run(L, R, 8, 8, window)
        acts = [s.action for s in steps if s.key == 42]
        assert acts[0] == "heavy"
        if window:
            assert "light" in acts  # the window forgot the hot phase
        assert len(got) == len(set(got))
        assert set(got) == equi_pairs(L["id"], L["k"], R["id"], R["k"], L["ts"], R["ts"], window)


def test_counts_many_to_many_without_pairs():
    rng = np.random.default_rng(4)
    L, R = _stream(rng, 3000, 2.0, 100, 1), _stream(rng, 3000, 2.0, 100, 1_000_001)
    _, counts, steps, hc = _run(L, R, 5, 16, count_only=True)
    assert counts == equi_counts(L["k"], R["k"])
    assert steps and hc.disp.grids
    r = hc.process(np.zeros(1), np.array([10**9]), np.array([130_000_000]), np.array([10**6]))
    assert r.loads.max() <= 1.5 * r.bound * 1.5 and r.phj.max() > r.loads.max()


def test_bad_parameters_fail_early():
    with pytest.raises(ValueError, match="epsilon 0.5: allowed"):
        Dispatcher(4, 0.5)
    with pytest.raises(ValueError, match="workers 0"):
        Dispatcher(0, 0.1)
    with pytest.raises(ValueError, match="epsilon"):
        counters_for(0)


def test_generator_allows_uniform_keys():
    from jobs.generate.config import GenerateConfig
    from simjoin.core.datagen import gen_keys

    GenerateConfig(kind="keys", out="/tmp/x", alpha=0.0)
    k = gen_keys(0, 20_000, 0.0, 10, 1)
    assert set(np.unique(k)) == set(range(10)) or set(np.unique(k)) == set(range(1, 11))
    assert np.bincount(k).max() < 2 * np.bincount(k)[np.bincount(k) > 0].min()
