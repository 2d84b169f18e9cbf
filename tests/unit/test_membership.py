"""``simjoin.core.membership`` equals a set lookup: bitmap and binary-search groups, ids at the
int64 extremes, groups absent from the index, an empty index, and OR into an existing mask."""

from __future__ import annotations

import numpy as np
import pytest

from simjoin.core.membership import member_of, staged_index

I64 = np.iinfo(np.int64)


@pytest.mark.parametrize("seed", range(8))
def test_member_of_equals_a_set_lookup(seed):
    rng = np.random.default_rng(seed)
    n_staged = int(rng.integers(0, 300))
    span = [100, 1 << 40, 1 << 62][seed % 3]
    g = rng.integers(-2, 3, n_staged)
    v = rng.integers(-span, span, n_staged)
    if n_staged > 2:
        v[:2] = [I64.min, I64.max]
    idx = staged_index(g, v)
    n = 4000
    pool = np.concatenate([v, rng.integers(-span, span, 100), [I64.min, I64.max, 0]])
    qg = rng.integers(-3, 4, n)
    qv = rng.choice(pool, n)
    want = np.array([(a, b) in set(zip(g.tolist(), v.tolist())) for a, b in zip(qg.tolist(), qv.tolist())])
    assert np.array_equal(member_of(qg, qv, idx), want)
    prior = rng.random(n) < 0.3
    assert np.array_equal(member_of(qg, qv, idx, prior.copy()), want | prior)


def test_compact_groups_get_a_bitmap_and_sparse_ones_none():
    idx = staged_index(np.array([0, 0, 1, 1]), np.array([5, 9, 0, 1 << 60]))
    assert idx.bit_at[0] >= 0 and idx.bit_at[1] == -1
    assert member_of(np.array([0, 0, 1, 1, 2]), np.array([5, 6, 1 << 60, 1, 5]), idx).tolist() == [
        True, False, True, False, False]
