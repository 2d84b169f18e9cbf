"""S3J with ``--allowed-lateness L`` (issue 37, item 1): a window closes - its late rows are
quarantined, its join state expired - only when it ended at or before the watermark less L
(``Progress.closed_watermark``). A row that arrives after newer ones, into a window still open,
is joined exactly with every record of that window (state of earlier units and its own unit's
rows), its pairs reported once, in the unit where it arrives.

(a) The reproduction: a self-join whose second run's rows are up to 30 s older than what the
stream committed: with 60 s of lateness none is quarantined and the pairs equal brute force; with
0 s the rows of closed windows are quarantined as late.

(b) Property tests: rows arrive out of ts order across micro-batches (cuts inside windows), some
within the lateness and some beyond it, tumbling and sliding windows, self- and two-stream joins,
duplicate vectors and ts ties. The expectation is simulated from the rule above: per window, the
records admitted while it was open; brute force over them equals the output pair for pair; the
quarantine holds exactly the records that came for a closed window. The driver path and the
distributed path (Spark shaping, Spark stages) write the same pairs, quarantine and join state.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from simjoin.core.metric import brute_force_join, brute_force_join_windows
from simjoin.core.metric.stream import window_copies
from tests.helpers import run_s3j

T0 = dt.datetime(2025, 3, 1, tzinfo=dt.UTC)
US = 1_000_000


def _append(path: str, ids, secs, X) -> None:
    write_deltalake(path, pa.table({
        "id": pa.array(np.asarray(ids, np.int64), pa.int64()),
        "ts": pa.array([T0 + dt.timedelta(seconds=float(s)) for s in secs], pa.timestamp("us", tz="UTC")),
        "vector": pa.array([[float(v) for v in x] for x in X], pa.list_(pa.float64()))}), mode="append")


def _pairs(out: str) -> list[tuple[int, int, int]]:
    """The output as (left_id, right_id, window start in seconds after T0), with repeats."""
    try:
        t = DeltaTable(out).to_pyarrow_table(columns=["left_id", "right_id", "window_start"]).to_pydict()
    except Exception:
        return []
    t0 = int(T0.timestamp() * US)
    ws = [(int(w.timestamp() * US) - t0) // US for w in t["window_start"]]
    return sorted(zip(t["left_id"], t["right_id"], ws))


def _quarantine(out: str) -> list[tuple[int, int, str]]:
    try:
        t = DeltaTable(out + "_quarantine").to_pyarrow_table(columns=["side", "id", "reason"]).to_pydict()
    except Exception:
        return []
    return sorted(zip(t["side"], t["id"], t["reason"]))


def _brute(X, ids, side, secs, size, slide, t, admitted=None) -> set[tuple[int, int, int]]:
    """Brute force per window over the admitted (record, window start) copies (default: all)."""
    if admitted is None:
        rec, start = window_copies(np.round(np.asarray(secs) * US).astype(np.int64), size * US, slide * US)
        admitted = list(zip(rec.tolist(), (start // US).tolist()))
    if not admitted:
        return set()
    rec = np.array([r for r, _ in admitted], np.int64)
    win = np.array([w for _, w in admitted], np.int64)
    W, L, R, _ = brute_force_join_windows(X[rec], ids[rec], win, None if side is None else side[rec].astype(np.int8),
                                          "euclidean", t)
    return {(int(a), int(b), int(w)) for w, a, b in zip(W, L, R)}


# ------------------------------------------------------------------ (a) the reproduction

def test_rows_30s_behind_the_committed_max_are_joined_with_60s_of_lateness(spark, tmp_path):
    rng = np.random.default_rng(37)
    n, t = 100, 0.15
    X = rng.uniform(0, 1, (2 * n, 2))
    X[n + 10:n + 30] = X[10:30]  # run 2 repeats vectors of run 1: pairs across the runs at distance 0
    first = np.sort(rng.uniform(0, 60, n))
    top = float(first.max())
    second = np.round(top - rng.uniform(0, 30, n), 3)  # up to 30 s older than what the stream committed
    secs = np.concatenate([first, second])
    ids = np.arange(2 * n, dtype=np.int64)
    cfg = dict(threshold=t, metric="euclidean", window="10s", workers=2)
    got = {}
    for lateness in ("60s", "0s"):
        src, out = str(tmp_path / f"in_{lateness}"), str(tmp_path / f"out_{lateness}")
        _append(src, ids[:n], first, X[:n])
        run_s3j(spark, src, out, allowed_lateness=lateness, **cfg)
        _append(src, ids[n:], second, X[n:])
        run_s3j(spark, src, out, allowed_lateness=lateness, **cfg)
        got[lateness] = (_pairs(out), _quarantine(out))
    pairs, quarantine = got["60s"]
    assert quarantine == []
    assert len(pairs) == len(set(pairs))
    assert set(pairs) == _brute(X, ids, None, secs, 10, 10, t)
    # 0 s: every row of run 2 in a window that ended at or before the committed max is late
    closed = second < np.floor(top / 10) * 10
    assert closed.sum() > 30
    pairs0, q0 = got["0s"]
    assert [(s, i) for s, i, _ in q0] == [(0, int(i)) for i in ids[n:][closed]]
    assert all(r.startswith("late: window starting ") for _, _, r in q0), q0[:2]
    keep = np.concatenate([np.ones(n, bool), ~closed])
    assert set(pairs0) == _brute(X[keep], ids[keep], None, secs[keep], 10, 10, t) and len(pairs0) == len(set(pairs0))


@pytest.mark.parametrize("ingest", ["driver", pytest.param("spark", marks=pytest.mark.slow)])
def test_an_id_again_in_a_window_open_within_the_lateness_is_a_duplicate(spark, tmp_path, monkeypatch, ingest):
    """The duplicate-id rule spans every window still open: window [10 s, 20 s) ended before the
    committed max (57 s) but is open under 60 s of lateness, so id 5 again there is quarantined
    as seen earlier (not admitted twice, which would report its pairs twice); a new id there is
    joined with the window's earlier records."""
    monkeypatch.setenv("SIMJOIN_LOCAL_INGEST", "1" if ingest == "driver" else "0")
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    ids = np.arange(20, dtype=np.int64)
    secs = ids * 3.0
    X = np.stack([ids * 0.01, np.zeros(20)], axis=1)
    cfg = dict(threshold=0.015, metric="euclidean", window="10s", workers=2, allowed_lateness="60s")
    _append(src, ids, secs, X)
    run_s3j(spark, src, out, **cfg)
    _append(src, [5, 100], [16.0, 17.0], [[0.06, 0.0], [0.05, 0.0]])
    run_s3j(spark, src, out, **cfg)
    assert _quarantine(out) == [(0, 5, "duplicate id 5 (seen earlier)")]
    pairs = _pairs(out)
    assert len(pairs) == len(set(pairs))
    first = _brute(X, ids, None, secs, 10, 10, 0.015)
    assert set(pairs) == first | {(4, 100, 10), (5, 100, 10), (6, 100, 10)}, sorted(set(pairs) ^ first)


