"""Workset formulation (S3J Section 7, steps 1-5) of simjoin.core.metric.worksets.

The two-pass implementation is checked against a literal record-at-a-time
re-implementation of the paper's streaming operator (with buffered outer records).
"""

from __future__ import annotations

import numpy as np
import pytest

from simjoin.core.metric import (
    INNER,
    METRICS,
    OUTER,
    OUTLIER,
    CentroidState,
    formulate_partition_worksets,
    formulate_worksets,
    pairwise,
    partition_bounds,
    random_centroids,
    space_partition,
)


def _streaming_reference(
    X: np.ndarray, is_outer: np.ndarray, metric: str, t: float, C0: np.ndarray | None = None
) -> tuple[set[tuple[int, int, int]], np.ndarray]:
    """Section 7 as an operator: one record at a time, outer records buffered."""
    b = partition_bounds(metric, t, X.shape[1])
    C0 = np.zeros((0, X.shape[1])) if C0 is None else C0
    allv = np.vstack([C0, X])  # centroids are initial centroids or records
    D = pairwise(b.space, allv, allv)
    k0 = len(C0)
    cents: list[int] = list(range(k0))  # indices into allv; workset id = position + 1
    rows: set[tuple[int, int, int]] = set()
    buffered: list[int] = []
    for r in range(len(X)):
        v = k0 + r
        d = [D[v, c] for c in cents]
        if is_outer[r]:
            for w, dc in enumerate(d):
                if dc <= b.outer_radius:
                    rows.add((r, w + 1, OUTER))
            buffered.append(r)
            continue
        if not d or min(d) > b.new_centroid_radius:
            for q in buffered:  # a new workset sees the buffered outer records
                if D[k0 + q, v] <= b.outer_radius:
                    rows.add((q, len(cents) + 1, OUTER))
            cents.append(v)
            home, dh = len(cents) - 1, 0.0
        else:
            home = int(np.argmin(d))
            dh = d[home]
        rows.add((r, home + 1, INNER if dh <= b.inner_radius else OUTLIER))
        for w in range(home):
            if d[w] <= b.outer_radius:
                rows.add((r, w + 1, OUTER))
    return rows, allv[cents[k0:]]


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("with_state", [False, True])
def test_two_pass_equals_streaming_operator(metric: str, with_state: bool) -> None:
    rng = np.random.default_rng(11)
    X = rng.uniform(-1, 1, size=(300, 2))
    is_outer = rng.random(300) < 0.3
    t = 0.08 if metric != "euclidean" else 0.15
    C0 = rng.uniform(-1, 1, size=(4, 2)) if with_state else None
    ref_rows, ref_new = _streaming_reference(X, is_outer, metric, t, C0)
    pw = formulate_partition_worksets(
        X,
        is_outer,
        metric,
        t,
        workset_id=None if C0 is None else np.arange(1, 5),
        centroid=C0,
        prune_outer=False,  # the paper's operator: full 2t outer sets
    )
    got = {(int(r), int(w), int(k)) for r, w, k in zip(pw.record, pw.workset_id, pw.role)}
    assert got == ref_rows
    assert np.array_equal(pw.new_centroid, ref_new)
    k0 = 0 if C0 is None else 4
    assert pw.new_workset_id.tolist() == list(range(k0 + 1, k0 + 1 + len(ref_new)))


@pytest.mark.parametrize("metric", METRICS)
def test_workset_invariants(metric: str) -> None:
    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, size=(500, 3))
    t = 0.1
    sp = space_partition(X, random_centroids(4, 3), metric, t)
    wf = formulate_worksets(X, sp, metric, t)
    b = partition_bounds(metric, t, 3)
    st = wf.state
    for p in range(4):
        ids, C = st.for_partition(p)
        assert ids.tolist() == list(range(1, len(ids) + 1))  # ids 1, 2, ... per partition
        if len(C) > 1:  # Criterion 2: centroids farther than t apart
            Dc = pairwise(b.space, C, C)
            assert Dc[~np.eye(len(C), dtype=bool)].min() > b.new_centroid_radius
    rows = wf.rows
    # every record has exactly one home row (inner or outlier), in its home partition
    home_rows = rows.role != OUTER
    assert np.array_equal(np.sort(rows.record[home_rows]), np.arange(len(X)))
    assert np.array_equal(rows.partition[home_rows], sp.home[rows.record[home_rows]])
    # outer rows only for (record, partition) pairs produced by space partitioning
    sp_pairs = set(zip(sp.record.tolist(), sp.partition.tolist()))
    assert set(zip(rows.record.tolist(), rows.partition.tolist())) <= sp_pairs
    # no (record, workset) twice
    keys = set(zip(rows.record.tolist(), rows.partition.tolist(), rows.workset_id.tolist()))
    assert len(keys) == len(rows)
    # roles vs distances to the workset centroid
    lookup = {(int(p), int(w)): c for p, w, c in zip(st.partition, st.workset_id, st.centroid)}
    cents = np.array([lookup[(int(p), int(w))] for p, w in zip(rows.partition, rows.workset_id)])
    d = np.array([pairwise(b.space, X[r : r + 1], c[None])[0, 0] for r, c in zip(rows.record, cents)])
    assert (d[rows.role == INNER] <= b.inner_radius).all()
    assert (d[rows.role == OUTLIER] <= b.new_centroid_radius).all()
    assert (d[rows.role == OUTER] <= b.outer_radius).all()
    assert np.array_equal(rows.worker, rows.partition)  # new worksets stay where created
    assert wf.n_new_worksets == len(st)


