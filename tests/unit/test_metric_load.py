"""Workset load formula and the workset balancer (S3J Section 8, Algorithm 1)."""

from __future__ import annotations

import numpy as np
import pytest

from simjoin.core.metric import (
    assign_worksets_greedy,
    balance_worksets,
    comparisons_ratio,
    imbalance,
    needs_rebalance,
    worker_loads,
    workset_load,
)


def test_workset_load_formula() -> None:
    # new: i inner, u outlier, o outer; state: I, U, O
    i, u, o, s_i, s_u, s_o = 3, 2, 5, 7, 11, 13
    expect = u * (s_o + s_u + s_i) + o * (s_i + s_u) + i * (s_o + s_u) + u * (o + i) + o * i + u * (u - 1) / 2
    assert workset_load(i, u, o, s_i, s_u, s_o) == expect
    # cleared state: inner x outlier + inner x outer + outlier x outer + outlier pairs
    assert workset_load(4, 3, 2) == 4 * 3 + 4 * 2 + 3 * 2 + 3
    assert workset_load(10, 0, 0) == 0  # inner x inner is free
    np.testing.assert_array_equal(workset_load([1, 2], [0, 1], [1, 1]), [1, 2 + 1 + 2])


def test_ratios_and_imbalance() -> None:
    assert comparisons_ratio(10, 4) == 2.5
    assert comparisons_ratio(7, 0) == 7.0
    assert comparisons_ratio(0, 0) == 0.0
    assert imbalance([1, 2, 3]) == 2.0
    assert not needs_rebalance([100, 110, 90])
    assert needs_rebalance([100, 130, 70])
    assert not needs_rebalance([0, 0])
    assert worker_loads([1, 2, 3], [0, 0, 2], 3).tolist() == [3, 0, 3]
    with pytest.raises(ValueError, match="worker ids"):
        worker_loads([1], [3], 3)


def test_greedy_assignment_is_balanced() -> None:
    rng = np.random.default_rng(0)
    load = rng.pareto(2.0, size=200) * 100
    w = assign_worksets_greedy(load, 5)
    L = worker_loads(load, w, 5)
    assert L.max() - L.min() <= load.max()
    assert set(w.tolist()) == set(range(5))


def test_balancer_reduces_imbalance_and_pins_heaviest() -> None:
    # worker 0 holds everything; workset 0 is heavier than the average -> pinned
    load = np.array([500.0, 100, 90, 80, 70, 60, 50, 40, 10])
    worker = np.zeros(len(load), dtype=np.int64)
    res = balance_worksets(load, worker, 3)
    assert res.fired
    assert res.pinned.tolist() == [0]
    assert res.worker[0] == 0
    assert res.imbalance_after < res.imbalance_before
    assert res.imbalance_after == imbalance(worker_loads(load, res.worker, 3))
    assert len(res.moved) > 0 and (res.worker[res.moved] != 0).all()


def test_balancer_does_not_fire_within_trigger() -> None:
    load = np.array([10.0, 11, 9])
    res = balance_worksets(load, np.arange(3), 3)
    assert not res.fired and np.array_equal(res.worker, np.arange(3))


def test_balancer_migration_cost_blocks_expensive_moves() -> None:
    load = np.array([60.0, 40, 10, 10])
    worker = np.array([0, 0, 1, 1])
    free = balance_worksets(load, worker, 2)
    assert len(free.moved) > 0
    costly = balance_worksets(load, worker, 2, size_bytes=np.full(4, 1e6), migration_factor=1.0)
    assert len(costly.moved) == 0 and np.array_equal(costly.worker, worker)


def test_rebalance_splits_an_oversized_workset_and_balances() -> None:
    from simjoin.core.metric import Assignment, rebalance

    # worker 0 holds one workset of 10x the rest: Algorithm 1 alone must pin it; splitting fixes it
    load = np.array([1000.0, 50, 60, 40, 70, 30, 80, 20])
    p = np.zeros(8, np.int64)
    g = np.arange(1, 9)
    home = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    size = np.full(8, 100.0)
    plain = rebalance(p, g, load, size, home, 4)
    assert plain.fired and plain.split == 0
    assert plain.load_after.max() == 1000.0  # the big workset stays where it is (irremovable)
    res = rebalance(p, g, load, size, home, 4, split=True)
    assert res.fired and res.split == 1
    assert res.load_after.max() / res.load_after.mean() <= 1.25
    assert res.imbalance_after < res.imbalance_before
    a = res.assignment
    big = a.workset_id == 1
    # min(P, ceil(2 x 1000 / average 337.5)) = 4 parts on four workers
    assert a.parts[big].tolist() == [4, 4, 4, 4] and len(set(a.worker[big].tolist())) == 4
    assert a.worker[big][0] == 0  # part 0 stays
    assert res.bytes_migrated >= 300  # three new parts, each with the workset's state
    # balanced: nothing fires, the assignment is kept
    again = rebalance(p[:4], g[:4], np.full(4, 10.0), size[:4], np.arange(4), 4, previous=Assignment.empty())
    assert not again.fired and len(again.assignment) == 0
    # a workset without load now keeps its placement
    later = rebalance(p[1:], g[1:], load[1:], size[1:], home[1:], 4, previous=a, split=True)
    assert (later.assignment.workset_id == 1).sum() == 4
    assert isinstance(later.assignment, Assignment)


def test_split_rows_each_pair_once() -> None:
    from simjoin.core.metric import INNER, OUTER, OUTLIER, split_rows

    rng = np.random.default_rng(0)
    n = 60
    role = rng.choice([INNER, OUTLIER, OUTER], n)
    new = rng.random(n) < 0.6
    ids = np.arange(n)
    for k in (1, 2, 3, 5):
        row, part, isn = split_rows(role, new, np.zeros(n), ids, np.full(n, k))
        met: dict[tuple[int, int], int] = {}
        for q in range(k):
            s = row[part == q]
            fl = isn[part == q]
            for i in range(s.size):
                for j in range(i + 1, s.size):
                    a, b = s[i], s[j]
                    if not (fl[i] or fl[j]) or (role[a] == OUTER and role[b] == OUTER):
                        continue
                    met[(min(a, b), max(a, b))] = met.get((min(a, b), max(a, b)), 0) + 1
        want = {(a, b) for a in range(n) for b in range(a + 1, n)
                if (new[a] or new[b]) and not (role[a] == OUTER and role[b] == OUTER)}
        assert set(met) == want and set(met.values()) == {1}
