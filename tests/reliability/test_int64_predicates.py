"""Issue 37, item 6: predicates compare exactly in the columns' own type (simjoin.core.exact).

The reproduction: six rows whose ``x`` is 2^60 + i (i = 0..5), same ``ts``. In float64 they are all
equal, so ``l.x < r.x`` held for no pair and ``simjoin ineq`` / ``simjoin s2j run`` published 0 pairs
instead of 15. The core tests check the kernels and indexes of ineq (PO-Join batches, the mutable
part) and S2J (hash, sorted, band/gap and scan probes, piggybacked filters, selections) pair for pair
against a brute force in Python ints, near 2^53, the int64 limits and the int8/16/32 limits, with ties,
for every operator and with constant offsets; an offset that overflows int64 is refused in one line.
"""

from __future__ import annotations

import datetime as dt
import itertools
import operator

import numpy as np
import pytest
from click.testing import CliRunner

from simjoin.cli import cli_group
from simjoin.core.exact import ExactError

T0 = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
BIG = 2**60
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "=": operator.eq,
       "!=": operator.ne}
INEQ = ("<", "<=", ">", ">=")


# ----------------------------------------------------------------------------------------- the CLI

def _big_rows(spark, path):
    rows = [(i + 1, T0, BIG + i, 7) for i in range(6)]
    spark.createDataFrame(rows, "id long, ts timestamp, x long, y long").write.format("delta").save(path)


def _pairs(path):
    from deltalake import DeltaTable

    t = DeltaTable(path).to_pyarrow_table()
    return set(zip(t.column("left_id").to_pylist(), t.column("right_id").to_pylist(), strict=True))


EXPECTED = {(a, b) for a in range(1, 7) for b in range(1, 7) if a < b}  # x increases with id: 15 pairs


