"""Join tasks of the S2J operator (Wang et al., *S2J: A General Operator for Stream Join in the
Cloud*, Sections 3.1 and 4): a named theta predicate over one stream pair.

A task is written ``NAME: PREDICATE``, several tasks in one text separated by ``;``::

    gap: abs(l.pm25 - r.pm25) > 30
    eq:  l.station = r.station AND l.pm10 < r.pm10
    hot: l.pm25 > 100 AND abs(l.pm10 - r.pm10) <= 5

Grammar (the inequality join's, ``simjoin.core.inequality.query``, extended)::

    predicate := term OP term                  one column of l against one of r: equality (hash
                                               index), inequality (sorted index), != (filter only)
               | abs(colref - colref) OP number   a band (< <=) or a gap (> >=); sorted index
               | term OP number                selection on one role: pre-selection (input adapter)

Every predicate is evaluated literally, as a user reads it, in the columns' own type
(``simjoin.core.exact``): on the integers for integer columns (``l.a + c OP r.b`` and
``|l.a - r.b| OP eps`` exactly; an offset whose sum leaves int64 is refused), in float64 otherwise
(``fl(l.a + c) OP r.b`` and ``|fl(l.a - r.b)| OP eps``), so a brute force written the same way agrees
pair for pair. The
index only narrows the candidates to exactly the tuples the main predicate accepts (binary
searches that evaluate the same literal expression); the auxiliary predicates are piggybacked as
filters on those candidates (Section 4, "multi-attribute join").

**Main predicate.** With domain statistics (column -> skew, e.g. the largest key's share of
tuples) the indexable predicate whose columns are least skewed leads; without them an equality
leads (hash lookup), then a band, an inequality, a gap. A task with only ``!=`` predicates scans.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from simjoin.core.exact import absdiff_holds, cmp_holds, int_offset, is_int
from simjoin.core.inequality.query import INEQUALITY_OPS, Parser, QueryError, flip_op

__all__ = ["Theta", "Selection", "JoinTask", "TaskError", "parse_task", "parse_tasks", "holds", "INDEX_KINDS"]

INDEX_KINDS = ("hash", "sorted", "scan")
TASK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
MAX_PREDICATES = 8
_ALLOWED = ("allowed: NAME: l.<col> [+|- number] (< | <= | > | >= | = | !=) r.<col> [+|- number], "
            "abs(l.<col> - r.<col>) (< | <= | > | >=) number, l.<col> OP number, joined by AND")


class TaskError(QueryError):
    """A join task that does not parse (one-line message naming the token and its position)."""


def holds(op: str, a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """``a OP b``, vectorised, exactly in the arrays' own types (``simjoin.core.exact``)."""
    return cmp_holds(op, a, b)


