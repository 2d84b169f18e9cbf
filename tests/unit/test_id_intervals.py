"""``id_intervals``: the intervals a partition reports so that repeated ids are found without a shuffle."""

from __future__ import annotations

import numpy as np

from simjoin.operators.setsim import id_intervals, ranges_overlap


def test_intervals_cover_every_id_and_are_disjoint() -> None:
    rng = np.random.default_rng(3)
    for k in (1, 2, 5, 64):
        ids = np.sort(rng.choice(10_000, 700, replace=True))
        lo, hi = id_intervals(ids, k)
        assert lo.size <= k and (lo <= hi).all() and (hi[:-1] < lo[1:]).all()
        inside = (ids[:, None] >= lo) & (ids[:, None] <= hi)
        assert inside.any(axis=1).all()


def test_partitions_read_from_interleaved_blocks_do_not_overlap() -> None:
    """Two partitions, each two files (id blocks) of another's range: one range each would
    overlap and force a shuffle; the intervals show they share no id, and a shared id still shows."""
    a = np.concatenate([np.arange(0, 100), np.arange(200, 300)])
    b = np.concatenate([np.arange(100, 200), np.arange(300, 400)])
    (la, ha), (lb, hb) = id_intervals(a), id_intervals(b)
    side = np.zeros(la.size + lb.size, np.int32)
    assert not ranges_overlap(side, np.concatenate([la, lb]), np.concatenate([ha, hb]))
    one_range = np.array([0, 100]), np.array([299, 399])
    assert ranges_overlap(np.zeros(2, np.int32), *one_range)
    b2 = np.sort(np.append(b, 250))  # id 250 in both partitions
    lb, hb = id_intervals(b2)
    assert ranges_overlap(np.zeros(la.size + lb.size, np.int32), np.concatenate([la, lb]), np.concatenate([ha, hb]))
