"""The S3J pieces the Spark tasks run (Section 7), against brute force, without Spark.

* ``cross_join``: new members x earlier members of a workset - the Section 7.7 role rules
  checked pair by pair against a brute-force enumeration (self-join and two streams,
  strict vs inclusive with distances exactly t, duplicate vectors and ids);
* ``join_worker_window``: a window split into state + new rows finds exactly the pairs of
  the whole window, once;
* ``formulate_partition_window`` / ``formulate_partition_microbatch``: the formulation
  driver over several windows (arrival order, centroid growth, workers, earlier rows);
* the whole micro-batch path is ``S3JStream``, checked against brute force over many stream
  shapes in ``test_metric_stream.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from simjoin.core.metric import (
    INNER,
    OUTER,
    EarlierRows,
    PartitionState,
    brute_force_join,
    cross_join,
    formulate_partition_microbatch,
    formulate_partition_window,
    formulate_partition_worksets,
    join_worker_window,
    join_worksets,
    matches,
    pairwise,
    partition_bounds,
    s3j_join_window,
    workset_key,
    workset_load,
)

# ----------------------------------------------------------------------------- cross_join


def _grid(rng: np.random.Generator, n: int, dim: int = 2) -> np.ndarray:
    """Integer points: many pairs at exactly distance 1 and 2 (ties with t), and duplicates."""
    return rng.integers(0, 4, size=(n, dim)).astype(np.float64)


def _cross_brute(Xn, idn, rn, kn, sn, Xo, ido, ro, ko, so, metric, t, inclusive, self_join, exact):  # type: ignore[no-untyped-def]
    """Every (new, old) pair of one workset, role rules of Section 7.7, one at a time."""
    pairs, comps, short, at_t = [], 0, 0, 0
    for a in range(len(idn)):
        for b in range(len(ido)):
            if kn[a] != ko[b] or (rn[a] == OUTER and ro[b] == OUTER):
                continue
            if not self_join and sn[a] == so[b]:
                continue
            d = float(pairwise(metric, Xn[a : a + 1], Xo[b : b + 1])[0, 0])
            if rn[a] == INNER and ro[b] == INNER:
                short += 1
                dist = d if exact else np.nan
            else:
                comps += 1
                at_t += d == t
                if not matches(d, t, inclusive):
                    continue
                dist = d
            if self_join:
                left, right = min(idn[a], ido[b]), max(idn[a], ido[b])
            else:
                left, right = (idn[a], ido[b]) if sn[a] == 0 else (ido[b], idn[a])
            pairs.append((int(left), int(right), dist))
    return pairs, comps, short, at_t


def _as_multiset(L, R, D) -> list[tuple[int, int, float]]:  # type: ignore[no-untyped-def]
    return sorted((int(a), int(b), float(d)) for a, b, d in zip(L, R, D))


def _same(got: list, ref: list) -> bool:  # type: ignore[type-arg]
    if len(got) != len(ref):
        return False
    return all(g[:2] == r[:2] and (g[2] == r[2] or (np.isnan(g[2]) and np.isnan(r[2]))) for g, r in zip(got, ref))


@pytest.mark.parametrize("self_join", [True, False])
@pytest.mark.parametrize("inclusive", [False, True])
@pytest.mark.parametrize("exact", [False, True])
def test_cross_join_role_rules_vs_brute_force(self_join: bool, inclusive: bool, exact: bool) -> None:
    rng = np.random.default_rng(3 + 2 * self_join + inclusive)
    nn, no = 40, 50
    Xn, Xo = _grid(rng, nn), _grid(rng, no)
    Xo[:5] = Xn[:5]  # duplicates: distance 0
    # Ids: new and old disjoint; in two streams the same id may appear on both sides.
    idn = np.arange(nn, dtype=np.int64) + 1000
    ido = np.arange(no, dtype=np.int64) + (1000 if not self_join else 2000)
    rn, ro = rng.integers(0, 3, nn).astype(np.int8), rng.integers(0, 3, no).astype(np.int8)
    kn = workset_key(rng.integers(0, 2, nn), rng.integers(1, 4, nn))
    ko = workset_key(rng.integers(0, 2, no), rng.integers(1, 4, no))
    sn = None if self_join else rng.integers(0, 2, nn).astype(np.int8)
    so = None if self_join else rng.integers(0, 2, no).astype(np.int8)
    t = 1.0  # many grid pairs at exactly 1.0: kept only when inclusive
    res = cross_join(Xn, idn, rn, kn, Xo, ido, ro, ko, "euclidean", t, inclusive,
                     side_new=sn, side_old=so, exact_distances=exact)
    ref, comps, short, at_t = _cross_brute(Xn, idn, rn, kn, sn, Xo, ido, ro, ko, so, "euclidean", t, inclusive,
                                     self_join, exact)
    got = _as_multiset(res.left_id, res.right_id, res.distance)
    assert _same(got, sorted(ref, key=lambda p: (p[0], p[1], p[2]))), f"{len(got)} vs {len(ref)} pairs"
    assert res.computations == comps and res.shortcut_pairs == short
    assert at_t > 0  # candidates at exactly t: in the result iff inclusive (as the brute force says)
    if not exact:  # shortcut pairs carry NaN: a distance of exactly t was computed, kept iff inclusive
        assert (sum(1 for p in got if p[2] == t) > 0) == inclusive
    if self_join:
        assert (res.left_id <= res.right_id).all()


def test_cross_join_empty_and_side_mismatch() -> None:
    X = np.ones((2, 2))
    k = workset_key([0, 0], [1, 1])
    r = cross_join(X, [1, 2], [0, 1], k, np.zeros((0, 2)), [], [], [], "euclidean", 0.5)
    assert r.left_id.size == 0 and r.computations == 0 and r.shortcut_pairs == 0
    with pytest.raises(ValueError, match="side_new and side_old"):
        cross_join(X, [1, 2], [0, 1], k, X, [3, 4], [0, 1], k, "euclidean", 0.5, side_new=[0, 1])
    with pytest.raises(ValueError, match="role_old has 1 entries"):
        cross_join(X, [1, 2], [0, 1], k, X, [3, 4], [0], k, "euclidean", 0.5)


# ----------------------------------------------------------------------------- join_worker_window


def _window_rows(X: np.ndarray, metric: str, t: float, inclusive: bool, P: int, seed: int):  # type: ignore[no-untyped-def]
    """Workset rows of one window (all partitions), as the single-process driver forms them."""
    r = s3j_join_window(X, np.arange(len(X)), None, metric, t, inclusive, n_workers=P, seed=seed)
    return r.copies.rows


@pytest.mark.parametrize("metric,inclusive,two", [("euclidean", False, False), ("angular", True, True),
                                                  ("cosine", False, True)])
def test_join_worker_window_state_split_is_exact(metric: str, inclusive: bool, two: bool) -> None:
    """Rows of earlier micro-batches (is_new False) x new rows + new x new = the whole window."""
    rng = np.random.default_rng(11)
    n = 260
    X = np.vstack([rng.uniform(-1, 1, (n // 2, 3)), rng.normal(0.4, 0.03, (n - n // 2, 3))])
    X[7] = X[6]
    ids = np.arange(n, dtype=np.int64) * 3
    side = rng.integers(0, 2, n).astype(np.int8) if two else None
    D = pairwise(metric, X, X)
    t = float(np.quantile(D[np.triu_indices(n, 1)], 0.03, method="lower"))
    rows = _window_rows(X, metric, t, inclusive, 3, 5)
    batch = rng.integers(0, 2, n)  # micro-batch of each record
    ref = brute_force_join(X, ids, side, metric, t, inclusive)
    got: list[tuple[int, int]] = []
    for w in range(3):
        rw = rows.for_worker(w)
        rec = rw.record
        sd = None if side is None else side[rec]
        old = batch[rec] == 0
        # micro-batch 0: its rows alone; micro-batch 1: new rows + the state of micro-batch 0
        r0 = join_worker_window(X[rec][old], ids[rec][old], rw.role[old], rw.partition[old], rw.workset_id[old],
                                np.ones(int(old.sum()), bool), metric, t, inclusive,
                                side=None if sd is None else sd[old])
        r1 = join_worker_window(X[rec], ids[rec], rw.role, rw.partition, rw.workset_id, ~old, metric, t, inclusive,
                                side=sd, exact_distances=True)
        got += list(zip(r0.left_id.tolist(), r0.right_id.tolist()))
        got += list(zip(r1.left_id.tolist(), r1.right_id.tolist()))
        # distances of computed pairs are the kernel's, bit for bit
        Dm = pairwise(metric, X, X)
        pos = {int(i): k for k, i in enumerate(ids)}
        for a, b, d in zip(r1.left_id, r1.right_id, r1.distance):
            assert d == Dm[pos[int(a)], pos[int(b)]]
        # counters: new rows by role, state rows of worksets with new rows, Definition 5 load
        assert (r1.n_inner, r1.n_outlier, r1.n_outer) == tuple(np.bincount(rw.role[~old], minlength=3))
        key = workset_key(rw.partition, rw.workset_id)
        touched = np.isin(key, key[~old])
        assert (r1.state_inner, r1.state_outlier, r1.state_outer) == tuple(
            np.bincount(rw.role[old & touched], minlength=3))
        assert r1.worksets == np.unique(key[~old]).size
        uk = np.unique(key[~old])
        cnt = {g: [np.bincount(rw.role[(key == g) & m], minlength=3) for m in (~old, old)] for g in uk}
        load = sum(float(workset_load(*c[0], *c[1])) for c in cnt.values())
        assert r1.load == pytest.approx(load)
        assert r1.result_pairs == r1.left_id.size
    assert len(got) == len(set(got)), "a pair met twice"
    assert sorted(got) == sorted(zip(ref[0].tolist(), ref[1].tolist())) and got


def test_join_worker_window_all_new_equals_join_worksets() -> None:
    rng = np.random.default_rng(2)
    X = rng.uniform(-1, 1, (150, 2))
    rows = _window_rows(X, "euclidean", 0.2, False, 2, 1)
    rw = rows.for_worker(0)
    jr = join_worksets(X[rw.record], rw.record, rw.role, rw.partition, rw.workset_id, "euclidean", 0.2)
    jw = join_worker_window(X[rw.record], rw.record, rw.role, rw.partition, rw.workset_id, np.ones(len(rw), bool),
                            "euclidean", 0.2)
    assert np.array_equal(jw.left_id, jr.left_id) and np.array_equal(jw.right_id, jr.right_id)
    assert np.array_equal(jw.distance, jr.distance, equal_nan=True)
    assert jw.computations == jr.computations.sum() and jw.shortcut_pairs == jr.shortcut_pairs.sum()
    assert jw.worksets == jr.workset_id.size and jw.load == float(jr.load.sum())
    assert (jw.state_inner, jw.state_outlier, jw.state_outer) == (0, 0, 0)


# ----------------------------------------------------------------------------- formulation


def test_formulate_partition_window_routes_earlier_rows_to_worksets_with_new_members() -> None:
    rng = np.random.default_rng(4)
    t = 0.15
    X = rng.uniform(-1, 1, (80, 2))
    is_outer = rng.random(80) < 0.3
    Xb = rng.uniform(-1, 1, (30, 2))
    old_ids, old_C, old_w = np.array([3, 1]), rng.uniform(-1, 1, (2, 2)), np.array([0, 2])
    b = partition_bounds("euclidean", t, 2)
    earlier = EarlierRows(Xb, np.zeros(30, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    res = formulate_partition_window(X, is_outer, "euclidean", t, partition=4, n_workers=3, workset_id=old_ids,
                                     centroid=old_C, worker=old_w, earlier=earlier, prune_outer=False)
    plain = formulate_partition_worksets(X, is_outer, "euclidean", t, workset_id=old_ids, centroid=old_C,
                                         prune_outer=False)
    assert np.array_equal(res.record, plain.record) and np.array_equal(res.workset_id, plain.workset_id)
    assert np.array_equal(res.role, plain.role) and np.array_equal(res.new_workset_id, plain.new_workset_id)
    assert res.new_workset_id.min() == 4 and (res.new_worker == 4 % 3).all()
    # every member's worker: persisted worksets keep theirs, new ones start on partition % P
    expect = {1: 2, 3: 0, **{int(g): 1 for g in res.new_workset_id}}
    assert [expect[int(g)] for g in res.workset_id] == res.worker.tolist()
    # earlier copies: to every workset with new members (old or new) within the 2t outer radius
    ids_all = np.concatenate([old_ids[np.argsort(old_ids)], res.new_workset_id])
    C_all = np.concatenate([old_C[np.argsort(old_ids)], res.new_centroid])
    with_members = np.isin(ids_all, res.workset_id[res.role != OUTER])
    Dn = pairwise("euclidean", Xb, C_all[with_members])
    ref = sorted((int(r), int(ids_all[with_members][g])) for r, g in zip(*np.nonzero(Dn <= b.outer_radius)))
    assert sorted(zip(res.routed_record.tolist(), res.routed_workset_id.tolist())) == ref and ref
    assert [expect[int(g)] for g in res.routed_workset_id] == res.routed_worker.tolist()
    # the routing searches the pivot index: at most one distance per (earlier row, target workset)
    extra = res.centroid_distance_computations - plain.centroid_distance_computations
    assert 0 < extra <= Dn.size
    # memberships already made are not made again
    done = EarlierRows(Xb, np.zeros(30, np.int64), np.array([r for r, _ in ref]), np.array([g for _, g in ref]))
    again = formulate_partition_window(X, is_outer, "euclidean", t, partition=4, n_workers=3, workset_id=old_ids,
                                       centroid=old_C, worker=old_w, earlier=done, prune_outer=False)
    assert again.routed_record.size == 0
    # an earlier inner record only reaches worksets with a smaller id than its home (Definition 10)
    home = EarlierRows(Xb, np.full(30, 3, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    res3 = formulate_partition_window(X, is_outer, "euclidean", t, partition=4, n_workers=3, workset_id=old_ids,
                                      centroid=old_C, worker=old_w, earlier=home, prune_outer=False)
    assert set(res3.routed_workset_id.tolist()) <= {1}


def _manual_microbatch(win, ts, side, ids, X, is_outer, t, part, P, ids0, C0, wk0, bwin, Xb):  # type: ignore[no-untyped-def]
    """The driver written out: windows ascending, (ts, side, id) order, growing centroid list;
    earlier physical outer copies (Xb, windows bwin) go to every workset with new members."""
    b = partition_bounds("euclidean", t, X.shape[1])
    out = []
    ids0, C0, wk0 = ids0.copy(), C0.copy(), wk0.copy()
    for w in sorted(set(win.tolist())):
        sel = [i for i in sorted(range(len(win)), key=lambda i: (ts[i], side[i], ids[i])) if win[i] == w]
        sel = np.array(sel)
        res = formulate_partition_worksets(X[sel], is_outer[sel], "euclidean", t, workset_id=ids0,
                                           centroid=C0, prune_outer=False)
        k = res.new_workset_id.size
        wmap = dict(zip(ids0.tolist(), wk0.tolist())) | {int(g): part % P for g in res.new_workset_id}
        members = sorted((int(sel[r]), int(g), int(ro), wmap[int(g)])
                         for r, g, ro in zip(res.record, res.workset_id, res.role))
        bsel = np.flatnonzero(bwin == w)
        all_ids = np.concatenate([ids0, res.new_workset_id])
        all_C = np.concatenate([C0, res.new_centroid])
        tgt = np.isin(all_ids, res.workset_id[res.role != OUTER])
        comps = res.centroid_distance_computations
        routed = []
        if bsel.size and tgt.any():
            D = pairwise("euclidean", Xb[bsel], all_C[tgt])
            routed = sorted((int(bsel[r]), int(all_ids[tgt][g])) for r, g in zip(*np.nonzero(b.outer_radius >= D)))
            comps += D.size
        if k:
            ids0 = np.concatenate([ids0, res.new_workset_id])
            C0 = np.concatenate([C0, res.new_centroid])
            wk0 = np.concatenate([wk0, np.full(k, part % P)])
        out.append((int(w), members, routed, res.new_workset_id.tolist(), comps))
    return out


def test_formulate_partition_microbatch_matches_the_driver_written_out() -> None:
    rng = np.random.default_rng(9)
    n, t, part, P = 240, 0.2, 5, 3
    X = rng.uniform(-1, 1, (n, 2))
    win = rng.choice([60, 0, 120], n)  # three windows, not in order
    ts = rng.integers(0, 40, n)  # many equal timestamps: ties broken by (side, id)
    side = rng.integers(0, 2, n).astype(np.int8)
    ids = rng.permutation(n).astype(np.int64)
    is_outer = rng.random(n) < 0.25
    ids0, C0, wk0 = np.array([2, 1]), rng.uniform(-1, 1, (2, 2)), np.array([1, 0])
    bwin = rng.choice([0, 60, 120, 180], 40)
    Xb = rng.uniform(-1, 1, (40, 2))
    state = PartitionState.from_arrays(bwin, np.ones(40), np.arange(40) + 1000, Xb, np.zeros(40), dim=2)
    got = formulate_partition_microbatch(win, ts, side, ids, X, is_outer, "euclidean", t, partition=part,
                                         n_workers=P, workset_id=ids0, centroid=C0, worker=wk0, state=state,
                                         prune_outer=False)
    ref = _manual_microbatch(win, ts, side, ids, X, is_outer, t, part, P, ids0, C0, wk0, bwin, Xb)
    assert [g.window for g in got] == [0, 60, 120]
    n_routed = 0
    for g, (w, members, routed, new_ids, comps) in zip(got, ref):
        r = g.worksets
        assert g.window == w
        assert sorted(zip(r.record.tolist(), r.workset_id.tolist(), r.role.tolist(), r.worker.tolist())) == members
        assert sorted(zip(r.routed_record.tolist(), r.routed_workset_id.tolist())) == routed
        assert r.new_workset_id.tolist() == new_ids and r.centroid_distance_computations <= comps
        n_routed += len(routed)
    assert n_routed > 0 and sum(len(g.worksets.new_workset_id) for g in got) > 0
    # input order does not matter: arrival order is (ts, side, id) inside each window
    perm = rng.permutation(n)
    again = formulate_partition_microbatch(win[perm], ts[perm], side[perm], ids[perm], X[perm], is_outer[perm],
                                           "euclidean", t, partition=part, n_workers=P, workset_id=ids0[::-1],
                                           centroid=C0[::-1], worker=wk0[::-1], state=state, prune_outer=False)
    for a, b in zip(got, again):
        assert np.array_equal(perm[b.worksets.record], a.worksets.record)
        assert np.array_equal(b.worksets.workset_id, a.worksets.workset_id)
        assert np.array_equal(b.worksets.worker, a.worksets.worker)
