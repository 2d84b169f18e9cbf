"""The ``--where`` text of a stream inequality join: a conjunction of predicates between two roles.

Aslam et al., *SPO-Join: Efficient Stream Inequality Join* (Section 2.1): a query θ is a conjunction of
predicates ``R.x OP S.y`` with OP in {<, <=, >, >=}; their queries (Section 5) are Q1 ``R.a < S.a AND R.b > S.b``,
Q2 the band ``|a1 - a2| < ε AND |b1 - b2| < ε`` and Q3 ``dist1 > dist2 AND fare1 < fare2``. Here the two roles
are ``l`` and ``r`` (one stream in both roles for a self join).

Grammar (``AND`` case-insensitive, whitespace free)::

    where     := predicate (AND predicate)*
    predicate := term OP term | abs(colref - colref) (< | <=) number
    term      := colref [(+ | -) number]
    colref    := (l | r) . identifier
    OP        := < | <= | > | >= | = | == | !=

Each comparison has one ``l`` and one ``r`` side and is normalised to ``l.<left> + offset OP r.<right>``
(``r.a > l.a + 5`` becomes ``l.a + 5 < r.a``; ``l.a + 5 < r.a - 2`` becomes offset 7). A band
``abs(l.a - r.b) < eps`` becomes the two inequalities ``l.a - eps < r.b`` and ``l.a + eps > r.b`` (``<=`` gives
``<=``/``>=``). Limits: 1 to ``MAX_INEQUALITIES`` inequality or band predicates (a band counts as one), any number
of ``=`` (partition keys of the join) and ``!=`` (residual filters). ``id`` and ``ts`` are reserved columns.

Semantics are those of the normalised predicate evaluated exactly in the columns' own type
(``simjoin.core.exact``): on the integers for two integer columns (an integer literal offset stays a Python int;
a sum outside int64 is refused), ``fl(l.left + offset) OP r.right`` in float64 otherwise (``Predicate.holds``);
offsets on both sides are folded into one before evaluation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from simjoin.core.exact import cmp_holds

__all__ = [
    "OPS",
    "INEQUALITY_OPS",
    "MAX_INEQUALITIES",
    "RESERVED_COLUMNS",
    "QueryError",
    "Predicate",
    "Query",
    "flip_op",
    "parse_query",
    "Parser",
]

OPS: tuple[str, ...] = ("<", "<=", ">", ">=", "=", "!=")
INEQUALITY_OPS: tuple[str, ...] = ("<", "<=", ">", ">=")
# The paper evaluates up to Q2's two bands; four inequality/band predicates bound the kernel's work per candidate.
MAX_INEQUALITIES = 4
RESERVED_COLUMNS: tuple[str, ...] = ("id", "ts")

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}
_ALLOWED = (
    "allowed: l.<col> or r.<col> [+|- number] (< | <= | > | >= | = | !=) l.<col> or r.<col> [+|- number], "
    "abs(l.<col> - r.<col>) (< | <=) number, joined by AND"
)

_TOKEN = re.compile(
    r"(?P<ws>\s+)"
    r"|(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>[<>=!]+)"
    r"|(?P<punct>[().+\-])"
    r"|(?P<other>.)",
    re.DOTALL,
)


class QueryError(ValueError):
    """A ``--where`` text that does not parse or names a column that is not allowed (one-line message)."""


def flip_op(op: str) -> str:
    """The operator with its sides swapped: ``a OP b`` ⇔ ``b flip(OP) a``."""
    return _FLIP[op]


@dataclass(frozen=True)
class Predicate:
    """``l.<left> + offset  OP  r.<right>``."""

    left: str
    op: str
    right: str
    offset: float | int = 0

    def holds(self, lv: npt.ArrayLike, rv: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Vectorised (broadcasting) exact truth of the predicate for l-values ``lv`` and r-values ``rv``: on the
        integers when both are integer arrays, ``fl(lv + offset) OP rv`` otherwise."""
        return cmp_holds(self.op, lv, rv, self.offset)

    def __str__(self) -> str:
        return f"l.{self.left}{_offset_text(self.offset)} {self.op} r.{self.right}"


