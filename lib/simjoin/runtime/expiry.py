"""State expiry, declared (docs/architecture.md, "The runtime calls the operator").

A stream pipeline's run names each state table with the rule by which its rows can meet no
future tuple (``StreamRun.expiry()``: table path -> rule); the runtime applies every rule once a
unit's publish has committed (``OpenUnit.publish``), with the event time that publish committed
(``simjoin.runtime.event_time.EventTime``). No stage deletes state itself and no rule holds SQL:
a rule gives a row condition (any of the conjunctions of ``(column, op, value)``,
``simjoin.io.tables.predicate``) and the runtime writes and runs the DELETE.

The rules:

- :class:`ByMark`: rows of stream ``s`` at or before the event time's expiry bound of ``s`` (the
  partner stream's mark less W + L; a row further behind is quarantined as late);
- :class:`ByAge`: rows at least W older than the newest mark (summaries of windows gone by);
- :class:`ByUnit`: rows of units before the published one (readers take the newest unit's);
- :class:`ByWindowClose`: rows of windows that ended at or before the watermark less L.

A pipeline whose state needs more (ineq's PO-Join batches: a batch goes whole, by its maxima,
with the mutable parts it superseded) declares its own :class:`Rule`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Rule", "ByMark", "ByAge", "ByUnit", "ByWindowClose", "apply"]

#: any of these conjunctions of (column, op, value)
Condition = list[list[tuple[str, str, Any]]]


class Rule(Protocol):
    """An expiry rule: ``apply(u, path, published)`` drops what expired of the table at ``path``
    once unit ``u`` is published (``published``: the publish's result) through ``u.expire``,
    ``u.expire_ids`` or ``u.expire_closed_windows``, and returns what it dropped (for the
    stage's result) or None."""

    def apply(self, u: Any, path: str, published: dict[str, Any]) -> Any: ...


@dataclass(frozen=True)
class _Periodic:
    #: checked after every this many units (a DELETE costs a second or two; what lingers is never
    #: read: readers apply the same bound)
    every: int = 1

    def due(self, unit: int) -> bool:
        return unit % self.every == self.every - 1

    def condition(self, u: Any) -> Condition:
        raise NotImplementedError

    def apply(self, u: Any, path: str, published: dict[str, Any]) -> Any:
        if not self.due(int(u.id)):
            return None
        cond = self.condition(u)
        if cond:
            u.expire(path, cond)
        return None


@dataclass(frozen=True)
class ByMark(_Periodic):
    """Rows of stream ``s`` (column ``side``) whose ``column`` is at or before the event time's
    expiry bound of ``s`` for a time window of ``window_us`` (``EventTime.expiry_bound_us``);
    ``instant``: the column is a timestamp, else epoch microseconds."""

    window_us: int = 0
    self_join: bool = False
    column: str = "ts_max"
    sides: tuple[int, ...] = (0, 1)
    instant: bool = False

    def condition(self, u: Any) -> Condition:
        bounds = u.time.expiry_bounds_us(self.window_us, self.self_join, self.sides)
        return [[("side", "=", s), (self.column, "<=", _instant(b) if self.instant else b)]
                for s, b in bounds.items()]


@dataclass(frozen=True)
class ByAge(_Periodic):
    """Rows whose ``column`` (epoch microseconds) is ``window_us`` or more before the newest mark."""

    window_us: int = 0
    column: str = "ts_max"

    def condition(self, u: Any) -> Condition:
        marks = u.time.marks_us
        return [[(self.column, "<=", max(marks.values()) - self.window_us)]] if marks else []


@dataclass(frozen=True)
class ByUnit(_Periodic):
    """Rows of units before the published one: only the newest unit's rows are ever read."""

    def condition(self, u: Any) -> Condition:
        return [[("unit", "<", int(u.id))]]


@dataclass(frozen=True)
class ByWindowClose:
    """Rows of the windows (``size_s``, ``slide_s``: epoch-aligned) that ended at or before the
    watermark less the allowed lateness (``EventTime.closed_watermark``); the DELETE runs only
    when a window closed since the previous unit."""

    size_s: float
    slide_s: float

    def apply(self, u: Any, path: str, published: dict[str, Any]) -> Any:
        u.expire_closed_windows(path, published, (self.size_s, self.slide_s))
        return None


def apply(u: Any, rules: dict[str, Rule], published: dict[str, Any]) -> dict[str, Any]:
    """Every declared rule on its table, in order, after ``u``'s publish; what each dropped."""
    out = {}
    for path, rule in rules.items():
        got = rule.apply(u, path, published)
        if got is not None:
            out[path] = got
    return out


def _instant(us: int) -> dt.datetime:
    """Epoch microseconds as an aware UTC datetime."""
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=int(us))
