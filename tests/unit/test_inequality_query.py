"""``--where`` parsing of the stream inequality join (simjoin.core.inequality.query) and its orientation."""

from __future__ import annotations

import numpy as np
import pytest

from simjoin.core.inequality import (
    MAX_INEQUALITIES,
    Predicate,
    QueryError,
    flip_op,
    orient,
    parse_query,
)


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "=", "!="])
def test_every_operator(op: str) -> None:
    q = parse_query(f"l.a {op} r.b AND l.c < r.c")
    assert q.predicates[0] == Predicate("a", op, "b", 0.0)


def test_double_equals_is_equals() -> None:
    q = parse_query("l.k == r.k and l.a < r.a")
    assert q.equalities == (Predicate("k", "=", "k"),)
    assert q.inequalities == (Predicate("a", "<", "a"),)


def test_offsets_on_either_side() -> None:
    assert parse_query("l.a + 5 < r.a").predicates == (Predicate("a", "<", "a", 5.0),)
    assert parse_query("l.a < r.a - 2").predicates == (Predicate("a", "<", "a", 2.0),)
    assert parse_query("l.a + 5 < r.a - 2").predicates == (Predicate("a", "<", "a", 7.0),)
    assert parse_query("l.a - 1.5e1 >= r.b + .5").predicates == (Predicate("a", ">=", "b", -15.5),)


@pytest.mark.parametrize(
    ("text", "pred"),
    [
        ("r.a > l.a + 5", Predicate("a", "<", "a", 5.0)),
        ("r.b <= l.a", Predicate("a", ">=", "b", 0.0)),
        ("r.b + 1 >= l.a - 2", Predicate("a", "<=", "b", -3.0)),
        ("r.b < l.a", Predicate("a", ">", "b", 0.0)),
        ("r.b = l.a + 1", Predicate("a", "=", "b", 1.0)),
        ("r.b != l.a", Predicate("a", "!=", "b", 0.0)),
    ],
)
def test_normalisation_when_r_is_first(text: str, pred: Predicate) -> None:
    q = parse_query(text if pred.op in ("<", "<=", ">", ">=") else f"{text} AND l.z < r.z")
    assert q.predicates[0] == pred


@pytest.mark.parametrize("text", ["abs(l.a - r.b) < 2", "abs(r.b - l.a) < 2", "ABS( l.a-r.b )<2.0"])
def test_band_both_orders(text: str) -> None:
    q = parse_query(text)
    assert q.predicates == (Predicate("a", "<", "b", -2.0), Predicate("a", ">", "b", 2.0))


def test_band_inclusive() -> None:
    q = parse_query("abs(l.a - r.a) <= 0.5 AND abs(l.b - r.b) < 1")
    assert q.inequalities[:2] == (Predicate("a", "<=", "a", -0.5), Predicate("a", ">=", "a", 0.5))
    assert len(q.inequalities) == 4


def test_band_semantics_match_abs() -> None:
    q = parse_query("abs(l.a - r.b) < 1.5")
    rng = np.random.default_rng(0)
    lv = rng.integers(0, 6, 50).astype(float)
    rv = rng.integers(0, 6, 40).astype(float)
    got = np.ones((50, 40), dtype=bool)
    for p in q.predicates:
        got &= p.holds(lv[:, None], rv[None, :])
    assert np.array_equal(got, np.abs(lv[:, None] - rv[None, :]) < 1.5)


def test_properties_and_canonical() -> None:
    q = parse_query("l.a < r.x AND l.k = r.k AND l.d != r.e AND r.y >= l.b + 0.25")
    assert q.left_columns == ("a", "b", "d", "k")
    assert q.right_columns == ("e", "k", "x", "y")
    assert q.columns == ("a", "b", "d", "e", "k", "x", "y")
    assert [p.op for p in q.inequalities] == ["<", "<="]
    assert len(q.residuals) == 1
    assert q.canonical() == "l.a < r.x AND l.k = r.k AND l.d != r.e AND l.b + 0.25 <= r.y"
    assert str(q) == q.canonical()
    assert parse_query(q.canonical()).predicates == q.predicates
    q2 = parse_query("abs(l.a - r.a) < 1e-05")
    assert parse_query(q2.canonical()).predicates == q2.predicates


def test_holds_every_operator() -> None:
    lv = np.array([1.0, 2.0, 3.0])
    for op, expect in [("<", [1, 0, 0]), ("<=", [1, 1, 0]), (">", [0, 0, 1]), (">=", [0, 1, 1])]:
        assert Predicate("a", op, "b").holds(lv, 2.0).tolist() == [bool(x) for x in expect]
    assert Predicate("a", "=", "b", 1.0).holds(lv, 3.0).tolist() == [False, True, False]
    assert Predicate("a", "!=", "b").holds(lv, 3.0).tolist() == [True, True, False]