def test_centroid_state_roundtrip_and_validation() -> None:
    st = CentroidState.from_arrays([1, 0, 0], [1, 2, 1], np.eye(3))
    assert st.partition.tolist() == [0, 0, 1] and st.workset_id.tolist() == [1, 2, 1]
    assert st.worker.tolist() == [0, 0, 1]
    st2 = CentroidState.from_arrays(**st.to_arrays())
    assert all(np.array_equal(a, b) for a, b in zip(st.to_arrays().values(), st2.to_arrays().values()))
    assert st.lookup_worker([1, 0], [1, 2]).tolist() == [1, 0]
    with pytest.raises(KeyError, match="partition=1, workset_id=5"):
        st.lookup_worker([1], [5])
    moved = st.with_workers([2, 2, 2])
    assert moved.lookup_worker([0], [1]).tolist() == [2]
    with pytest.raises(ValueError, match="duplicate"):
        CentroidState.from_arrays([0, 0], [1, 1], np.eye(2))
    with pytest.raises(ValueError, match="start at 1"):
        CentroidState.from_arrays([0], [0], np.eye(1))
    assert len(CentroidState.empty(4)) == 0


def test_state_carries_across_windows_and_continues_ids() -> None:
    rng = np.random.default_rng(8)
    X1 = rng.uniform(-1, 1, size=(200, 2))
    X2 = rng.uniform(-1, 1, size=(200, 2))
    C = random_centroids(3, 2)
    t = 0.2
    w1 = formulate_worksets(X1, space_partition(X1, C, "euclidean", t), "euclidean", t)
    w2 = formulate_worksets(X2, space_partition(X2, C, "euclidean", t), "euclidean", t, state=w1.state)
    # old worksets kept with their ids; new ones continue after them
    old = set(zip(w1.state.partition.tolist(), w1.state.workset_id.tolist()))
    new = set(zip(w2.state.partition.tolist(), w2.state.workset_id.tolist()))
    assert old <= new
    for p in range(3):
        ids, _ = w2.state.for_partition(p)
        assert ids.tolist() == list(range(1, len(ids) + 1))
    assert w2.n_new_worksets == len(new) - len(old)
    with pytest.raises(ValueError, match="n_workers"):
        formulate_worksets(X2, space_partition(X2, C[:1], "euclidean", t), "euclidean", t, state=w1.state)


@pytest.mark.parametrize("metric", ["angular", "euclidean"])
def test_pruned_outer_sets_keep_results_and_computations(metric):
    """Outer copies cut to the members' reach (prune_outer): exact pairs, never more
    copies than the full 2t outer sets, over windows that reuse persisted centroids."""
    from simjoin.core.metric import pairwise, s3j_join_window
    from simjoin.core.metric.partitioning import random_centroids, space_partition
    from simjoin.core.metric.worksets import formulate_worksets

    rng = np.random.default_rng(3)
    t = 0.05 if metric == "angular" else 0.15
    state = None
    for _ in range(3):
        X = rng.uniform(-1, 1, (600, 2))
        side = np.repeat([0, 1], 300).astype(np.int8)
        ids = np.concatenate([np.arange(300), np.arange(300)])
        r = s3j_join_window(X, ids, side, metric, t, n_workers=4, centroid_state=state)
        D = pairwise(metric, X[:300], X[300:])
        want = set(zip(*np.nonzero(t > D)))
        assert set(zip(r.left_id.tolist(), r.right_id.tolist())) == want
        space = space_partition(X, random_centroids(4, 2, 42), metric, t)
        full = formulate_worksets(X, space, metric, t, state=state, prune_outer=False)
        cut = formulate_worksets(X, space, metric, t, state=state)
        assert len(cut.rows) <= len(full.rows)
        assert r.stats.copies == len(cut.rows)
        state = r.centroid_state
    assert len(cut.rows) < len(full.rows)