@dataclass(frozen=True)
class Query:
    """A parsed ``--where``: ``predicates`` after the band rewrite, each normalised to ``l`` on the left."""

    text: str
    predicates: tuple[Predicate, ...]

    @property
    def inequalities(self) -> tuple[Predicate, ...]:
        return tuple(p for p in self.predicates if p.op in INEQUALITY_OPS)

    @property
    def equalities(self) -> tuple[Predicate, ...]:
        return tuple(p for p in self.predicates if p.op == "=")

    @property
    def residuals(self) -> tuple[Predicate, ...]:
        return tuple(p for p in self.predicates if p.op == "!=")

    @property
    def left_columns(self) -> tuple[str, ...]:
        return tuple(sorted({p.left for p in self.predicates}))

    @property
    def right_columns(self) -> tuple[str, ...]:
        return tuple(sorted({p.right for p in self.predicates}))

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.left_columns) | set(self.right_columns)))

    def canonical(self) -> str:
        """Stable text of the normalised predicates (for config fingerprints); parses back to the same query."""
        return " AND ".join(str(p) for p in self.predicates)

    def __str__(self) -> str:
        return self.canonical()


def _offset_text(offset: float | int) -> str:
    if offset == 0:
        return ""
    sign = "+" if offset > 0 else "-"
    mag = abs(offset)
    if isinstance(mag, int):
        text = str(mag)
    else:
        text = str(int(mag)) if mag.is_integer() and mag < 2**53 else repr(mag)
    return f" {sign} {text}"


@dataclass(frozen=True)
class _Token:
    kind: str  # num, ident, op, punct, other, end
    text: str
    pos: int


@dataclass(frozen=True)
class _Term:
    side: str
    col: str
    offset: float | int
    pos: int


def _tokenize(text: str) -> list[_Token]:
    tokens = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup or "other"
        if kind != "ws":
            tokens.append(_Token(kind, m.group(), m.start()))
    tokens.append(_Token("end", "", len(text)))
    return tokens