def test_flip() -> None:
    assert [flip_op(o) for o in ("<", "<=", ">", ">=", "=", "!=")] == [">", ">=", "<", "<=", "=", "!="]


def _err(text: str, columns: list[str] | None = None) -> str:
    with pytest.raises(QueryError) as e:
        parse_query(text, columns)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("invalid --where '")
    return msg


def test_error_names_token_and_position() -> None:
    msg = _err("l.a < r.a AND l.b >> r.b")
    assert "unexpected token '>>' at position 18" in msg
    assert "allowed:" in msg


@pytest.mark.parametrize(
    ("text", "token", "pos"),
    [
        ("l.a < r.a OR l.b < r.b", "OR", 10),
        ("l.a <> r.a", "<>", 4),
        ("x.a < r.a", "x", 0),
        ("l.a < r.a +", "", 11),
        ("l.a < 5", "5", 6),
        ("l.a < r.a; drop", ";", 9),
        ("l.a < r.a AND", "", 13),
        ("abs(l.a + r.a) < 1", "+", 8),
        ("l.a < r.nan + nan", "nan", 14),
    ],
)
def test_syntax_errors(text: str, token: str, pos: int) -> None:
    msg = _err(text)
    if token:
        assert f"unexpected token '{token}' at position {pos}" in msg
    else:
        assert f"unexpected end of text at position {pos}" in msg


def test_non_finite_number() -> None:
    assert "not finite" in _err("l.a + 1e999 < r.a")


def test_unknown_column_lists_columns() -> None:
    msg = _err("l.a < r.x", ["a", "b", "c"])
    assert "unknown column 'x' (r.x); columns: a, b, c" in msg
    assert parse_query("l.a < r.b", ["a", "b", "c"]).predicates == (Predicate("a", "<", "b"),)


def test_same_role_is_an_error() -> None:
    msg = _err("l.a < l.b")
    assert "'l.a < l.b'" in msg and "role l" in msg
    assert "role r" in _err("abs(r.a - r.b) < 1")


def test_empty_text() -> None:
    assert "empty" in _err("")
    assert "empty" in _err("   ")


def test_too_many_inequalities() -> None:
    text = " AND ".join(f"l.c{i} < r.c{i}" for i in range(MAX_INEQUALITIES + 1))
    msg = _err(text)
    assert "5 inequality or band predicates; at most 4" in msg
    ok = " AND ".join(f"abs(l.c{i} - r.c{i}) < 1" for i in range(MAX_INEQUALITIES))
    q = parse_query(ok + " AND l.k = r.k AND l.j = r.j AND l.x != r.x")
    assert len(q.inequalities) == 2 * MAX_INEQUALITIES


def test_needs_an_inequality() -> None:
    assert "at least one inequality" in _err("l.k = r.k AND l.a != r.a")


@pytest.mark.parametrize("col", ["id", "ts"])
def test_reserved_columns(col: str) -> None:
    msg = _err(f"l.a < r.a AND l.{col} < r.b")
    assert f"column '{col}' (l.{col})" in msg and "reserved" in msg


def test_band_errors() -> None:
    assert "positive" in _err("abs(l.a - r.a) < 0")
    assert "needs < or <=" in _err("abs(l.a - r.a) > 1")


def test_orient_keeps_offset_on_l() -> None:
    q = parse_query("l.a + 1 < r.b AND r.c >= l.d AND l.k = r.k + 2 AND l.x != r.y")
    o_r = orient(q, "r")
    assert o_r.ops == (">", ">=")
    assert o_r.stored_cols == ("b", "c") and o_r.probe_cols == ("a", "d")
    assert o_r.probe.offsets == (1.0, 0.0) and o_r.stored.offsets == (0.0, 0.0)
    o_l = orient(q, "l")
    assert o_l.ops == ("<", "<=")
    assert o_l.stored_cols == ("a", "d") and o_l.stored.offsets == (1.0, 0.0)
    assert o_l.key_stored.cols == ("k",) and o_l.key_stored.offsets == (-2.0,)
    cols = {c: np.arange(3.0) for c in "abcdkxy"}
    assert o_l.stored_values(cols).shape == (3, 2)
    assert o_l.stored_residual(cols) is not None and o_l.stored_residual(cols).shape == (3, 1)
    with pytest.raises(ValueError, match="stored_role"):
        orient(q, "x")