# ------------------------------------------------------------------ (b) property tests

SIZE, LATENESS, T = 10, 8, 0.2


def _stream(seed: int, two: bool):
    """Rows with event time ``secs`` and an arrival order: most arrive within a few seconds of
    their ts, a few up to 30 s later (some within the lateness, some beyond it). Vectors: half
    on a coarse grid (duplicates, distance 0 and ties), half uniform; ts on a 0.5 s grid (ties)."""
    rng = np.random.default_rng(seed)
    n = 140 if two else 90
    X = rng.uniform(0, 1, (n, 2))
    grid = rng.random(n) < 0.5
    X[grid] = rng.integers(0, 6, (int(grid.sum()), 2)) * 0.1
    secs = rng.integers(0, 100, n) * 0.5
    delay = rng.uniform(0, 3, n)
    far = rng.random(n) < 0.25
    delay[far] = rng.uniform(3, 30, int(far.sum()))
    order = np.argsort(secs + delay, kind="stable")
    side = rng.integers(0, 2, n) if two else np.zeros(n, np.int64)
    ids = np.empty(n, np.int64)
    for s in (0, 1):  # unique per side; the two sides share ids
        m = side == s
        ids[m] = rng.permutation(np.arange(int(m.sum())) * 3 + 1)
    # 4 to 6 micro-batches, cut at random points of the arrival order (inside windows)
    k = int(rng.integers(4, 7))
    cuts = np.concatenate([[0], np.sort(rng.choice(np.arange(5, n - 5), k - 1, replace=False)), [n]])
    batches = [order[cuts[j]:cuts[j + 1]] for j in range(k)]
    return X, secs, side, ids, batches


