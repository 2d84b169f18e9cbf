"""The declared expiry rules (``simjoin.runtime.expiry``): each gives the row condition of what no
future tuple can meet, from the runtime's event time, and only when due; the runtime applies every
rule a run declares after its publish (``OpenUnit.publish``)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from simjoin.runtime.event_time import EventTime
from simjoin.runtime.expiry import ByAge, ByMark, ByUnit, ByWindowClose, apply

T0 = dt.datetime(2026, 1, 1)
US0 = int((T0 - dt.datetime(1970, 1, 1)) / dt.timedelta(microseconds=1))


@dataclass
class Unit:
    """The published unit as a rule sees it: its id, the event time, and what it asked to drop."""

    id: int
    time: EventTime
    dropped: list[Any] = field(default_factory=list)

    def expire(self, path: str, cond: Any) -> None:
        self.dropped.append(("rows", path, cond))

    def expire_closed_windows(self, path: str, published: dict[str, Any], windows: Any) -> None:
        self.dropped.append(("windows", path, windows, published["watermark_ts"]))


def _time(lateness_s: float = 2.0) -> EventTime:
    marks = {0: T0 + dt.timedelta(seconds=100), 1: T0 + dt.timedelta(seconds=40)}
    return EventTime(marks, lateness_s, min(marks.values()))


def test_by_mark_is_the_partner_s_mark_less_window_and_lateness_per_side():
    u = Unit(7, _time())
    ByMark(window_us=10_000_000, column="ts_max").apply(u, "/w/blocks", {})
    (kind, path, cond), = u.dropped
    # side 0 meets side 1's future tuples: mark(1) - W - L = 40 - 10 - 2 = 28 s; side 1: 100 - 12 = 88 s
    assert cond == [[("side", "=", 0), ("ts_max", "<=", US0 + 28_000_000)],
                    [("side", "=", 1), ("ts_max", "<=", US0 + 88_000_000)]]
    u = Unit(7, _time())
    ByMark(window_us=10_000_000, self_join=True, sides=(0,), column="ts", instant=True).apply(u, "/w/t", {})
    assert u.dropped[0][2] == [[("side", "=", 0), ("ts", "<=", (T0 + dt.timedelta(seconds=88)).replace(tzinfo=dt.UTC))]]


def test_a_side_without_a_partner_mark_keeps_everything():
    u = Unit(3, EventTime({0: T0}, 0.0, None))
    ByMark(window_us=1).apply(u, "/w/b", {})
    assert u.dropped == [("rows", "/w/b", [[("side", "=", 1), ("ts_max", "<=", US0 - 1)]])]
    u = Unit(3, EventTime({}, 0.0, None))
    ByMark(window_us=1).apply(u, "/w/b", {})
    ByAge(window_us=1).apply(u, "/w/s", {})
    assert u.dropped == []  # no mark yet: nothing can be expired


def test_periodic_rules_run_every_n_units_only():
    ran = []
    for unit in range(9):
        u = Unit(unit, _time())
        ByUnit(every=4).apply(u, "/w/sketch", {})
        if u.dropped:
            ran.append(unit)
            assert u.dropped == [("rows", "/w/sketch", [[("unit", "<", unit)]])]
    assert ran == [3, 7]


def test_by_age_and_window_close_and_apply_in_declared_order():
    u = Unit(5, _time())
    got = apply(u, {"/w/a": ByAge(window_us=30_000_000), "/w/j": ByWindowClose(10.0, 5.0)},
                {"watermark_ts": T0})
    assert got == {}
    assert u.dropped == [("rows", "/w/a", [[("ts_max", "<=", US0 + 70_000_000)]]),
                         ("windows", "/w/j", (10.0, 5.0), T0)]