class Parser:
    """The recursive-descent parser of the predicate grammar above. ``WHAT`` names the flag in
    messages; subclasses (the S2J join tasks) extend the predicate forms."""

    WHAT = "--where"
    ALLOWED = _ALLOWED

    def __init__(self, text: str, columns: Sequence[str] | None) -> None:
        self.text = text
        self.columns = None if columns is None else tuple(columns)
        self.tokens = _tokenize(text)
        self.i = 0
        self.n_inequalities = 0

    def fail(self, detail: str) -> QueryError:
        shown = self.text.replace("\n", " ").replace("\r", " ").replace("\t", " ")
        return QueryError(f"invalid {self.WHAT} '{shown}': {detail}")

    def unexpected(self, tok: _Token) -> QueryError:
        if tok.kind == "end":
            return self.fail(f"unexpected end of text at position {tok.pos}; {self.ALLOWED}")
        return self.fail(f"unexpected token '{tok.text}' at position {tok.pos}; {self.ALLOWED}")

    def peek(self) -> _Token:
        return self.tokens[self.i]

    def next(self) -> _Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def expect(self, kind: str, text: str | None = None) -> _Token:
        tok = self.next()
        if tok.kind != kind or (text is not None and tok.text != text):
            raise self.unexpected(tok)
        return tok

    def number(self) -> float | int:
        """A literal: an integer literal (digits only) is an exact Python int, anything else a float."""
        tok = self.next()
        if tok.kind != "num":
            raise self.unexpected(tok)
        if tok.text.isdigit():
            return int(tok.text)
        value = float(tok.text)
        if not math.isfinite(value):
            raise self.fail(f"number '{tok.text}' at position {tok.pos} is not finite")
        return value

    def colref(self) -> tuple[str, str, int]:
        side_tok = self.next()
        if side_tok.kind != "ident" or side_tok.text.lower() not in ("l", "r"):
            raise self.unexpected(side_tok)
        self.expect("punct", ".")
        col_tok = self.next()
        if col_tok.kind != "ident":
            raise self.unexpected(col_tok)
        side, col = side_tok.text.lower(), col_tok.text
        if col in RESERVED_COLUMNS:
            raise self.fail(
                f"column '{col}' ({side}.{col}) at position {col_tok.pos} is reserved; "
                f"{', '.join(RESERVED_COLUMNS)} cannot be used in predicates"
            )
        if self.columns is not None and col not in self.columns:
            raise self.fail(f"unknown column '{col}' ({side}.{col}); columns: {', '.join(self.columns)}")
        return side, col, side_tok.pos

    def term(self) -> _Term:
        side, col, pos = self.colref()
        offset: float | int = 0
        tok = self.peek()
        if tok.kind == "punct" and tok.text in "+-":
            self.next()
            value = self.number()
            offset = value if tok.text == "+" else -value
        return _Term(side, col, offset, pos)

    def op(self) -> tuple[str, _Token]:
        tok = self.next()
        if tok.kind != "op" or tok.text not in (*OPS, "=="):
            raise self.unexpected(tok)
        return ("=" if tok.text == "==" else tok.text), tok

    def predicate(self) -> list[Predicate]:
        start = self.peek()
        if start.kind == "ident" and start.text.lower() == "abs" and self.tokens[self.i + 1].text == "(":
            return self.band()
        a = self.term()
        op, _ = self.op()
        b = self.term()
        if a.side == b.side:
            raise self.fail(
                f"predicate at position {start.pos} "
                f"'{self.text[start.pos : self.tokens[self.i - 1].pos + len(self.tokens[self.i - 1].text)]}' "
                f"compares two columns of role {a.side}; one side must be l and the other r"
            )
        if a.side == "l":
            pred = Predicate(a.col, op, b.col, a.offset - b.offset)
        else:
            pred = Predicate(b.col, flip_op(op), a.col, b.offset - a.offset)
        if op in INEQUALITY_OPS:
            self.n_inequalities += 1
        return [pred]

    def abs_operands(self, what: str) -> tuple[_Token, str, str]:
        """``abs(colref - colref)``: its first token and the l and r columns (``|a - b| = |b - a|``
        exactly, negation being exact, so either order is the same predicate)."""
        start = self.next()
        self.expect("punct", "(")
        s1, c1, _ = self.colref()
        self.expect("punct", "-")
        s2, c2, _ = self.colref()
        self.expect("punct", ")")
        if s1 == s2:
            raise self.fail(
                f"{what} at position {start.pos} compares two columns of role {s1}; one side must be l and the other r"
            )
        left, right = (c1, c2) if s1 == "l" else (c2, c1)
        return start, left, right

    def band(self) -> list[Predicate]:
        start, left, right = self.abs_operands("band")
        op, op_tok = self.op()
        if op not in ("<", "<="):
            raise self.fail(f"band at position {start.pos} needs < or <= (got '{op_tok.text}' at {op_tok.pos})")
        eps_tok = self.peek()
        eps = self.number()
        if eps <= 0:
            raise self.fail(f"band width '{eps_tok.text}' at position {eps_tok.pos} must be a positive number")
        self.n_inequalities += 1
        upper = ">" if op == "<" else ">="
        return [Predicate(left, op, right, -eps), Predicate(left, upper, right, eps)]

    def conjunction(self, empty: str = "empty text") -> list[Predicate]:
        """``predicate (AND predicate)*`` up to the end of the text."""
        if not self.text.strip():
            raise self.fail(f"{empty}; {self.ALLOWED}")
        preds = self.predicate()
        while True:
            tok = self.next()
            if tok.kind == "end":
                return preds
            if tok.kind != "ident" or tok.text.upper() != "AND":
                raise self.unexpected(tok)
            preds.extend(self.predicate())

    def parse(self) -> Query:
        preds = self.conjunction()
        if self.n_inequalities == 0:
            raise self.fail(
                "at least one inequality (<, <=, >, >=) or band abs(l.<col> - r.<col>) < number is required"
            )
        if self.n_inequalities > MAX_INEQUALITIES:
            raise self.fail(
                f"{self.n_inequalities} inequality or band predicates; at most {MAX_INEQUALITIES} are allowed "
                "(a band counts as one)"
            )
        return Query(self.text, tuple(preds))


def parse_query(text: str, columns: Sequence[str] | None = None) -> Query:
    """Parse a ``--where`` text; ``columns`` (if given) are the attribute columns a predicate may name.

    Raises ``QueryError`` with a one-line message naming the offending token and its 0-based position.
    """
    return Parser(text, columns).parse()