def _expected(secs, side, batches, slide, n_sides):
    """What the rule admits: (record, window start) copies of windows open at the record's
    arrival, and the records that came for a closed one (late), unit by unit as the engine
    commits them (a side's committed max: its admitted records' largest ts; the watermark: the
    smallest over the sides once each has one)."""
    rec, start = window_copies(np.round(secs * US).astype(np.int64), SIZE * US, slide * US)
    start = start // US
    admitted, late, behind = [], set(), 0
    marks: dict[int, float] = {}
    for b in batches:
        wm = min(marks.values()) if len(marks) == n_sides else None
        closed = None if wm is None else wm - LATENESS
        staged = []
        for i in b.tolist():
            for w in start[rec == i].tolist():
                if closed is not None and w + SIZE <= closed:
                    late.add(i)
                else:
                    staged.append((i, w))
        for i in {i for i, _ in staged}:
            s = int(side[i])
            behind += int(s in marks and secs[i] < marks[s])
        for i, _ in staged:
            marks[int(side[i])] = max(marks.get(int(side[i]), -np.inf), float(secs[i]))
        admitted += staged
    return admitted, late, behind


def _run(spark, tmp_path, name, X, secs, side, ids, batches, two, slide):
    src = {s: str(tmp_path / f"{name}_in{s}") for s in (0, 1)}
    out = str(tmp_path / f"{name}_out")
    cfg = dict(threshold=T, metric="euclidean", window=f"{SIZE}s", slide=f"{slide}s", workers=3,
               allowed_lateness=f"{LATENESS}s")
    for b in batches:
        for s in (0, 1) if two else (0,):
            m = b[side[b] == s]
            if m.size:
                _append(src[s], ids[m], secs[m], X[m])
        if not all(DeltaTable.is_deltatable(src[s]) for s in ((0, 1) if two else (0,))):
            continue  # a side has no table yet: its first rows come with the next batch
        run_s3j(spark, src[0], out, right=src[1] if two else None, **cfg)
    return out


def _check(spark, tmp_path, seed, two, slide):
    X, secs, side, ids, batches = _stream(seed, two)
    if two:  # the first unit has rows of both sides (a side's table exists before the first run)
        batches = _merge_until_both(batches, side)
    admitted, late, behind = _expected(secs, side, batches, slide, 2 if two else 1)
    out = _run(spark, tmp_path, "driver", X, secs, side, ids, batches, two, slide)
    pairs = _pairs(out)
    assert len(pairs) == len(set(pairs)), "a pair reported twice"
    ref = _brute(X, ids, side if two else None, secs, SIZE, slide, T, admitted)
    assert set(pairs) == ref
    q = _quarantine(out)
    assert sorted((s, i) for s, i, _ in q) == sorted((int(side[i]), int(ids[i])) for i in late)
    assert all(r.startswith("late: window starting ") and f"less --allowed-lateness {LATENESS}s" in r
               for _, _, r in q), q[:2]
    assert behind > 0, "no row arrived behind its stream's committed max: the seed proves nothing"
    return out, len(late)


def _merge_until_both(batches, side):
    while len(batches) > 1 and len(np.unique(side[batches[0]])) < 2:
        batches = [np.concatenate([batches[0], batches[1]]), *batches[2:]]
    return batches


FAST = [(2, False, 10), (3, False, 5), (2, True, 5), (11, True, 10), (7, True, 5), (10, False, 5)]
MORE = [(s, two, slide) for s in range(1, 17) for two in (False, True) for slide in (10, 5)
        if (s, two, slide) not in FAST]


@pytest.mark.parametrize("seed,two,slide", FAST)
def test_out_of_order_within_the_lateness_equals_brute_force(spark, tmp_path, seed, two, slide):
    _check(spark, tmp_path, seed, two, slide)


@pytest.mark.exhaustive
@pytest.mark.parametrize("seed,two,slide", MORE)
def test_out_of_order_within_the_lateness_equals_brute_force_more_seeds(spark, tmp_path, seed, two, slide):
    _check(spark, tmp_path, seed, two, slide)


def _state(out: str) -> list[tuple]:
    t = DeltaTable(out + "_state/join").to_pyarrow_table(
        columns=["window_start", "partition", "workset_id", "worker", "side", "id", "role", "unit"])
    return sorted(zip(*(t.column(c).to_pylist() for c in t.column_names)), key=repr)


def _distributed_equals_driver(spark, tmp_path, monkeypatch, seed, two, slide):
    out, n_late = _check(spark, tmp_path, seed, two, slide)
    X, secs, side, ids, batches = _stream(seed, two)
    if two:
        batches = _merge_until_both(batches, side)
    monkeypatch.setenv("SIMJOIN_LOCAL_UNIT_ROWS", "0")  # the distributed stages
    monkeypatch.setenv("SIMJOIN_LOCAL_INGEST", "0")  # the Spark shaping of ingest
    ref = _run(spark, tmp_path, "spark", X, secs, side, ids, batches, two, slide)
    assert _pairs(ref) == _pairs(out)
    assert [(s, i) for s, i, _ in _quarantine(ref)] == [(s, i) for s, i, _ in _quarantine(out)]
    assert _state(ref) == _state(out)
    assert n_late > 0


