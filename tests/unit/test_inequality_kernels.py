"""SPO-Join kernels (POBatch, MutablePart) against the brute-force twin, with many ties for every operator."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping

import numpy as np
import pytest

from simjoin.core.exact import ordered
from simjoin.core.inequality import (
    PLANS,
    MutablePart,
    POBatch,
    Query,
    brute_force_pairs,
    key_codes,
    orient,
    pair_set,
    parse_query,
)

Cols = dict[str, np.ndarray]
Bounds = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]
KINDS = ("batch", "batch_bytes", "mutable", "mutable_bytes", "take", "to_batch")
INEQ = ("<", "<=", ">", ">=")


def _stream(rng: np.random.Generator, n: int, id0: int, hi: int = 4) -> Cols:
    cols: Cols = {
        "id": np.arange(id0, id0 + n, dtype=np.int64),
        "ts": rng.integers(0, 60, n).astype(np.int64),
        "seq": np.arange(n, dtype=np.int64),
    }
    for c in "abcd":
        cols[c] = rng.integers(0, hi, n).astype(np.float64)
    cols["k"] = rng.integers(0, 3, n).astype(np.float64)
    return cols


def _slice(S: Mapping[str, np.ndarray], a: int, b: int) -> Cols:
    return {c: v[a:b] for c, v in S.items()}


def _stores(kind: str, q: Query, role: str, S: Cols, rng: np.random.Generator) -> list[tuple[object, np.ndarray]]:
    o = orient(q, role)
    n = len(S["id"])
    if kind.startswith("batch"):
        b = POBatch.build(
            S["id"], S["ts"], S["seq"], o.stored_values(S, n), o.ops,
            key_values=o.stored_key_values(S, n), residual=o.stored_residual(S, n),
        )  # fmt: skip
        if kind == "batch_bytes":
            b = POBatch.from_bytes(b.to_bytes())
        return [(b, b.ids)]
    mp = MutablePart(o.ops, len(o.key_stored.cols), len(o.residual_stored.cols))
    cuts = sorted(rng.integers(0, n + 1, 3).tolist())
    for a, c in zip([0, *cuts], [*cuts, n]):
        sl = _slice(S, a, c)
        mp.insert(
            sl["id"], sl["ts"], sl["seq"], o.stored_values(sl, c - a),
            key_values=o.stored_key_values(sl, c - a), residual=o.stored_residual(sl, c - a),
        )  # fmt: skip
    assert len(mp) == n
    if kind == "mutable_bytes":
        mp = MutablePart.from_bytes(mp.to_bytes())
    if kind == "to_batch":
        b = mp.to_batch()
        return [(b, b.ids)]
    if kind == "take":
        head, rest = mp.take(int(rng.integers(0, n + 1)))
        assert len(head) + len(rest) == n
        return [(head, head.ids), (rest, rest.ids)]
    return [(mp, mp.ids)]


def _join(kind: str, q: Query, role: str, S: Cols, P: Cols, bounds: Bounds, rng: np.random.Generator) -> set:
    """Pairs (l id, r id) of stored ``S`` (role ``role``) probed by ``P``."""
    o = orient(q, role)
    m = len(P["id"])
    out: set[tuple[int, int]] = set()
    for store, ids in _stores(kind, q, role, S, rng):
        pi, si = store.probe(  # type: ignore[attr-defined]
            o.probe_values(P, m), **bounds(P),
            key_values=o.probe_key_values(P, m), residual=o.probe_residual(P, m),
        )  # fmt: skip
        assert pi.dtype == np.int64 and si.dtype == np.int64
        pairs = pair_set(P["id"][pi], ids[si]) if role == "r" else pair_set(ids[si], P["id"][pi])
        assert len(pairs) == len(pi), "duplicate pairs"
        out |= pairs
        if isinstance(store, POBatch):
            args = store.prepare(
                o.probe_values(P, m), **bounds(P), key_values=o.probe_key_values(P, m), residual=o.probe_residual(P, m)
            )
            for plan in PLANS:
                pp, ss = store.probe_prepared(args, plan)
                assert len(pp) == len(pi) and pair_set(pp, ss) == pair_set(pi, si), plan
    return out


def _time(W: int) -> Bounds:
    return lambda P: {"ts_lo": P["ts"] - W, "ts_hi": P["ts"] + W}


def _no_bounds(P: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {}


def _term(rng: np.random.Generator, side: str, col: str) -> str:
    return f"{side}.{col}" + str(rng.choice(["", "", " + 1", " - 1", " + 0.5", " - 2"]))


def _random_where(rng: np.random.Generator, n_ineq: int | None = None) -> str:
    parts = []
    for _ in range(int(rng.integers(1, 5)) if n_ineq is None else n_ineq):
        x, y = rng.choice(list("abc")), rng.choice(list("abc"))
        if rng.random() < 0.25:
            eps = rng.choice(["0.5", "1", "2"])
            op = rng.choice(["<", "<="])
            parts.append(f"abs(l.{x} - r.{y}) {op} {eps}" if rng.random() < 0.5 else f"abs(r.{y} - l.{x}) {op} {eps}")
        else:
            op = str(rng.choice(INEQ))
            lt, rt = _term(rng, "l", x), _term(rng, "r", y)
            parts.append(f"{lt} {op} {rt}" if rng.random() < 0.5 else f"{rt} {op} {lt}")
    for _ in range(int(rng.integers(0, 3))):
        kx = rng.choice(["k", "k", "d"])
        parts.append(f"l.{kx} = r.{rng.choice(['k', kx])}")
    if rng.random() < 0.4:
        parts.append(f"l.d != r.{rng.choice(['d', 'a'])}")
    rng.shuffle(parts)
    return " AND ".join(parts)


@pytest.mark.parametrize("kind", KINDS)
def test_random_queries_match_brute_force(kind: str) -> None:
    for seed in range(40):
        rng = np.random.default_rng(seed)
        q = parse_query(_random_where(rng))
        L = _stream(rng, int(rng.integers(20, 70)), 0)
        R = _stream(rng, int(rng.integers(20, 70)), 1000)
        W = int(rng.choice([5, 20, 1000]))
        ref = brute_force_pairs(q, L, R, W)
        for role, S, P in (("r", R, L), ("l", L, R)):
            got = _join(kind, q, role, S, P, _time(W), rng)
            assert got == ref, (seed, q.text, role)


@pytest.mark.parametrize("n_ineq", [1, 2, 3, 4])
def test_every_operator_combination(n_ineq: int) -> None:
    rng = np.random.default_rng(n_ineq)
    L = _stream(rng, 45, 0, hi=3)
    R = _stream(rng, 50, 1000, hi=3)
    combos = list(itertools.product(INEQ, repeat=n_ineq))
    if n_ineq > 2:
        combos = [combos[i] for i in rng.choice(len(combos), 24, replace=False)]
    for ops in combos:
        cols = rng.permutation(list("abcd"))[:n_ineq]
        where = " AND ".join(f"l.{c} {op} r.{cols[(i + 1) % n_ineq]}" for i, (c, op) in enumerate(zip(cols, ops)))
        q = parse_query(where)
        ref = brute_force_pairs(q, L, R, 10**9)
        for role, S, P in (("r", R, L), ("l", L, R)):
            for kind in ("batch", "mutable"):
                assert _join(kind, q, role, S, P, _no_bounds, rng) == ref, (where, role, kind)


def test_same_attribute_ties_and_bands() -> None:
    """Two predicates on one attribute (range predicates of one order) and bands, on heavy ties."""
    rng = np.random.default_rng(7)
    L = _stream(rng, 60, 0, hi=5)
    R = _stream(rng, 60, 1000, hi=5)
    for op1, op2 in itertools.product(INEQ, repeat=2):
        for where in (f"l.a {op1} r.a AND l.a + 1 {op2} r.a", f"l.a {op1} r.b AND l.a - 1 {op2} r.b AND l.c < r.c"):
            q = parse_query(where)
            ref = brute_force_pairs(q, L, R, 10**9)
            for role, S, P in (("r", R, L), ("l", L, R)):
                assert _join("batch", q, role, S, P, _no_bounds, rng) == ref, (where, role)
    q = parse_query("abs(l.a - r.a) <= 1 AND abs(l.b - r.b) < 2")
    o = orient(q, "l")
    b = POBatch.build(L["id"], L["ts"], L["seq"], o.stored_values(L), o.ops)
    assert b.class1.tolist() == [0, 1] and b.class2.tolist() == [2, 3]
    ref = brute_force_pairs(q, L, R, 10**9)
    assert _join("batch", q, "l", L, R, _no_bounds, rng) == ref


def test_count_window_two_streams() -> None:
    """Each arrival probes the last W tuples of the other stream; the union is the count-window join."""
    for seed in range(25):
        rng = np.random.default_rng(100 + seed)
        nl, nr = int(rng.integers(10, 60)), int(rng.integers(10, 60))
        L, R = _stream(rng, nl, 0), _stream(rng, nr, 1000)
        labels = rng.permutation(np.r_[np.zeros(nl, dtype=np.int64), np.ones(nr, dtype=np.int64)])
        L["cnt"] = np.cumsum(labels)[labels == 0]
        R["cnt"] = np.cumsum(1 - labels)[labels == 1]
        W = int(rng.integers(1, 30))
        q = parse_query(_random_where(rng))
        ref = brute_force_pairs(q, L, R, W, count=True)

        def bounds(P: Mapping[str, np.ndarray], W: int = W) -> dict[str, np.ndarray]:
            return {"seq_lo": P["cnt"] - W, "seq_hi": P["cnt"]}

        kind = KINDS[seed % len(KINDS)]
        got = _join(kind, q, "r", R, L, bounds, rng) | _join(kind, q, "l", L, R, bounds, rng)
        assert got == ref, (seed, q.text)


@pytest.mark.parametrize("count", [False, True])
def test_self_join_windows(count: bool) -> None:
    for seed in range(20):
        rng = np.random.default_rng(200 + seed)
        L = _stream(rng, int(rng.integers(10, 80)), 0)
        W = int(rng.integers(1, 25))
        q = parse_query(_random_where(rng))
        ref = brute_force_pairs(q, L, None, W, count=count)

        def bounds(P: Mapping[str, np.ndarray], W: int = W) -> dict[str, np.ndarray]:
            if count:
                return {"seq_lo": P["seq"] - W, "seq_hi": P["seq"] + W + 1}
            return {"ts_lo": P["ts"] - W, "ts_hi": P["ts"] + W}

        got = {(x, y) for x, y in _join(KINDS[seed % len(KINDS)], q, "r", L, L, bounds, rng) if x != y}
        assert got == ref, (seed, q.text)


def test_ts_and_seq_bounds_together() -> None:
    rng = np.random.default_rng(3)
    L, R = _stream(rng, 70, 0), _stream(rng, 70, 1000)
    q = parse_query("l.a <= r.b AND l.c > r.c - 1")
    lo_s, hi_s = rng.integers(0, 40, 70), rng.integers(20, 80, 70)

    def bounds(P: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"ts_lo": P["ts"] - 15, "ts_hi": P["ts"] + 15, "seq_lo": lo_s, "seq_hi": hi_s}

    ref = {(x, y) for x, y in brute_force_pairs(q, L, R, 15) if lo_s[x] <= R["seq"][y - 1000] < hi_s[x]}
    for kind in KINDS:
        assert _join(kind, q, "r", R, L, bounds, rng) == ref, kind


def test_key_collisions_are_verified() -> None:
    """Codes that collide (k mod 2) still join only exactly equal key values; codes alone are trusted."""
    rng = np.random.default_rng(11)
    L, R = _stream(rng, 80, 0), _stream(rng, 90, 1000)
    q = parse_query("l.a < r.a AND l.b >= r.b AND l.k = r.k")
    ref = brute_force_pairs(q, L, R, 10**9)
    o = orient(q, "r")
    b = POBatch.build(
        R["id"], R["ts"], R["seq"], o.stored_values(R), o.ops, keys=R["k"].astype(np.int64) % 2,
        key_values=o.stored_key_values(R),
    )  # fmt: skip
    pi, si = b.probe(o.probe_values(L), keys=L["k"].astype(np.int64) % 2, key_values=o.probe_key_values(L))
    assert pair_set(L["id"][pi], R["id"][si]) == ref
    b2 = POBatch.build(R["id"], R["ts"], R["seq"], o.stored_values(R), o.ops, keys=R["k"].astype(np.int64))
    pi, si = b2.probe(o.probe_values(L), keys=L["k"].astype(np.int64))
    assert pair_set(L["id"][pi], R["id"][si]) == ref
    mp = MutablePart(o.ops, n_key_cols=1)
    mp.insert(R["id"], R["ts"], R["seq"], o.stored_values(R), keys=R["k"].astype(np.int64) % 2,
              key_values=o.stored_key_values(R))  # fmt: skip
    pi, si = mp.probe(o.probe_values(L), keys=L["k"].astype(np.int64) % 2, key_values=o.probe_key_values(L))
    assert pair_set(L["id"][pi], R["id"][si]) == ref
    assert key_codes(np.array([[0.0], [-0.0]]))[0] == key_codes(np.array([[0.0], [-0.0]]))[1]


def test_large_batch_crosses_summary_words() -> None:
    """More than 64 * 64 tuples, so the summary bit array has several words; continuous and tied values."""
    rng = np.random.default_rng(5)
    n, m = 9000, 60
    R = {"id": np.arange(n) + 10**6, "ts": np.zeros(n, dtype=np.int64), "seq": np.arange(n)}
    L = {"id": np.arange(m), "ts": np.zeros(m, dtype=np.int64), "seq": np.arange(m)}
    R["a"], R["b"] = rng.random(n), np.round(rng.random(n), 2)
    L["a"], L["b"] = rng.random(m), np.round(rng.random(m), 2)
    for where in ("l.a < r.a AND l.b >= r.b", "l.a >= r.a AND l.b < r.b AND l.a + 0.5 > r.b", "l.a > r.a"):
        q = parse_query(where)
        ref = brute_force_pairs(q, L, R, 1)
        for role, S, P in (("r", R, L), ("l", L, R)):
            for kind in ("batch", "mutable"):
                assert _join(kind, q, role, S, P, _no_bounds, rng) == ref, (where, role, kind)


def test_empty_stored_or_probe() -> None:
    rng = np.random.default_rng(0)
    q = parse_query("l.a < r.a AND l.b > r.b AND l.k = r.k")
    o = orient(q, "r")
    S, P = _stream(rng, 0, 0), _stream(rng, 10, 100)
    for kind in KINDS:
        assert _join(kind, q, "r", S, P, _time(5), rng) == set()
        assert _join(kind, q, "r", P, S, _time(5), rng) == set()
    b = POBatch.build(S["id"], S["ts"], S["seq"], o.stored_values(S, 0), o.ops, key_values=o.stored_key_values(S, 0))
    assert b.n == 0 and b.ts_max < b.ts_min
    pi, si = b.probe(o.probe_values(P), key_values=o.probe_key_values(P))
    assert pi.shape == (0,) and si.shape == (0,)


def test_mutable_tmp_ids_and_persisted_index() -> None:
    rng = np.random.default_rng(9)
    R = _stream(rng, 300, 0)
    mp = MutablePart([">", "<="])
    for a in range(0, 300, 100):
        mp.insert(R["id"][a : a + 100], R["ts"][a : a + 100], R["seq"][a : a + 100],
                  np.column_stack([R["a"], R["b"]])[a : a + 100])  # fmt: skip
    assert np.array_equal(mp.ids, R["id"]) and mp.seq_max == 299 and mp.seq_min == 0
    for j, col in enumerate("ab"):
        # the index holds int64 keys (a float's order-preserving key, simjoin.core.exact)
        assert np.array_equal(mp.sorted_values[j], ordered(np.sort(R[col], kind="stable")))
        assert np.array_equal(mp.sorted_tids[j], np.argsort(R[col], kind="stable"))
    back = MutablePart.from_bytes(mp.to_bytes())
    pv = np.column_stack([rng.integers(0, 4, 50), rng.integers(0, 4, 50)]).astype(np.float64)
    p1, t1 = mp.probe(pv)
    p2, t2 = back.probe(pv)
    assert np.array_equal(p1, p2) and np.array_equal(t1, t2)
    batch = mp.to_batch()
    back_b = POBatch.from_arrays(batch.to_arrays())
    pb, sb = back_b.probe(pv)
    assert set(zip(pb.tolist(), sb.tolist())) == set(zip(p1.tolist(), t1.tolist()))


def test_probe_argument_errors() -> None:
    rng = np.random.default_rng(0)
    R = _stream(rng, 10, 0)
    v = np.column_stack([R["a"], R["b"]])
    b = POBatch.build(R["id"], R["ts"], R["seq"], v, ["<", ">"])
    with pytest.raises(ValueError, match=r"shape \(m, 2\)"):
        b.probe(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="together"):
        b.probe(np.zeros((3, 2)), ts_lo=np.zeros(3))
    with pytest.raises(ValueError, match="no equality keys"):
        b.probe(np.zeros((3, 2)), keys=np.zeros(3))
    with pytest.raises(ValueError, match="not an inequality"):
        POBatch.build(R["id"], R["ts"], R["seq"], v, ["<", "="])
    keyed = MutablePart(["<"], n_key_cols=1)
    with pytest.raises(ValueError, match="key_values is required"):
        keyed.insert(R["id"], R["ts"], R["seq"], R["a"])


def test_matches_duckdb_iejoin() -> None:
    import duckdb  # a test dependency (pyproject [test])
    rng = np.random.default_rng(42)
    L, R = _stream(rng, 300, 0, hi=20), _stream(rng, 300, 1000, hi=20)
    con = duckdb.connect()
    for name, S in (("lt", L), ("rt", R)):
        rows = ", ".join(f"({i}, {a}, {b})" for i, a, b in zip(S["id"], S["a"], S["b"]))
        con.execute(f"CREATE TABLE {name} (id BIGINT, a DOUBLE, b DOUBLE); INSERT INTO {name} VALUES {rows}")
    ref = set(con.execute("SELECT l.id, r.id FROM lt l JOIN rt r ON l.a < r.a AND l.b + 2 >= r.b").fetchall())
    q = parse_query("r.a > l.a AND r.b <= l.b + 2")
    assert _join("batch", q, "r", R, L, _no_bounds, rng) == ref
    assert _join("mutable", q, "l", L, R, _no_bounds, rng) == ref


@pytest.mark.parametrize("m", [1, 7, 3000])
def test_galloping_ranges_equal_binary_searches(m: int) -> None:
    """``sorted_ranges`` (one galloping pass over probes in (group, value) order) gives every probe the range a
    binary search per probe gives, for every operator, with ties, several key groups and probes without one."""
    from simjoin.core.inequality.kernels import OP_CODES, op_range, sorted_ranges

    rng = np.random.default_rng(m)
    n = 2000
    groups = np.sort(rng.integers(0, 5, n))
    offsets = np.searchsorted(groups, np.arange(6)).astype(np.int64)
    values = np.concatenate([np.sort(rng.integers(-20, 20, int((groups == g).sum()))) for g in range(5)])
    pv = rng.integers(-25, 25, m).astype(np.int64)
    pg = rng.integers(-1, 5, m).astype(np.int64)
    order = np.lexsort((pv, np.where(pg < 0, -1, pg))).astype(np.int64)
    for op, code in OP_CODES.items():
        start, end = sorted_ranges(values.astype(np.int64), offsets, pg, pv, order, code)
        for i in range(m):
            if pg[i] < 0:
                assert (start[i], end[i]) == (0, 0)
                continue
            want = op_range(values.astype(np.int64), offsets[pg[i]], offsets[pg[i] + 1], code, pv[i])
            assert (start[i], end[i]) == want, (op, i)


def test_batches_written_before_still_load() -> None:
    """A PO-Join batch stored by an earlier version - ``np.savez`` bytes with the sorted values and the
    permutation array, which are now derived on load - reads back to the same index and the same pairs."""
    import io

    rng = np.random.default_rng(5)
    q = parse_query("l.a < r.a AND l.b > r.b")
    S = _stream(rng, 400, 0, hi=30)
    o = orient(q, "l")
    b = POBatch.build(S["id"], S["ts"], S["seq"], o.stored_values(S, 400), o.ops)
    old = {**b.to_arrays(), **{name: getattr(b, name) for name in POBatch._DERIVED}}
    buf = io.BytesIO()
    np.savez(buf, **old)
    for back in (POBatch.from_bytes(buf.getvalue()), POBatch.from_bytes(b.to_bytes())):
        for name in (*POBatch._ARRAYS, *POBatch._DERIVED):
            np.testing.assert_array_equal(getattr(back, name), getattr(b, name))
        P = _stream(rng, 50, 1000, hi=30)
        pv = orient(q, "l").probe_values(P, 50)
        assert pair_set(*back.probe(pv)) == pair_set(*b.probe(pv))
    assert len(b.to_bytes()) < len(buf.getvalue())
