"""SPO-Join's pipeline steps (``simjoin.core.inequality.spo``) driven unit by unit as the Spark
pipeline drives them - probe every state row and the new tuples, merge, expire - against a brute
force over the whole streams. Many seeds and shapes: self- and two-stream joins, time and count
windows, 1-4 units whose cuts fall inside windows, small merge sizes (many immutable batches),
values and timestamps with many ties, every operator, offsets, bands, = and !=.

``SIMJOIN_PROPERTY_CASES`` sets the number of random cases (default 60, run in seconds)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from simjoin.core.inequality.query import parse_query
from simjoin.core.inequality.spo import (
    BATCH,
    MUTABLE,
    NEW,
    IneqParams,
    Window,
    expired,
    merge_state,
    new_tuples,
    probe_row,
    read_mutable,
)

QUERIES = [
    "l.a < r.a",
    "l.a >= r.b",
    "l.a <= r.a AND l.b > r.b",
    "l.a < r.a AND l.b > r.b",
    "l.a + 1 < r.b AND l.b >= r.a AND l.c <= r.c",
    "abs(l.a - r.a) < 2",
    "abs(l.a - r.b) <= 1 AND l.c = r.c",
    "l.a > r.a AND l.b != r.b",
    "l.a < r.a AND l.b > r.b AND l.c >= r.c AND l.a - 2 <= r.b",
    "r.a - 1 >= l.b AND l.c = r.c AND l.a != r.a",
]


def _stream(rng, n, base, span):
    ts = np.sort(rng.integers(0, span, n)) * 1_000_000
    return {"id": np.arange(n, dtype=np.int64) * 7 + base, "ts": ts.astype(np.int64),
            "a": rng.integers(0, 6, n).astype(float), "b": rng.integers(0, 6, n).astype(float),
            "c": rng.integers(0, 3, n).astype(float)}


def _cuts(rng, n, k):
    return np.sort(rng.choice(np.arange(1, n), size=min(k - 1, n - 1), replace=False)) if k > 1 and n > 1 else []


def brute_force(q, L, R, window, unit_l, unit_r):
    """Every valid pair of the whole streams. ``unit_*``: the unit each tuple arrived in."""
    self_join = R is None
    R = L if self_join else R
    unit_r = unit_l if self_join else unit_r
    ok = np.ones((len(L["id"]), len(R["id"])), bool)
    for p in q.predicates:
        ok &= p.holds(L[p.left][:, None], R[p.right][None, :])
    if window.time_us is not None:
        ok &= np.abs(L["ts"][:, None] - R["ts"][None, :]) < window.time_us
    else:
        w = window.count
        sl, sr = np.arange(len(L["id"])), np.arange(len(R["id"]))
        if self_join:
            ok &= np.abs(sl[:, None] - sr[None, :]) <= w
        else:  # cnt: the other stream's tuples of earlier units, or of the same unit and not later
            cl = np.array([np.sum((unit_r < unit_l[i]) | ((unit_r == unit_l[i]) & (R["ts"] <= L["ts"][i])))
                           for i in range(len(sl))])
            cr = np.array([np.sum((unit_l < unit_r[j]) | ((unit_l == unit_r[j]) & (L["ts"] <= R["ts"][j])))
                           for j in range(len(sr))])
            ok &= (((cl[:, None] - w <= sr[None, :]) & (sr[None, :] < cl[:, None]))
                   | ((cr[None, :] - w <= sl[:, None]) & (sl[:, None] < cr[None, :])))
    if self_join:
        np.fill_diagonal(ok, False)
    i, j = np.nonzero(ok)
    return sorted(zip(L["id"][i].tolist(), R["id"][j].tolist(), strict=True))


def simulate(p: IneqParams, L, R, cuts_l, cuts_r):
    """The pipeline's unit loop without Spark; returns the pairs in publication order and the
    most live state rows seen."""
    q = p.query
    pieces_l = np.split(np.arange(len(L["id"])), cuts_l)
    pieces_r = np.split(np.arange(len(R["id"])), cuts_r) if R is not None else [None] * len(pieces_l)
    n_units = max(len(pieces_l), len(pieces_r))
    state: list[dict] = []
    counts: dict[int, int] = {}
    max_ts: dict[int, int] = {}
    next_batch, out, most = 0, [], 0
    for u in range(n_units):
        parts = []
        for side, (S, pieces) in enumerate(((L, pieces_l), (R, pieces_r))):
            if S is None or u >= len(pieces):
                continue
            idx = pieces[u]
            parts.append((np.full(len(idx), side), {k: v[idx] for k, v in S.items()}))
        side = np.concatenate([x[0] for x in parts])
        cols = {k: np.concatenate([x[1][k] for x in parts]) for k in ("id", "ts", "a", "b", "c")}
        new = new_tuples(side, cols["id"], cols["ts"], cols, p, counts)
        for row in [*state, {"kind": NEW, "side": 0, "batch_id": -1}]:
            lid, rid, _, _ = probe_row(q, row, new, p.window, p.self_join)
            out += list(zip(lid.tolist(), rid.tolist(), strict=True))
        prev = read_mutable([r for r in state if r["kind"] == MUTABLE])
        rows, next_batch, _ = merge_state(prev, new, p, next_batch)
        state = [r for r in state if r["kind"] != MUTABLE] + rows
        for s, t in new.items():
            counts[s] = counts.get(s, 0) + len(t)
            if len(t):
                max_ts[s] = max(max_ts.get(s, t.ts.max()), int(t.ts.max()))
        state = [r for r in state if r["kind"] != BATCH or not expired(
            p.window, r["ts_max"], r["seq_max"], max_ts.get(r["side"] if p.self_join else 1 - r["side"]),
            counts.get(r["side"], 0))]
        most = max(most, sum(r["n"] for r in state))
    return out, most


def _case(seed: int):
    rng = np.random.default_rng(seed)
    self_join = bool(rng.integers(0, 2))
    n_l = int(rng.integers(0, 70))
    span = int(rng.integers(3, 60))
    L = _stream(rng, n_l, 11, span)
    R = None if self_join else _stream(rng, int(rng.integers(0, 70)), 100_003, span)
    where = QUERIES[int(rng.integers(0, len(QUERIES)))]
    if rng.integers(0, 2):
        window = Window(time_us=int(rng.choice([1, 2, 5, 10, 30])) * 1_000_000)
        delta = None if rng.integers(0, 2) else int(rng.integers(1, 20))
        slide = int(rng.choice([1, 2, 5])) * 1_000_000
    else:
        window = Window(count=int(rng.choice([1, 2, 5, 10, 50])))
        delta, slide = int(rng.integers(1, 20)), None
    p = IneqParams(where, self_join, window, int(rng.integers(1, 4)), delta, slide)
    k = int(rng.integers(1, 5))
    cuts_l = _cuts(rng, n_l, k)
    cuts_r = _cuts(rng, len(R["id"]), k) if R is not None else []
    return p, L, R, cuts_l, cuts_r


def _units(n, cuts):
    u = np.zeros(n, np.int64)
    for c in cuts:
        u[c:] += 1
    return u


CASES = int(os.environ.get("SIMJOIN_PROPERTY_CASES", "60"))


@pytest.mark.parametrize("seed", range(CASES))
def test_stream_equals_brute_force(seed):
    p, L, R, cuts_l, cuts_r = _case(seed)
    got, _ = simulate(p, L, R, cuts_l, cuts_r)
    ul = _units(len(L["id"]), cuts_l)
    ur = _units(len(R["id"]), cuts_r) if R is not None else None
    ref = brute_force(parse_query(p.where), L, R, p.window, ul, ur)
    assert len(got) == len(set(got)), f"seed {seed}: {len(got) - len(set(got))} pairs repeated"
    assert sorted(got) == ref, (f"seed {seed} {p}: {len(set(ref) - set(got))} missing, "
                                f"{len(set(got) - set(ref))} extra")


def test_expiry_bounds_the_state():
    """A long self-join stream with a short window keeps about a window plus a slide of state."""
    rng = np.random.default_rng(1)
    L = _stream(rng, 2000, 0, 2000)  # about one tuple a second
    p = IneqParams("l.a < r.a AND l.b > r.b", True, Window(time_us=20_000_000), 2, 10, None)
    _, most = simulate(p, L, None, np.arange(100, 2000, 100), [])
    assert most < 20 + 100 + 2 * 10 + 30, most


@pytest.mark.parametrize("seed", range(CASES))
def test_stream_with_units_joined_chunk_by_chunk_equals_brute_force(seed, monkeypatch):
    """A unit spanning many windows joins its own tuples chunk by chunk (``join_new``); here every
    unit that spans more than one window does, with chunks as narrow as the window itself."""
    from simjoin.core.inequality import spo

    monkeypatch.setattr(spo, "CHUNK_WINDOWS", 1)
    monkeypatch.setattr(spo, "CHUNK_TUPLES", 1)
    test_stream_equals_brute_force(seed)


@pytest.mark.parametrize("self_join", [True, False])
@pytest.mark.parametrize("where", ["l.a < r.a AND l.b > r.b", "abs(l.a - r.a) <= 1", "l.c = r.c AND l.a >= r.b"])
def test_a_backlog_unit_is_joined_chunk_by_chunk_exactly(self_join, where):
    """One unit of a long backlog (a year of flights in one run): the chunked join of its own
    tuples equals one index over the whole unit, timestamps on chunk edges and ties included."""
    from simjoin.core.inequality import spo

    rng = np.random.default_rng(7)
    w = 10_000_000

    def tuples(n, base):
        ts = np.sort(rng.integers(0, 60, n)) * (w // 2)  # many ties, many on multiples of the window
        cols = {"a": rng.integers(0, 9, n).astype(float), "b": rng.integers(0, 9, n).astype(float),
                "c": rng.integers(0, 3, n).astype(float)}
        return spo.Tuples(np.arange(n, dtype=np.int64) * 3 + base, ts.astype(np.int64), np.arange(n, dtype=np.int64),
                          np.zeros(n, np.int64), cols)

    q = parse_query(where)
    L = tuples(1500, 1)
    R = None if self_join else tuples(1200, 2)
    got = spo.join_new(q, L, R, Window(time_us=w))
    pi, si = spo._join_new_idx(q, L, R, Window(time_us=w))
    S = L if R is None else R
    want = sorted(zip(L.id[pi].tolist(), S.id[si].tolist(), np.maximum(L.ts[pi], S.ts[si]).tolist(), strict=True))
    assert sorted(zip(*(x.tolist() for x in got), strict=True)) == want and len(want) > 1000
