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