@pytest.mark.slow
def test_the_distributed_path_admits_and_joins_what_the_driver_path_does(spark, tmp_path, monkeypatch):
    _distributed_equals_driver(spark, tmp_path, monkeypatch, 3, True, 5)


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("seed,two,slide", [(6, False, 10), (8, True, 10)])
def test_the_distributed_path_admits_and_joins_what_the_driver_path_does_more(spark, tmp_path, monkeypatch,
                                                                             seed, two, slide):
    _distributed_equals_driver(spark, tmp_path, monkeypatch, seed, two, slide)


# ------------------------------------------------------------------ the core, out of order

def _core_out_of_order(seed: int) -> tuple[int, int]:
    """``S3JStream`` (the Spark stages in numpy) fed in arrival order, not ts order: each
    micro-batch pushes the copies of windows still open (the watermark less the lateness) and
    expires the join state of the closed ones, as the pipeline does. Every metric, self- and
    two-stream, tumbling and sliding, 2t or t + m_W outer sets, grid data (ties, duplicates,
    distances at the threshold): brute force per window over the admitted copies, pair for pair.
    Returns (rows arriving behind their stream's committed max, copies refused as late)."""
    from simjoin.core.metric import S3JStream
    from tests.unit.test_metric_stream import _case

    c = _case(seed)
    rng, ts, side, size = c["rng"], c["ts"], c["side"], c["size"]
    n, lateness = ts.shape[0], int(rng.choice([0, size // 2, size]))
    delay = np.where(rng.random(n) < 0.3, rng.integers(0, 2 * size, n), rng.integers(0, 5, n))
    order = np.argsort(ts + delay, kind="stable")
    k = int(rng.integers(2, 7))
    cuts = np.concatenate([[0], np.sort(rng.choice(np.arange(1, n), k - 1, replace=False)), [n]])
    rec, wstart = window_copies(ts, size, c["slide"])
    s = S3JStream(c["metric"], c["t"], c["inclusive"], n_workers=c["workers"], dim=c["dim"], seed=7,
                  self_join=not c["two"], prune_outer=c["prune"])
    sides = 2 if c["two"] else 1
    marks: dict[int, int] = {}
    got, admitted, behind, refused = [], np.zeros(rec.shape[0], bool), 0, 0
    for j in range(k):
        arrived = np.zeros(n, bool)
        arrived[order[cuts[j]:cuts[j + 1]]] = True
        wm = min(marks.values()) if len(marks) == sides else None
        m = arrived[rec] & (True if wm is None else wstart + size > wm - lateness)
        refused += int((arrived[rec] & ~m).sum())
        r = rec[m]
        out = s.push(wstart[m], ts[r], side[r], c["ids"][r], c["X"][r])
        got += list(zip(out.window.tolist(), out.left_id.tolist(), out.right_id.tolist()))
        admitted |= m
        for i in np.unique(r):
            sd = int(side[i])
            behind += int(sd in marks and ts[i] < marks[sd])
        for i in np.unique(r):
            marks[int(side[i])] = max(marks.get(int(side[i]), -(1 << 62)), int(ts[i]))
        if len(marks) == sides:  # the state of closed windows goes (windows ending <= wm - lateness)
            s.expire(min(marks.values()) - lateness - size + 1)
    ref = set()
    for w in np.unique(wstart[admitted]):
        r = rec[admitted & (wstart == w)]
        L, R, _ = brute_force_join(c["X"][r], c["ids"][r], side[r] if c["two"] else None, c["metric"], c["t"],
                                   c["inclusive"])
        ref |= {(int(w), int(a), int(b)) for a, b in zip(L, R)}
    assert len(got) == len(set(got)), "a pair reported twice"
    assert set(got) == ref, f"{len(ref - set(got))} missing, {len(set(got) - ref)} extra; {c['metric']} " \
                            f"two={c['two']} window {size}/{c['slide']} lateness {lateness} prune={c['prune']}"
    return behind, refused


def test_the_core_joins_rows_out_of_order_exactly():
    seen = [_core_out_of_order(seed) for seed in range(40)]
    assert sum(b for b, _ in seen) > 100 and sum(r for _, r in seen) > 20


@pytest.mark.exhaustive
@pytest.mark.parametrize("block", range(10))
def test_the_core_joins_rows_out_of_order_exactly_more_seeds(block):
    for seed in range(40 + 40 * block, 80 + 40 * block):
        _core_out_of_order(seed)