@dataclass(frozen=True)
class Theta:
    """One join predicate between roles: ``kind`` ``cmp`` is ``fl(l.left + value) OP r.right``,
    ``abs`` is ``|fl(l.left - r.right)| OP value``."""

    kind: str
    left: str
    op: str
    right: str
    value: float | int = 0

    @property
    def index(self) -> str:
        """The index this predicate can lead with: hash (=), sorted (inequality, band, gap), scan (!=)."""
        if self.kind == "cmp":
            return "hash" if self.op == "=" else "scan" if self.op == "!=" else "sorted"
        return "sorted"

    @property
    def family(self) -> str:
        if self.kind == "abs":
            return "band" if self.op in ("<", "<=") else "gap"
        return {"=": "equality", "!=": "filter"}.get(self.op, "inequality")

    def holds(self, lv: npt.ArrayLike, rv: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """The literal truth for l-values ``lv`` and r-values ``rv`` (broadcasting): on the integers for two
        integer columns, in float64 otherwise (``simjoin.core.exact``)."""
        if self.kind == "cmp":
            return cmp_holds(self.op, lv, rv, self.value)
        return absdiff_holds(self.op, lv, rv, self.value)

    def __str__(self) -> str:
        if self.kind == "abs":
            return f"abs(l.{self.left} - r.{self.right}) {self.op} {_num(self.value)}"
        off = "" if self.value == 0 else f" {'+' if self.value > 0 else '-'} {_num(abs(self.value))}"
        return f"l.{self.left}{off} {self.op} r.{self.right}"


@dataclass(frozen=True)
class Selection:
    """A one-role predicate ``fl(role.column + offset) OP value``: applied before the join (the
    input adapter's pre-selection)."""

    role: str
    column: str
    op: str
    value: float | int
    offset: float | int = 0

    def holds(self, v: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """``v + offset OP value``: on the integers for an integer column (a fractional ``value`` compares with
        its floor or ceiling, exactly), ``fl(v + offset) OP value`` otherwise."""
        a = np.asarray(v)
        if is_int(a):
            val = self.value
            if not float(val).is_integer():  # an integer is never equal to a fraction
                if self.op in ("=", "!="):
                    return np.full(a.shape, self.op == "!=")
                f = float(val)
                op, val = ("<=", math.floor(f)) if self.op in ("<", "<=") else (">=", math.ceil(f))
                return cmp_holds(op, a, np.asarray(int(val)), int_offset(self.offset, f"column {self.column}"))
            return cmp_holds(self.op, a, np.asarray(int(val)), self.offset)
        return cmp_holds(self.op, a, np.asarray(self.value, dtype=np.float64), self.offset)

    def __str__(self) -> str:
        off = "" if self.offset == 0 else f" {'+' if self.offset > 0 else '-'} {_num(abs(self.offset))}"
        return f"{self.role}.{self.column}{off} {self.op} {_num(self.value)}"


def _num(x: float | int) -> str:
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    return str(int(x)) if float(x).is_integer() and abs(x) < 2**53 else repr(float(x))


@dataclass(frozen=True)
class JoinTask:
    """A named join task: its join predicates (``main`` leads through an index, the rest are
    filters) and its one-role selections."""

    name: str
    thetas: tuple[Theta, ...]
    selections: tuple[Selection, ...] = ()
    main: int | None = None

    @property
    def main_theta(self) -> Theta | None:
        return None if self.main is None else self.thetas[self.main]

    @property
    def aux(self) -> tuple[Theta, ...]:
        return tuple(t for i, t in enumerate(self.thetas) if i != self.main)

    @property
    def index(self) -> str:
        m = self.main_theta
        return "scan" if m is None else m.index

    @property
    def kind(self) -> str:
        """equality, inequality, band, gap (one join predicate), multi-attribute, or filter."""
        if len(self.thetas) == 1:
            return self.thetas[0].family
        return "multi-attribute"

    def columns(self, role: str) -> tuple[str, ...]:
        """The columns of role ``l`` or ``r`` this task reads (pre-projection)."""
        cols = {t.left if role == "l" else t.right for t in self.thetas}
        cols |= {s.column for s in self.selections if s.role == role}
        return tuple(sorted(cols))

    def select(self, role: str, columns: Mapping[str, npt.ArrayLike], n: int) -> npt.NDArray[np.bool_]:
        """Which of ``n`` tuples pass this task's selections in ``role``."""
        keep = np.ones(n, dtype=bool)
        for s in self.selections:
            if s.role == role:
                keep &= s.holds(columns[s.column])
        return keep

    def holds(self, lcols: Mapping[str, npt.ArrayLike], rcols: Mapping[str, npt.ArrayLike]) -> npt.NDArray[np.bool_]:
        """Every predicate of the task, broadcasting l-values against r-values (brute force)."""
        out: npt.NDArray[np.bool_] | None = None
        for t in self.thetas:
            h = t.holds(lcols[t.left], rcols[t.right])
            out = h if out is None else out & h
        for s in self.selections:
            h = s.holds(lcols[s.column] if s.role == "l" else rcols[s.column])
            out = h if out is None else out & h
        assert out is not None
        return out

    @property
    def predicate(self) -> str:
        """The canonical predicate text (parses back to the same task)."""
        return " AND ".join([*map(str, self.thetas), *map(str, self.selections)])

    def __str__(self) -> str:
        return f"{self.name}: {self.predicate}"


class _TaskParser(Parser):
    WHAT = "--task"
    ALLOWED = _ALLOWED

    def __init__(self, name: str, text: str, columns: Sequence[str] | None) -> None:
        super().__init__(text, columns)
        self.name = name
        self.thetas: list[Theta] = []
        self.selections: list[Selection] = []

    def fail(self, detail: str) -> TaskError:
        shown = self.text.replace("\n", " ").replace("\r", " ").replace("\t", " ")
        return TaskError(f"invalid --task '{self.name}: {shown}': {detail} (positions count in the predicate)")

    def predicate(self) -> list:  # type: ignore[type-arg]
        start = self.peek()
        if start.kind == "ident" and start.text.lower() == "abs" and self.tokens[self.i + 1].text == "(":
            self.abs_predicate()
            return []
        a = self.term()
        op, _ = self.op()
        if self.peek().kind == "num":
            self.selections.append(Selection(a.side, a.col, op, self.number(), a.offset))
            return []
        b = self.term()
        if a.side == b.side:
            end = self.tokens[self.i - 1]
            raise self.fail(f"predicate at position {start.pos} '{self.text[start.pos:end.pos + len(end.text)]}' "
                            f"compares two columns of role {a.side}; one side must be l and the other r")
        if a.side == "l":
            self.thetas.append(Theta("cmp", a.col, op, b.col, a.offset - b.offset))
        else:
            self.thetas.append(Theta("cmp", b.col, flip_op(op), a.col, b.offset - a.offset))
        return []

    def abs_predicate(self) -> None:
        start, left, right = self.abs_operands("abs")
        op, op_tok = self.op()
        if op not in INEQUALITY_OPS:
            raise self.fail(f"abs at position {start.pos} needs <, <=, > or >= (got '{op_tok.text}' at "
                            f"{op_tok.pos})")
        self.thetas.append(Theta("abs", left, op, right, self.number()))

    def parse_task(self) -> tuple[tuple[Theta, ...], tuple[Selection, ...]]:
        self.conjunction("empty predicate")  # predicate() collects into thetas and selections
        if not self.thetas:
            raise self.fail("at least one predicate between l and r (l.<col> OP r.<col> or abs(...)) is required")
        if len(self.thetas) + len(self.selections) > MAX_PREDICATES:
            raise self.fail(f"{len(self.thetas) + len(self.selections)} predicates; at most {MAX_PREDICATES}")
        return tuple(self.thetas), tuple(self.selections)


_PRIORITY = {"equality": 0, "band": 1, "inequality": 2, "gap": 3}


def choose_main(thetas: Sequence[Theta], domain: Mapping[str, float] | None = None) -> int | None:
    """The predicate that leads through an index (Section 4): with domain statistics, the
    indexable one whose columns are least skewed; otherwise an equality, a band, an inequality,
    a gap, in that order (first written wins ties). None when only ``!=`` filters remain."""
    best: tuple[float, int, int] | None = None
    for i, t in enumerate(thetas):
        if t.index == "scan":
            continue
        skew = 0.0
        if domain:
            skew = float(domain.get(t.left, 1.0)) + float(domain.get(t.right, 1.0))
        key = (skew, _PRIORITY[t.family], i)
        if best is None or key < best:
            best = key
    return None if best is None else best[2]


def parse_task(text: str, columns: Sequence[str] | None = None,
               domain: Mapping[str, float] | None = None) -> JoinTask:
    """Parse ``NAME: PREDICATE``. ``columns``: the columns a predicate may name (the inputs')."""
    name, sep, body = text.partition(":")
    name = name.strip()
    if not sep or not TASK_NAME.fullmatch(name):
        shown = text.strip().replace("\n", " ")
        raise TaskError(f"invalid --task '{shown}': allowed 'NAME: PREDICATE' with NAME of letters, digits and _ "
                        f"(starting with a letter, at most 64), e.g. 'gap: abs(l.pm25 - r.pm25) > 30'")
    thetas, sels = _TaskParser(name, body.strip(), columns).parse_task()
    return JoinTask(name, thetas, sels, choose_main(thetas, domain))


def parse_tasks(texts: str | Sequence[str], columns: Sequence[str] | None = None,
                domain: Mapping[str, float] | None = None) -> tuple[JoinTask, ...]:
    """Tasks from ``;``-separated text or a list of ``NAME: PREDICATE`` strings; names are unique."""
    items = [texts] if isinstance(texts, str) else list(texts)
    parts = [p.strip() for item in items for p in str(item).split(";") if p.strip()]
    if not parts:
        raise TaskError("invalid --task '': allowed at least one 'NAME: PREDICATE'")
    tasks = tuple(parse_task(p, columns, domain) for p in parts)
    names = [t.name for t in tasks]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise TaskError(f"invalid --task: task name {dup[0]!r} is used twice; allowed unique names")
    return tasks
