"""Local PPJoin vs the brute-force twin, and the full distributed composition
(Fier & Freytag, Sec. 2: make_plan -> assign_units -> ppjoin per unit).

Timing sanity (not a test; one core, numba-compiled kernel, cache warm):
20,000 Zipf-ish records (lengths 1-60, universe 5,000, 20% near-duplicates),
Jaccard θ=0.8 -> ~0.1 s for the whole self-join in one unit (7,226 pairs);
θ=0.5 -> ~1.4 s (10.3 M candidates); cosine/dice θ=0.5 -> ~5.5 s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest

from simjoin.core.setsim import Plan, brute_force_pairs, gather_rows, make_plan, ppjoin
from simjoin.core.setsim.ppjoin import _min_overlap
from simjoin.core.setsim.similarity import min_overlap_array

SIMS = ("jaccard", "cosine", "dice")


def zipf_records(
    rng: np.random.Generator,
    n: int,
    universe: int,
    max_len: int,
    dup_frac: float = 0.3,
    min_len: int = 1,
) -> list[list[int]]:
    """Zipf-ish token sets with near-duplicates, canonicalized (tokens relabeled
    by ascending global frequency) and sorted by length, as the SSJ input
    convention requires."""
    p = 1.0 / np.arange(1, universe + 1) ** 1.1
    p /= p.sum()
    recs: list[set[int]] = []
    while len(recs) < n:
        if recs and rng.random() < dup_frac:
            s = set(recs[int(rng.integers(len(recs)))])
            for _ in range(int(rng.integers(0, 3))):
                if len(s) > 1 and rng.random() < 0.5:
                    s.discard(int(rng.choice(sorted(s))))
                else:
                    s.add(int(rng.integers(universe)))
        else:
            size = int(rng.integers(min_len, max_len + 1))
            s = set(rng.choice(universe, size=min(size, universe), replace=False, p=p).tolist())
        recs.append(s)
    freq = Counter(t for s in recs for t in s)
    rank = {t: r for r, (t, _) in enumerate(sorted(freq.items(), key=lambda kv: (kv[1], kv[0])))}
    return sorted((sorted(rank[t] for t in s) for s in recs), key=len)


def to_csr(recs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(recs) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r) for r in recs])
    flat = [t for r in recs for t in r]
    return np.array(flat, dtype=np.int32), offsets


def run_ppjoin(
    recs: Sequence[Sequence[int]],
    theta: float,
    sim: str,
    side: np.ndarray | None = None,
    is_index: np.ndarray | None = None,
    is_probe: np.ndarray | None = None,
) -> dict[tuple[int, int], float]:
    """ppjoin over all records, mapped back to positions; asserts no duplicates."""
    tokens, offsets = to_csr(recs)
    n = len(recs)
    rids = 3 * np.arange(n, dtype=np.int64) + 7  # not 0..n-1 on purpose
    is_index = np.ones(n, bool) if is_index is None else is_index
    is_probe = np.ones(n, bool) if is_probe is None else is_probe
    left, right, sims, stats = ppjoin(tokens, offsets, rids, is_index, is_probe, theta, sim, side)
    assert left.dtype == np.int64 and right.dtype == np.int64 and sims.dtype == np.float64
    assert (left < right).all()
    assert stats.results == left.size <= stats.verified <= stats.candidates
    out = {
        ((a - 7) // 3, (b - 7) // 3): s
        for a, b, s in zip(left.tolist(), right.tolist(), sims.tolist(), strict=True)
    }
    assert len(out) == left.size
    return out


def assert_same(got: dict[tuple[int, int], float], expected: set[tuple[int, int, float]]) -> None:
    exp = {(i, j): s for i, j, s in expected}
    assert len(exp) == len(expected)
    missing = sorted(set(exp) - set(got))[:5]
    extra = sorted(set(got) - set(exp))[:5]
    assert not missing and not extra, f"missing {missing}, extra {extra}"
    for key, s in exp.items():
        assert abs(got[key] - s) <= 1e-12, (key, got[key], s)


# ---------------------------------------------------------------- vs brute force


@pytest.mark.parametrize("sim", SIMS)
@pytest.mark.parametrize("theta", [0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 1.0])
def test_random_small_universe_with_ties(sim: str, theta: float) -> None:
    rng = np.random.default_rng(int(theta * 100) + len(sim))
    recs = zipf_records(rng, 150, universe=25, max_len=8)
    expected = brute_force_pairs(recs, theta, sim)
    assert_same(run_ppjoin(recs, theta, sim), expected)


@pytest.mark.parametrize("sim", SIMS)
@pytest.mark.parametrize("theta", [0.55, 0.7, 0.85])
def test_random_medium(sim: str, theta: float) -> None:
    rng = np.random.default_rng(99)
    recs = zipf_records(rng, 300, universe=400, max_len=40, dup_frac=0.4)
    expected = brute_force_pairs(recs, theta, sim)
    assert expected  # the generator makes enough near-duplicates
    assert_same(run_ppjoin(recs, theta, sim), expected)


@pytest.mark.parametrize(
    ("sim", "theta", "x", "y"),
    [
        ("jaccard", 0.5, [1, 2, 3], [2, 3, 4]),  # 2/4
        ("jaccard", 0.75, [1, 2, 3], [1, 2, 3, 4]),  # 3/4
        ("jaccard", 0.8, [1, 2, 3, 4], [1, 2, 3, 4, 5]),  # 4/5, float 0.8 > 4/5
        ("jaccard", 0.9, list(range(19)), list(range(1, 20))),  # 18/20 (float miss)
        ("cosine", 0.5, [1], [1, 2, 3, 4]),  # 1/sqrt(4)
        ("cosine", 0.8, [1, 2, 3, 4, 5], [2, 3, 4, 5, 6]),  # 4/sqrt(25)
        ("cosine", 0.75, [1, 2, 3, 4], [1, 2, 3, 5]),  # 3/sqrt(16)
        ("dice", 0.5, [1], [1, 2, 3]),  # 2/4
        ("dice", 0.8, [1, 2], [1, 2, 3]),  # 4/5
        ("dice", 0.75, [1, 2, 3], [1, 2, 3, 4, 5]),  # 6/8
    ],
)
def test_ties_exactly_at_threshold_are_included(sim: str, theta: float, x: list[int], y: list[int]) -> None:
    decoy = [100, 101, 102, 103, 104, 105]
    recs = sorted([x, y, decoy], key=len)
    expected = brute_force_pairs(recs, theta, sim)
    assert len(expected) == 1 and abs(next(iter(expected))[2] - theta) < 1e-12
    assert_same(run_ppjoin(recs, theta, sim), expected)


@pytest.mark.parametrize("sim", SIMS)
def test_identical_and_single_token_records(sim: str) -> None:
    recs = [[1], [1], [2], [1], [1, 2], [1, 2], [2, 5], [1, 2, 5], [1, 2, 5]]
    for theta in (0.5, 0.7, 1.0):
        expected = brute_force_pairs(recs, theta, sim)
        got = run_ppjoin(recs, theta, sim)
        assert_same(got, expected)
    assert set(run_ppjoin(recs, 1.0, sim)) == {(0, 1), (0, 3), (1, 3), (4, 5), (7, 8)}


@pytest.mark.parametrize("sim", SIMS)
def test_theta_one_only_identical_sets(sim: str) -> None:
    rng = np.random.default_rng(5)
    recs = zipf_records(rng, 200, universe=30, max_len=6, dup_frac=0.5)
    got = run_ppjoin(recs, 1.0, sim)
    assert got and all(recs[i] == recs[j] and s == 1.0 for (i, j), s in got.items())
    assert_same(got, brute_force_pairs(recs, 1.0, sim))


def test_more_pairs_than_the_output_buffer_resumes_exactly() -> None:
    """The kernel's output buffers start at max(65,536, n) pairs; 420 near-copies give about
    88k pairs, so the kernel stops mid-join and resumes on fresh buffers (a probe record's
    candidates carried over), and the union must still equal brute force."""
    rng = np.random.default_rng(11)
    base = list(range(1, 13))
    recs = sorted(
        (sorted(set(base) - {int(rng.integers(1, 13))} | {int(rng.integers(13, 16))}) for _ in range(420)),
        key=len,
    )
    expected = brute_force_pairs(recs, 0.7, "jaccard")
    assert len(expected) > 65_536 > len(recs)
    assert_same(run_ppjoin(recs, 0.7, "jaccard"), expected)


def test_token_ids_beyond_a_lookup_table_are_joined_alike() -> None:
    """Token ids far beyond the number of tokens take the sorted-vocabulary path, not the table."""
    rng = np.random.default_rng(2)
    recs = zipf_records(rng, 150, universe=40, max_len=8)
    far = [[t + 2**30 for t in r] for r in recs]
    for theta in (0.5, 0.8):
        assert run_ppjoin(far, theta, "jaccard") == run_ppjoin(recs, theta, "jaccard")


def test_bitmap_filter_keeps_pairs_whose_tokens_share_bits() -> None:
    """Tokens that hash to the same bit make the bitmap bound looser, never wrong."""
    from simjoin.core.setsim.ppjoin import bitmaps

    tok = np.arange(1, 200, dtype=np.int32)
    bits = (tok.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(58)
    a, b = (int(t) for t in tok[np.flatnonzero(bits == bits[0])[:2]])  # two tokens, one bit
    recs = sorted([[a, 300, 301], [b, 300, 301], [a, b, 300, 301]], key=len)
    off = np.array([0, 3, 6, 10])
    flat = np.array([t for r in recs for t in r], dtype=np.int32)
    bm = bitmaps(flat, off)
    assert bm[0] == bm[1]  # equal signatures, different sets
    for theta in (0.5, 0.6, 0.75):
        assert_same(run_ppjoin(recs, theta, "jaccard"), brute_force_pairs(recs, theta, "jaccard"))


@pytest.mark.parametrize("sim", SIMS)
def test_very_long_records(sim: str) -> None:
    rng = np.random.default_rng(3)
    base = rng.choice(5000, size=300, replace=False)
    recs: list[list[int]] = []
    for k in range(40):
        s = set(base.tolist())
        drop = rng.choice(300, size=k, replace=False)
        s -= {int(base[d]) for d in drop}
        s |= set(rng.integers(5000, 6000, size=int(rng.integers(0, 20))).tolist())
        recs.append(sorted(s))
    recs += [
        sorted(rng.choice(6000, size=int(rng.integers(1, 5)), replace=False).tolist()) for _ in range(20)
    ]
    recs.sort(key=len)
    for theta in (0.8, 0.9, 0.95):
        expected = brute_force_pairs(recs, theta, sim)
        assert expected
        assert_same(run_ppjoin(recs, theta, sim), expected)


@pytest.mark.parametrize("sim", SIMS)
def test_rs_join_only_cross_pairs(sim: str) -> None:
    rng = np.random.default_rng(17)
    recs = zipf_records(rng, 250, universe=60, max_len=10, dup_frac=0.4)
    side = rng.integers(0, 2, size=len(recs)).astype(np.int8)
    for theta in (0.5, 0.8, 1.0):
        expected = brute_force_pairs(recs, theta, sim, side=side)
        got = run_ppjoin(recs, theta, sim, side=side)
        assert all(side[i] != side[j] for i, j in got)
        assert_same(got, expected)


def test_positions_are_the_records_places_of_the_rid_pairs() -> None:
    """``positions=True`` (the unit kernel's form) names each pair by the records' places in the
    input: exactly the rid pairs, mapped back, in the same order, R-S and self-join alike."""
    rng = np.random.default_rng(29)
    recs = zipf_records(rng, 300, universe=50, max_len=9, dup_frac=0.5)
    flat, off = to_csr(recs)
    rids = np.cumsum(rng.integers(1, 5, size=len(recs))).astype(np.int64)  # gaps: rid != place
    ones = np.ones(len(recs), bool)
    side = rng.integers(0, 2, size=len(recs)).astype(np.int8)
    for sim in SIMS:
        for s in (None, side):
            left, right, sims, st = ppjoin(flat, off, rids, ones, ones, 0.6, sim, side=s)
            px, py, psims, pst = ppjoin(flat, off, rids, ones, ones, 0.6, sim, side=s, positions=True)
            assert left.size > 0 and st == pst
            np.testing.assert_array_equal(rids[px], left)
            np.testing.assert_array_equal(rids[py], right)
            np.testing.assert_array_equal(psims, sims)


def test_index_and_probe_flags() -> None:
    rng = np.random.default_rng(23)
    recs = zipf_records(rng, 200, universe=40, max_len=8)
    is_index = rng.random(len(recs)) < 0.6
    is_probe = rng.random(len(recs)) < 0.6
    for sim in SIMS:
        expected = {(i, j, s) for i, j, s in brute_force_pairs(recs, 0.6, sim) if is_index[i] and is_probe[j]}
        assert_same(run_ppjoin(recs, 0.6, sim, is_index=is_index, is_probe=is_probe), expected)


def test_empty_records_are_ignored_and_stats() -> None:
    recs = [[], [], [1, 2], [1, 2], [1, 2, 3]]
    got = run_ppjoin(recs, 0.6, "jaccard")
    assert got == {(2, 3): 1.0, (2, 4): 2 / 3, (3, 4): 2 / 3}
    tokens, offsets = to_csr(recs)
    *_, stats = ppjoin(tokens, offsets, np.arange(5), np.ones(5, bool), np.ones(5, bool), 0.6)
    assert (stats.indexed, stats.probed, stats.results) == (3, 3, 3)
    empty = ppjoin(
        np.array([], np.int32),
        np.array([0]),
        np.array([], np.int64),
        np.array([], bool),
        np.array([], bool),
        0.5,
    )
    assert empty[0].size == 0 and empty[3].results == 0


def test_kernel_bound_matches_numpy_bound() -> None:
    ls = np.arange(1, 80)
    for code, sim in enumerate(SIMS):
        for theta in (0.55, 0.7, 0.8, 0.9, 1.0):
            exp = min_overlap_array(sim, theta, ls, ls + 3).tolist()
            assert [_min_overlap(code, theta, a, a + 3) for a in ls.tolist()] == exp


def test_input_validation() -> None:
    ok = {"rids": np.arange(2), "is_index": np.ones(2, bool), "is_probe": np.ones(2, bool), "theta": 0.5}
    with pytest.raises(ValueError, match="strictly ascending"):
        ppjoin(np.array([2, 1, 1, 3], np.int32), np.array([0, 2, 4]), **ok)
    with pytest.raises(ValueError, match="strictly ascending"):
        ppjoin(np.array([1, 1, 1, 3], np.int32), np.array([0, 2, 4]), **ok)
    with pytest.raises(ValueError, match="sorted by length"):
        ppjoin(np.array([1, 2, 3], np.int32), np.array([0, 2, 3]), **ok)
    with pytest.raises(ValueError, match="rids must be strictly ascending"):
        ppjoin(np.array([1, 2], np.int32), np.array([0, 1, 2]), **{**ok, "rids": np.array([4, 4])})
    with pytest.raises(ValueError, match="offsets"):
        ppjoin(np.array([1, 2], np.int32), np.array([0, 1, 3]), **ok)
    with pytest.raises(ValueError, match="side"):
        ppjoin(np.array([1, 2], np.int32), np.array([0, 1, 2]), **ok, side=np.array([0, 2]))
    with pytest.raises(ValueError, match="allowed: 0 < threshold <= 1"):
        ppjoin(np.array([1, 2], np.int32), np.array([0, 1, 2]), **{**ok, "theta": 0.0})
    with pytest.raises(ValueError, match="allowed: jaccard"):
        ppjoin(np.array([1, 2], np.int32), np.array([0, 1, 2]), **ok, sim="overlap")


# ---------------------------------------------------------------- distributed


def distributed_join(
    recs: Sequence[Sequence[int]],
    theta: float,
    sim: str,
    n: int,
    m: int,
    side: np.ndarray | None = None,
    plan: Plan | None = None,
) -> list[tuple[int, int, float]]:
    lengths = np.array([len(r) for r in recs], dtype=np.int64)
    ls, counts = np.unique(lengths, return_counts=True)
    plan = plan or make_plan(ls, counts, theta, sim, n=n, m=m)
    rids = np.arange(len(recs), dtype=np.int64) * 2 + 1  # length order
    pos, unit, is_index, is_probe = plan.assign_units(lengths, rids)
    out: list[tuple[int, int, float]] = []
    for u in range(plan.n_units):
        sel = unit == u
        p = pos[sel]  # ascending, hence rid (and length) order
        if p.size == 0:
            continue
        tokens, offsets = to_csr([recs[k] for k in p.tolist()])
        left, right, sims, _ = ppjoin(
            tokens,
            offsets,
            rids[p],
            is_index[sel],
            is_probe[sel],
            theta,
            sim,
            None if side is None else side[p],
        )
        out += [
            ((a - 1) // 2, (b - 1) // 2, s)
            for a, b, s in zip(left.tolist(), right.tolist(), sims.tolist(), strict=True)
        ]
    return out


@pytest.mark.parametrize("sim", SIMS)
@pytest.mark.parametrize(("n", "m"), [(1, 1), (2, 3), (3, 2), (5, 4), (40, 1)])
def test_distributed_union_equals_brute_force(sim: str, n: int, m: int) -> None:
    rng = np.random.default_rng(n * 10 + m)
    recs = zipf_records(rng, 220, universe=40, max_len=14, dup_frac=0.4)
    for theta in (0.5, 0.75, 1.0):
        out = distributed_join(recs, theta, sim, n, m)
        pairs = [(i, j) for i, j, _ in out]
        assert len(pairs) == len(set(pairs)), "a pair came out of two units"
        assert_same({(i, j): s for i, j, s in out}, brute_force_pairs(recs, theta, sim))


def test_distributed_rs_join() -> None:
    rng = np.random.default_rng(31)
    recs = zipf_records(rng, 200, universe=35, max_len=10, dup_frac=0.4)
    side = rng.integers(0, 2, size=len(recs)).astype(np.int8)
    for sim in SIMS:
        out = distributed_join(recs, 0.7, sim, 3, 2, side=side)
        pairs = [(i, j) for i, j, _ in out]
        assert len(pairs) == len(set(pairs))
        assert_same({(i, j): s for i, j, s in out}, brute_force_pairs(recs, 0.7, sim, side=side))


@pytest.mark.parametrize("sim", SIMS)
def test_per_node_modulo_is_exact(sim: str) -> None:
    """Nodes with their own modulo m_k (the skew split of ``search_plan``): every pair still meets
    in exactly one unit, and the union equals brute force."""
    rng = np.random.default_rng(5)
    recs = zipf_records(rng, 300, universe=40, max_len=14, dup_frac=0.5)
    lengths = np.array([len(r) for r in recs], dtype=np.int64)
    ls, counts = np.unique(lengths, return_counts=True)
    for theta in (0.5, 0.75, 1.0):
        for n, mods in ((2, [3, 1]), (3, [1, 4, 2]), (4, [5, 1, 1, 2]), (1, [3])):
            plan = make_plan(ls, counts, theta, sim, n=n, m=1, mods=mods)
            assert sorted({plan.unit_mod(u) for u in plan.units}) == sorted(set(mods[: plan.n]))
            assert [u.unit for u in plan.units] == list(range(plan.n_units))
            out = distributed_join(recs, theta, sim, 0, 0, plan=plan)
            pairs = [(i, j) for i, j, _ in out]
            assert len(pairs) == len(set(pairs)), "a pair came out of two units"
            assert_same({(i, j): s for i, j, s in out}, brute_force_pairs(recs, theta, sim))


def test_gather_rows_reorders_records_and_refuses_bad_rows() -> None:
    rng = np.random.default_rng(5)
    recs = [np.sort(rng.choice(50, size=k, replace=False)).astype(np.int32) for k in rng.integers(0, 6, 40)]
    off = np.concatenate([[0], np.cumsum([len(r) for r in recs])]).astype(np.int64)
    flat = np.concatenate(recs).astype(np.int32)
    order = rng.permutation(len(recs))
    got, got_off = gather_rows(flat, off, order)
    assert got_off[0] == 0 and got_off[-1] == got.size == flat.size
    for i, r in enumerate(order):
        assert got[got_off[i]: got_off[i + 1]].tolist() == recs[r].tolist()
    empty, empty_off = gather_rows(flat, off, np.zeros(0, np.int64))
    assert empty.size == 0 and empty_off.tolist() == [0]
    with pytest.raises(ValueError, match="order must index the 40 records"):
        gather_rows(flat, off, np.array([0, 40]))
