"""Property test: S3J over micro-batches (``S3JStream``, the Spark stages in numpy) against
brute force, pair for pair, over many stream shapes.

Each case draws: a metric, a dimension, two streams or a self-join, tumbling or sliding
windows, 1 to 4 micro-batches whose cuts fall inside windows, strict or inclusive, the
paper's full 2t outer sets or the exact t + m_W bound, and data with ties (grid points),
duplicate vectors and distances exactly at the threshold. The fast subset runs by default;
``SIMJOIN_PROPERTY_CASES=N`` runs N cases.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from simjoin.core.metric import (
    METRICS,
    S3JStream,
    brute_force_join,
    formulate_partition_microbatch,
    pairwise,
    window_copies,
)

N_CASES = int(os.environ.get("SIMJOIN_PROPERTY_CASES", "60"))


def _case(seed: int) -> dict:  # type: ignore[type-arg]
    rng = np.random.default_rng(seed)
    metric = METRICS[seed % len(METRICS)]
    dim = int(rng.integers(2, 5))
    two = bool(rng.integers(0, 2))
    n = int(rng.integers(40, 160))
    if rng.random() < 0.5:  # grid points: ties, duplicates, distances exactly at t
        X = rng.integers(-2, 3, size=(n, dim)).astype(np.float64) / 2
        if metric != "euclidean":
            X[np.all(X == 0, axis=1)] = 0.5
    else:
        X = rng.uniform(-1, 1, (n, dim))
        X[rng.integers(0, n, n // 10)] = X[rng.integers(0, n, n // 10)]  # duplicate vectors
    ts = np.sort(rng.integers(0, 240, n))
    size = int(rng.choice([60, 90]))
    slide = size if rng.random() < 0.5 else size // int(rng.choice([2, 3]))
    D = pairwise(metric, X, X)
    t = float(np.quantile(D[np.triu_indices(n, 1)], float(rng.choice([0.02, 0.05, 0.1])), method="lower"))
    if t <= 0:
        t = float(np.min(D[D > 0]))
    return {
        "metric": metric, "dim": dim, "two": two, "X": X, "ts": ts, "ids": rng.permutation(n).astype(np.int64) + 5,
        "side": rng.integers(0, 2, n).astype(np.int8) if two else np.zeros(n, np.int8),
        "size": size, "slide": slide, "t": t, "inclusive": bool(rng.integers(0, 2)),
        "batches": int(rng.integers(1, 5)), "workers": int(rng.integers(1, 5)), "prune": bool(rng.random() < 0.7),
        "rng": rng,
    }


def _run(c: dict) -> tuple[set, list, int]:  # type: ignore[type-arg]
    rec, wstart = window_copies(c["ts"], c["size"], c["slide"])
    n = c["ts"].shape[0]
    # cuts at random arrival positions: they fall inside windows
    cuts = np.sort(c["rng"].choice(np.arange(1, n), c["batches"] - 1, replace=False)) if c["batches"] > 1 else []
    batch_of = np.searchsorted(np.asarray(cuts, dtype=np.int64), np.arange(n), side="right")
    s = S3JStream(c["metric"], c["t"], c["inclusive"], n_workers=c["workers"], dim=c["dim"], seed=7,
                  self_join=not c["two"], prune_outer=c["prune"])
    got: list[tuple[int, int, int]] = []
    routed = 0
    for b in range(c["batches"]):
        m = batch_of[rec] == b
        r = rec[m]
        out = s.push(wstart[m], c["ts"][r], c["side"][r], c["ids"][r], c["X"][r])
        got += list(zip(out.window.tolist(), out.left_id.tolist(), out.right_id.tolist()))
        routed += out.routed
    ref = set()
    for w in np.unique(wstart):
        r = rec[wstart == w]
        L, R, _ = brute_force_join(c["X"][r], c["ids"][r], c["side"][r] if c["two"] else None, c["metric"], c["t"],
                                   c["inclusive"])
        ref |= {(int(w), int(a), int(b)) for a, b in zip(L, R)}
    return ref, got, routed


@pytest.mark.parametrize("seed", range(N_CASES))
def test_stream_matches_brute_force(seed: int) -> None:
    c = _case(seed)
    ref, got, _ = _run(c)
    assert len(got) == len(set(got)), "a pair reported twice"
    missing, extra = ref - set(got), set(got) - ref
    assert not missing and not extra, (
        f"{len(missing)} missing, {len(extra)} extra of {len(ref)}; {c['metric']} d={c['dim']} two={c['two']} "
        f"window {c['size']}/{c['slide']} batches={c['batches']} P={c['workers']} prune={c['prune']} "
        f"inclusive={c['inclusive']}")


def test_cases_cover_every_shape() -> None:
    shapes = [_case(s) for s in range(N_CASES)]
    assert {c["metric"] for c in shapes} == set(METRICS)
    assert {c["two"] for c in shapes} == {True, False} and {c["inclusive"] for c in shapes} == {True, False}
    assert {c["batches"] for c in shapes} == {1, 2, 3, 4} and {c["prune"] for c in shapes} == {True, False}
    assert any(c["slide"] < c["size"] for c in shapes) and any(c["slide"] == c["size"] for c in shapes)


def test_issue_stream_seed_8_sliding_two_halves() -> None:
    """The reported defect: 240 + 240 3-D uniform records, euclidean t = 0.25, sliding 60 s / 30 s,
    3 workers, the first half of each stream joined, then the second half (2 of 335 pairs were lost)."""
    rng = np.random.default_rng(8)
    n = 240
    X = rng.uniform(-1, 1, (2 * n, 3))
    ts = np.concatenate([np.sort(rng.integers(0, 240, n)), np.sort(rng.integers(0, 240, n))])
    side = np.repeat([0, 1], n).astype(np.int8)
    ids = np.concatenate([np.arange(n), np.arange(n)]).astype(np.int64)
    half = np.concatenate([np.arange(n) >= n // 2, np.arange(n) >= n // 2])
    rec, ws = window_copies(ts, 60, 30)
    for prune in (False, True):
        s = S3JStream("euclidean", 0.25, n_workers=3, dim=3, seed=42, prune_outer=prune)
        got = []
        for b in (False, True):
            m = half[rec] == b
            r = rec[m]
            out = s.push(ws[m], ts[r], side[r], ids[r], X[r])
            got += list(zip(out.window.tolist(), out.left_id.tolist(), out.right_id.tolist()))
        ref = set()
        for w in np.unique(ws):
            r = rec[ws == w]
            L, R, _ = brute_force_join(X[r], ids[r], side[r], "euclidean", 0.25)
            ref |= {(int(w), int(a), int(b)) for a, b in zip(L, R)}
        assert len(got) == len(set(got)) and set(got) == ref and ref


def test_window_copies() -> None:
    rec, w = window_copies([0, 29, 30, 59, 60, 125], 60, 30)
    got = sorted(zip(rec.tolist(), w.tolist()))
    assert got == [(0, -30), (0, 0), (1, -30), (1, 0), (2, 0), (2, 30), (3, 0), (3, 30), (4, 30), (4, 60),
                   (5, 90), (5, 120)]
    rec, w = window_copies([0, 59, 60], 60)
    assert sorted(zip(rec.tolist(), w.tolist())) == [(0, 0), (1, 0), (2, 60)]
    with pytest.raises(ValueError, match="slide <= size"):
        window_copies([1], 30, 60)


def test_earlier_rows_reach_a_workset_opened_by_an_earlier_window_of_the_call() -> None:
    """The buffering defect, at the driver: a physical outer copy x of window 60 from an earlier
    micro-batch; now a record of window 0 opens workset G near x, and a record of window 60 joins
    G. x must reach G's outer set."""
    from simjoin.core.metric import PartitionState

    t = 0.2
    st = PartitionState.from_arrays([60], [1], [9], np.array([[0.0, 0.0]]), [0], dim=2)
    X = np.array([[0.1, 0.0], [0.12, 0.0]])
    res = formulate_partition_microbatch([0, 60], [5, 61], [0, 0], [1, 2], X, [False, False], "euclidean", t,
                                         partition=0, n_workers=1, state=st)
    g = res[0].worksets.new_workset_id[0]
    assert res[1].worksets.workset_id.tolist() == [g]  # the window-60 record is a member of G
    assert list(zip(res[1].worksets.routed_record.tolist(), res[1].worksets.routed_workset_id.tolist())) == [(0, g)]
    # already in G's outer set: not routed again
    st2 = PartitionState.from_arrays([60], [1], [9], np.array([[0.0, 0.0]]), [0], [60], [1], [9], [g], dim=2)
    again = formulate_partition_microbatch([60], [62], [0], [3], np.array([[0.11, 0.0]]), [False], "euclidean", t,
                                           partition=0, n_workers=1, workset_id=[g], centroid=X[:1], state=st2)
    assert again[0].worksets.routed_record.size == 0


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("mode", ["balance", "split"])
def test_rebalancing_and_splitting_keep_the_pairs(seed: int, mode: str) -> None:
    """Rebalance between micro-batches (Algorithm 1, and with splitting): the same pairs as
    without, each once - on skewed data, so that worksets move and big ones are split."""
    rng = np.random.default_rng(100 + seed)
    metric = METRICS[seed % len(METRICS)]
    n, dim, P = 400, 2, 3 + seed % 2
    U = rng.uniform(-1, 1, (n, dim))
    D = pairwise(metric, U, U)
    t = float(np.quantile(D[np.triu_indices(n, 1)], 0.03, method="lower"))
    # a blob far tighter than t: one workset far heavier than the average worker load
    hot = int(0.6 * n)
    c = np.array([0.5, 0.3])
    X = np.vstack([c + rng.normal(0, t / 40, (hot, dim)), U[hot:]])
    X = X[rng.permutation(n)]
    ts = np.sort(rng.integers(0, 240, n))
    two = bool(seed % 2)
    side = rng.integers(0, 2, n).astype(np.int8) if two else np.zeros(n, np.int8)
    ids = np.arange(n, dtype=np.int64)
    size, slide = (60, 30) if seed % 3 else (60, 60)
    rec, ws = window_copies(ts, size, slide)
    batch = np.minimum(ts[rec] // 40, 5)  # six micro-batches, cuts inside windows
    plain = S3JStream(metric, t, n_workers=P, dim=dim, seed=3, self_join=not two)
    adapt = S3JStream(metric, t, n_workers=P, dim=dim, seed=3, self_join=not two)
    got_plain, got_adapt, fired, split = [], [], 0, 0
    for b in range(6):
        m = batch == b
        r = rec[m]
        for s, got in ((plain, got_plain), (adapt, got_adapt)):
            out = s.push(ws[m], ts[r], side[r], ids[r], X[r])
            got += list(zip(out.window.tolist(), out.left_id.tolist(), out.right_id.tolist()))
        res = adapt.rebalance(trigger=0.05, split=mode == "split")
        fired += res.fired
        split += res.split
        if res.fired:
            assert res.imbalance_after <= res.imbalance_before + 1e-9
    assert len(got_adapt) == len(set(got_adapt)) and sorted(got_adapt) == sorted(got_plain) and got_plain
    assert fired > 0
    if mode == "split":
        assert split > 0