def test_ineq_cli_int64_above_2_53(spark, tmp_path):
    src, out = str(tmp_path / "s"), str(tmp_path / "out")
    _big_rows(spark, src)
    r = CliRunner().invoke(cli_group(), ["ineq", "--left", src, "--output", out, "--where", "l.x < r.x AND l.y <= r.y",
                                         "--window", "1h", "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert _pairs(out) == EXPECTED


def test_s2j_cli_int64_above_2_53(spark, tmp_path):
    src, out = str(tmp_path / "s"), str(tmp_path / "out")
    _big_rows(spark, src)
    r = CliRunner().invoke(cli_group(), ["s2j", "run", "--left", src, "--output", out, "--task", "t: l.x < r.x",
                                         "--window", "1h", "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert _pairs(str(tmp_path / "out" / "t")) == EXPECTED


def test_two_streams_with_their_own_columns(spark, tmp_path):
    """``l.x < r.y``: each stream has only its own column (the other side's rows read it as null when the
    sides are staged together), both int64 above 2^53: still 15 exact pairs through ineq and s2j."""
    left, right = str(tmp_path / "l"), str(tmp_path / "r")
    spark.createDataFrame([(i + 1, T0, BIG + i) for i in range(6)], "id long, ts timestamp, x long") \
        .write.format("delta").save(left)
    spark.createDataFrame([(i + 11, T0, BIG + i) for i in range(6)], "id long, ts timestamp, y long") \
        .write.format("delta").save(right)
    want = {(a + 1, b + 11) for a in range(6) for b in range(6) if a < b}
    r = CliRunner().invoke(cli_group(), ["ineq", "--left", left, "--right", right, "--output", str(tmp_path / "o1"),
                                         "--where", "l.x < r.y", "--window", "1h", "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert _pairs(str(tmp_path / "o1")) == want
    r = CliRunner().invoke(cli_group(), ["s2j", "run", "--left", left, "--right", right, "--output",
                                         str(tmp_path / "o2"), "--task", "t: l.x < r.y", "--window", "1h",
                                         "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert _pairs(str(tmp_path / "o2" / "t")) == want


# ------------------------------------------------------------------------------- values and oracle

def _values(rng, n, lo, hi):
    """Integers with many ties at the type limits ``lo``/``hi``, around 0 and around +-2^53 (when inside)."""
    anchors = [lo, lo + 1, lo + 2, -1, 0, 1, hi - 2, hi - 1, hi]
    if lo < -(2**53) and hi > 2**53:
        anchors += [2**53 - 1, 2**53, 2**53 + 1, 2**53 + 2, -(2**53) - 1, -(2**53), -(2**53) + 1]
    picks = [anchors[i] for i in rng.integers(0, len(anchors), n)]
    return np.asarray(picks, dtype=np.int64)


#: name -> (dtype, low, high): the type limits, and int64 values around +-2^53 (where offsets cannot overflow)
LIMITS = {"int8": ("int8", -(2**7), 2**7 - 1), "int16": ("int16", -(2**15), 2**15 - 1),
          "int32": ("int32", -(2**31), 2**31 - 1), "int64": ("int64", I64_MIN, I64_MAX),
          "2^53": ("int64", -(2**54), 2**54)}


def _brute(preds, L, R):
    """Pairs (l id, r id) by Python ints: ``preds`` are (l col, op, r col, offset) or ('abs', l, op, r, eps)."""
    out = set()
    for i in range(len(L["id"])):
        for j in range(len(R["id"])):
            ok = True
            for p in preds:
                if p[0] == "abs":
                    _, a, op, b, eps = p
                    ok = OPS[op](abs(int(L[a][i]) - int(R[b][j])), eps)
                else:
                    a, op, b, off = p
                    ok = OPS[op](int(L[a][i]) + off, int(R[b][j]))
                if not ok:
                    break
            if ok:
                out.add((int(L["id"][i]), int(R["id"][j])))
    return out


def _stream(rng, n, id0, name):
    dtype, lo, hi = LIMITS[name]
    return {"id": np.arange(id0, id0 + n, dtype=np.int64), "ts": np.zeros(n, np.int64),
            "seq": np.arange(n, dtype=np.int64),
            "a": _values(rng, n, lo, hi).astype(dtype), "b": _values(rng, n, lo, hi).astype(dtype)}


def _text(p):
    if p[0] == "abs":
        return f"abs(l.{p[1]} - r.{p[3]}) {p[2]} {p[4]}"
    a, op, b, off = p
    return f"l.{a}{'' if off == 0 else (' + ' if off > 0 else ' - ') + str(abs(off))} {op} r.{b}"


def _offsets(name):
    """Offsets that keep every sum inside int64 (the int64 limits are tested without one, and refused with one)."""
    if name == "int64":
        return [0]
    return [0, 1, -1, 5, -(2**31), 2**40]


# ------------------------------------------------------------------------------------------- ineq

def _ineq_join(q, L, R, how):
    """All pairs of ``q`` by one index: a PO-Join batch or the mutable part, stored in either role."""
    from simjoin.core.inequality import MutablePart, POBatch, orient

    out = set()
    for role, S, P in (("r", R, L), ("l", L, R)):
        o = orient(q, role)
        sv, pv = o.stored_values(S, len(S["id"])), o.probe_values(P, len(P["id"]))
        skv, pkv = o.stored_key_values(S), o.probe_key_values(P)
        sres, pres = o.stored_residual(S), o.probe_residual(P)
        if how == "batch":
            idx = POBatch.build(S["id"], S["ts"], S["seq"], sv, o.ops, key_values=skv, residual=sres)
        else:
            idx = MutablePart(o.ops, len(o.key_stored.cols), len(o.residual_stored.cols))
            half = len(S["id"]) // 2
            for part in (slice(0, half), slice(half, None)):  # two inserts: the merge of sorted runs
                idx.insert(S["id"][part], S["ts"][part], S["seq"][part], sv[part],
                           key_values=None if skv is None else skv[part], residual=None if sres is None else sres[part])
            idx = MutablePart.from_bytes(idx.to_bytes())
        pi, si = idx.probe(pv, key_values=pkv, residual=pres)
        got = {(int(P["id"][a]), int(idx.ids[b])) if role == "r" else (int(idx.ids[b]), int(P["id"][a]))
               for a, b in zip(pi, si)}
        out.add(frozenset(got))
    assert len(out) == 1, "the two orientations disagree"
    return set(next(iter(out)))


@pytest.mark.parametrize("dtype", list(LIMITS))
@pytest.mark.parametrize("how", ["batch", "mutable"])
def test_ineq_every_operator_at_the_limits(dtype, how):
    from simjoin.core.inequality import brute_force_pairs, parse_query

    rng = np.random.default_rng(7)
    L, R = _stream(rng, 40, 0, dtype), _stream(rng, 40, 1000, dtype)
    for op1, op2 in itertools.product(INEQ, repeat=2):
        for off in _offsets(dtype):
            preds = [("a", op1, "a", off), ("b", op2, "b", 0)]
            q = parse_query(" AND ".join(_text(p) for p in preds))
            ref = _brute(preds, L, R)
            assert _ineq_join(q, L, R, how) == ref, (q.text, how)
            assert brute_force_pairs(q, L, R, 10**9) == ref, q.text


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_ineq_keys_residuals_and_bands_at_the_limits(dtype):
    from simjoin.core.inequality import parse_query

    rng = np.random.default_rng(11)
    L, R = _stream(rng, 40, 0, dtype), _stream(rng, 40, 1000, dtype)
    for preds in ([("a", "<=", "a", 0), ("b", "=", "b", 0)], [("a", ">", "a", 0), ("b", "!=", "b", 0)],
                  [("a", ">=", "a", 0), ("b", "<", "b", 0), ("a", "!=", "b", 0)]):
        q = parse_query(" AND ".join(_text(p) for p in preds))
        assert _ineq_join(q, L, R, "batch") == _brute(preds, L, R), q.text
        assert _ineq_join(q, L, R, "mutable") == _brute(preds, L, R), q.text
    # a band on small integers (its offsets never overflow)
    S = {"id": np.arange(60, dtype=np.int64), "ts": np.zeros(60, np.int64), "seq": np.arange(60),
         "a": rng.integers(-5, 5, 60).astype(dtype), "b": rng.integers(2**53 - 3, 2**53 + 3, 60)}
    for eps in (1, 2):
        q = parse_query(f"abs(l.a - r.a) < {eps} AND l.b <= r.b")
        ref = _brute([("abs", "a", "<", "a", eps), ("b", "<=", "b", 0)], S, S)
        assert _ineq_join(q, S, S, "batch") == ref and _ineq_join(q, S, S, "mutable") == ref


def test_ineq_offset_overflow_is_refused_in_one_line():
    from simjoin.core.inequality import orient, parse_query

    q = parse_query("l.a + 5 <= r.a")
    cols = {"a": np.array([1, I64_MAX - 4, I64_MAX], np.int64)}
    with pytest.raises(ExactError) as e:
        orient(q, "l").stored_values(cols)
    msg = str(e.value)
    assert "\n" not in msg and "column a" in msg and str(I64_MAX) in msg and "+ 5" in msg and "overflows" in msg
    ok = {"a": np.array([1, I64_MAX - 5], np.int64)}
    assert orient(q, "l").stored_values(ok)[:, 0].tolist() == [6, I64_MAX]
    with pytest.raises(ExactError, match="not an integer"):
        orient(parse_query("l.a + 0.5 < r.a"), "l").stored_values(ok)
    with pytest.raises(ExactError, match="overflows"):  # a band's lower half: a - eps below -2^63
        orient(parse_query("abs(l.a - r.a) < 3"), "l").stored_values({"a": np.array([I64_MIN + 1], np.int64)})


def test_floats_keep_their_float64_semantics():
    """A float column keeps ``fl(l + off) OP r``, ties and -0.0 == 0.0 included (order-preserving keys)."""
    from simjoin.core.exact import ordered
    from simjoin.core.inequality import brute_force_pairs, parse_query

    vals = np.array([-np.inf, -1e308, -1.5, -0.0, 0.0, 5e-324, 0.1, 0.2, 0.30000000000000004, 1.0, 2**53, np.inf])
    k = ordered(vals)
    assert np.all(k[1:] >= k[:-1]) and k[3] == k[4]
    rng = np.random.default_rng(3)
    n = 50
    F = {"id": np.arange(n, dtype=np.int64), "ts": np.zeros(n, np.int64), "seq": np.arange(n),
         "a": vals[rng.integers(0, len(vals), n)], "b": vals[rng.integers(0, len(vals), n)]}
    for where in ("l.a + 0.1 < r.b AND l.b >= r.a", "l.a <= r.a AND l.b = r.b", "l.a - 1 > r.a AND l.b != r.b"):
        q = parse_query(where)
        assert _ineq_join(q, F, F, "batch") == brute_force_pairs(q, F, F, 10**9)


# -------------------------------------------------------------------------------------------- S2J

def _s2j_pairs(task, L, R):
    """Every pair of ``task`` through the S2J kernel, both stored roles, vs the oracle in Python ints."""
    from simjoin.core.s2j.join import Block, probe
    from simjoin.core.s2j.operator import make_tuples

    lt = make_tuples(L["id"], L["ts"], {c: L[c] for c in ("a", "b")})
    rt = make_tuples(R["id"], R["ts"], {c: R[c] for c in ("a", "b")})
    seen = []
    for role, S, P in (("r", rt, lt), ("l", lt, rt)):
        blk = Block.from_bytes(Block(S).index(("a", "b")).to_bytes())
        res = probe(task, blk, P, role, 10**9)
        pid, sid = P.id[res.probe_idx], blk.tuples.id[res.stored_idx]
        seen.append(set(zip(pid.tolist(), sid.tolist())) if role == "r" else set(zip(sid.tolist(), pid.tolist())))
    assert seen[0] == seen[1], "the two stored roles disagree"
    return seen[0]


@pytest.mark.parametrize("dtype", list(LIMITS))
def test_s2j_every_operator_at_the_limits(dtype):
    from simjoin.core.s2j.bruteforce import brute_force
    from simjoin.core.s2j.operator import make_tuples
    from simjoin.core.s2j.task import parse_task

    rng = np.random.default_rng(5)
    L, R = _stream(rng, 40, 0, dtype), _stream(rng, 40, 1000, dtype)
    lt = make_tuples(L["id"], L["ts"], {c: L[c] for c in ("a", "b")})
    rt = make_tuples(R["id"], R["ts"], {c: R[c] for c in ("a", "b")})
    cases = []
    for op in OPS:
        for off in _offsets(dtype):
            cases.append([("a", op, "a", off)])
            cases.append([("a", op, "a", off), ("b", "<=", "b", 0)])
    for op, eps in itertools.product(INEQ, (1, 3, 2**53)):
        cases.append([("abs", "a", op, "a", eps)])
        cases.append([("b", ">", "b", 0), ("abs", "a", op, "b", eps)])  # the band as a piggybacked filter
    for preds in cases:
        task = parse_task("t: " + " AND ".join(_text(p) for p in preds))
        ref = _brute(preds, L, R)
        assert _s2j_pairs(task, L, R) == ref, str(preds)
        assert brute_force(task, lt, rt, 10**9) == ref, str(preds)


def test_s2j_selection_and_overflow_refused():
    from simjoin.core.s2j.task import parse_task

    v = np.array([I64_MIN, -1, 0, 2**53, 2**53 + 1, I64_MAX], np.int64)
    t = parse_task(f"t: l.a < r.a AND l.a > {2**53}")
    sel = t.selections[0]
    assert sel.holds(v).tolist() == [False, False, False, False, True, True]
    t = parse_task("t: l.a + 3 < r.a")
    L = {"id": np.arange(2, dtype=np.int64), "ts": np.zeros(2, np.int64), "a": np.array([0, I64_MAX - 1]),
         "b": np.zeros(2, np.int64)}
    with pytest.raises(ExactError) as e:
        _s2j_pairs(t, L, L)
    assert "\n" not in str(e.value) and "column a" in str(e.value) and "overflows" in str(e.value)


# ------------------------------------------------------------------------------ property tests

def _random_case(seed):
    """Random int64 streams (type limits, +-2^53, random) and a random conjunction with random offsets."""
    rng = np.random.default_rng(seed)
    name = list(LIMITS)[seed % len(LIMITS)]
    L, R = _stream(rng, 25, 0, name), _stream(rng, 25, 1000, name)
    for S in (L, R):  # some values anywhere in the type
        dtype, lo, hi = LIMITS[name]
        m = rng.random(25) < 0.3
        S["a"][m] = rng.integers(lo, hi, int(m.sum()), dtype=np.int64, endpoint=True).astype(dtype)
    preds = []
    for col in rng.permutation(["a", "b"])[: rng.integers(1, 3)]:
        off = int(rng.choice([0, 0, 1, -1, 7, 2**53, -(2**62)]))
        preds.append((str(col), str(rng.choice(INEQ)), str(rng.choice(["a", "b"])), off))
    return L, R, preds


def _overflows(preds, L):
    return any(not I64_MIN <= int(v) + off <= I64_MAX for a, _, _, off in preds for v in L[a])


def _property(seed):
    from simjoin.core.inequality import parse_query
    from simjoin.core.s2j.task import parse_task

    L, R, preds = _random_case(seed)
    text = " AND ".join(_text(p) for p in preds)
    if _overflows(preds, L):  # refused, never wrapped
        with pytest.raises(ExactError, match="overflows int64"):
            _ineq_join(parse_query(text), L, R, "batch")
        with pytest.raises(ExactError, match="overflows int64"):
            _s2j_pairs(parse_task("t: " + text), L, R)
        return
    ref = _brute(preds, L, R)
    assert _ineq_join(parse_query(text), L, R, "batch") == ref, text
    assert _ineq_join(parse_query(text), L, R, "mutable") == ref, text
    assert _s2j_pairs(parse_task("t: " + text), L, R) == ref, text


@pytest.mark.parametrize("seed", range(4))
def test_random_int_queries_equal_python_ints(seed):
    _property(seed)


@pytest.mark.exhaustive
@pytest.mark.parametrize("seed", range(4, 60))
def test_random_int_queries_equal_python_ints_more_seeds(seed):
    _property(seed)


def test_staged_types_per_column(tmp_path):
    """``exact_types`` (no JVM: the schemas come from the Delta logs): integers stay long, an integer
    compared with a double (also through a chain of predicates) is staged as double with the 2^53 rule,
    decimal(p,0) with p <= 18 is long, a decimal with a fraction is refused in one line naming the column."""
    import decimal

    import pyarrow as pa
    from deltalake import write_deltalake

    from simjoin.spark.exact_types import exact_types

    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({
        "id": pa.array([1], pa.int64()), "ts": pa.array([T0], pa.timestamp("us", tz="UTC")),
        "i8": pa.array([1], pa.int8()), "x": pa.array([1], pa.int64()), "f": pa.array([1.0], pa.float64()),
        "y": pa.array([1], pa.int32()), "d0": pa.array([decimal.Decimal(1)], pa.decimal128(18, 0)),
        "d2": pa.array([decimal.Decimal("1.25")], pa.decimal128(10, 2))}))
    t = exact_types(None, [path], [["i8", "x", "y", "f", "d0"]], [("i8", "d0"), ("x", "y"), ("y", "f")])
    assert t.casts == {"i8": "long", "d0": "long", "x": "double", "y": "double", "f": "double"}
    assert t.wide == [(0, "x"), (0, "y")]
    with pytest.raises(ExactError) as e:
        exact_types(None, [path], [["x", "d2"]], [("x", "d2")])
    assert "\n" not in str(e.value) and "column d2 is decimal(10,2)" in str(e.value)
