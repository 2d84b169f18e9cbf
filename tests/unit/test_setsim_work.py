"""Measured slice costs (``simjoin.core.setsim.work``): W(i) against a count of the posting visits
PPJoin's candidate generation makes, record by record."""

from __future__ import annotations

import numpy as np
import pytest

from simjoin.core.setsim.similarity import index_prefix_array, min_length_array, probe_prefix_array
from simjoin.core.setsim.work import prefix_counts, sample_mask, slice_work, sum_prefix_counts


def _records(rng: np.random.Generator, n: int, universe: int) -> list[np.ndarray]:
    lengths = np.maximum(1, rng.poisson(6, n))
    recs = [np.unique(rng.zipf(1.3, k) % universe) for k in lengths]
    freq = np.bincount(np.concatenate(recs), minlength=universe)
    rank = np.argsort(np.argsort(freq, kind="stable"), kind="stable")  # canonical: rarest first
    return sorted((np.sort(rank[r]).astype(np.int32) for r in recs), key=len)


def _visits(recs: list[np.ndarray], side: np.ndarray, theta: float, sim: str, rs: bool) -> dict[int, int]:
    """Posting visits per index length, as the kernel makes them (x < y, length filter, other side in R-S)."""
    lens = np.array([len(r) for r in recs])
    ip, pp = index_prefix_array(sim, theta, lens), probe_prefix_array(sim, theta, lens)
    ml = min_length_array(sim, theta, lens)
    post: dict[tuple[int, int], list[int]] = {}
    out: dict[int, int] = {}
    for y, r in enumerate(recs):
        want = (1 - side[y]) if rs else 0
        for t in r[: pp[y]].tolist():
            for x in post.get((t, want), []):
                if lens[x] >= ml[y]:
                    out[int(lens[x])] = out.get(int(lens[x]), 0) + 1
        for t in r[: ip[y]].tolist():
            post.setdefault((t, int(side[y]) if rs else 0), []).append(y)
    return out


@pytest.mark.parametrize("sim", ["jaccard", "cosine", "dice"])
@pytest.mark.parametrize("rs", [False, True])
def test_slice_work_counts_posting_visits(sim: str, rs: bool) -> None:
    rng = np.random.default_rng(3)
    recs = _records(rng, 2500, 300)
    side = rng.integers(0, 2, len(recs)) if rs else np.zeros(len(recs), np.int64)
    off = np.concatenate([[0], np.cumsum([len(r) for r in recs])])
    flat = np.concatenate(recs)
    for theta in (0.5, 0.7, 0.9):
        w = slice_work(*prefix_counts(flat, off, side, theta, sim), theta=theta, sim=sim, rs=rs)
        ref = _visits(recs, side, theta, sim, rs)
        total = sum(ref.values())
        # exact but for the order of equal-length records (the p = i term is halved): within 2 %
        assert sum(w.values()) == pytest.approx(total, rel=0.02)
        big = [k for k, v in ref.items() if v > total / 20]
        for k in big:
            assert w[k] == pytest.approx(ref[k], rel=0.1)


def test_prefix_counts_merge_across_batches() -> None:
    rng = np.random.default_rng(9)
    recs = _records(rng, 900, 120)
    off = np.concatenate([[0], np.cumsum([len(r) for r in recs])])
    flat = np.concatenate(recs)
    side = np.zeros(len(recs), np.int64)
    whole = slice_work(*prefix_counts(flat, off, side, 0.6), theta=0.6)
    parts = [prefix_counts(flat[off[a]: off[b]], off[a: b + 1] - off[a], side[a:b], 0.6) for a, b in
             ((0, 300), (300, 301), (301, 900))]
    summed = sum_prefix_counts(parts)
    assert slice_work(*summed, theta=0.6) == pytest.approx(whole)
    one = prefix_counts(flat, off, side, 0.6)
    for got, want in zip(summed, one):  # the same rows, in the same (token, length, side) order
        assert got.tolist() == want.tolist()
    assert [x.size for x in sum_prefix_counts([])] == [0] * 5


def test_sample_mask_is_deterministic_nested_and_near_its_fraction() -> None:
    rids = np.arange(200_000, dtype=np.int64)
    small, large = sample_mask(rids, 0.05), sample_mask(rids, 0.3)
    assert not (small & ~large).any()  # nested
    assert abs(small.mean() - 0.05) < 0.005 and abs(large.mean() - 0.3) < 0.01
    assert (sample_mask(rids[::-1], 0.3) == large[::-1]).all()  # by rid, not by position
    assert sample_mask(rids, 1.0).all() and not sample_mask(rids, 0.0).any()


def test_slice_results_counts_pairs_by_earlier_length() -> None:
    from simjoin.core.setsim import brute_force_pairs
    from simjoin.core.setsim.work import slice_results

    rng = np.random.default_rng(4)
    recs = _records(rng, 600, 60)
    perm = rng.permutation(len(recs))  # any order in: sorted inside
    shuffled = [recs[i] for i in perm]
    off = np.concatenate([[0], np.cumsum([len(r) for r in shuffled])])
    got = slice_results(np.concatenate(shuffled), off, perm * 3 + 1, np.zeros(len(recs)), 0.6)
    want: dict[int, int] = {}
    for i, j, _ in brute_force_pairs(recs, 0.6, "jaccard"):
        k = min(len(recs[i]), len(recs[j]))
        want[k] = want.get(k, 0) + 1
    assert got == want
