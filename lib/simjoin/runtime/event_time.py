"""The runtime's event time, once (docs/operations.md, "Lateness and the watermark"): what the
committed units say (:class:`Progress`), the event time they give (:class:`EventTime`: each
stream's mark, the allowed lateness, the watermark, the late and expiry bounds), a staged unit
(:class:`Unit`) and the micro-batch being staged (:class:`BatchInfo`). Pure Python: the engine
(``simjoin.spark.engine``) computes the marks at publish; every stage and rule reads them here.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

UTC = dt.UTC



class CheckpointMismatch(ValueError):
    """The checkpoint does not belong to the output's state (deleted, foreign or stale)."""


class Stopping(Exception):
    """Follow mode is stopping: a micro-batch that starts now is left for the next start."""


class StaleUnit(RuntimeError):
    """A work table holds another unit than the open one: the previous stage must run again."""


@dataclass(frozen=True)
class Progress:
    """What the committed units say: the last one, the watermark, the state's identity."""

    last_unit: int
    watermark: dt.datetime | None
    max_ts: dict[int, dt.datetime]
    checkpoint_id: str | None
    fingerprint: str | None
    meta: dict[str, Any]
    #: the pipeline's ``--allowed-lateness`` in seconds (docs/operations.md, "Lateness")
    lateness_s: float = 0.0

    @property
    def lateness(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.lateness_s)

    def time(self) -> EventTime:
        """The event time these committed units give (:class:`EventTime`): what every rule reads."""
        return EventTime(dict(self.max_ts), self.lateness_s, self.watermark)

    def late_marks(self) -> dict[int, dt.datetime]:
        return self.time().late_marks()

    @property
    def closed_watermark(self) -> dt.datetime | None:
        return self.time().closed_watermark


@dataclass(frozen=True)
class EventTime:
    """The runtime's event time at a unit, the one place every rule reads it from
    (docs/operations.md, "Lateness and the watermark"): each stream's committed mark (the largest
    ``ts`` it committed among rows dated at or before their unit's publish time; the engine's
    ``Publisher._marks``), the allowed lateness L, and what follows from them:

    - a row of stream ``s`` dated before ``late_marks()[s]`` = mark(s) - L is late;
    - the watermark (the smallest mark, once every stream has one) less L closes windows
      (:attr:`closed_watermark`);
    - a stored tuple of stream ``s`` dated at or before :meth:`expiry_bound_us` = mark(partner) -
      W - L can meet no future tuple (the partner: ``s`` itself in a self-join, else the other
      stream), in every pipeline the same way.

    Operators get it from their open unit (``OpenUnit.time``) or a staged batch
    (``BatchInfo.progress.time()``); none computes a mark or reads the lateness itself."""

    #: per stream, its committed mark (naive UTC)
    marks: dict[int, dt.datetime]
    lateness_s: float = 0.0
    #: the smallest mark once every stream has one (None before)
    watermark: dt.datetime | None = None

    @property
    def lateness(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.lateness_s)

    @property
    def lateness_us(self) -> int:
        return round(self.lateness_s * 1e6)

    @property
    def marks_us(self) -> dict[int, int]:
        """The marks as epoch microseconds."""
        return {s: epoch_us(m) for s, m in self.marks.items()}

    def late_marks(self) -> dict[int, dt.datetime]:
        """Per side, the earliest ts still on time: a row of side ``s`` dated before
        ``late_marks()[s]`` (its stream's committed mark minus the allowed lateness) is late."""
        return {s: m - self.lateness for s, m in self.marks.items()}

    @property
    def closed_watermark(self) -> dt.datetime | None:
        """The watermark less the allowed lateness: a window that ended at or before it can get
        no more rows (S3J closes and expires windows by it)."""
        return None if self.watermark is None else self.watermark - self.lateness

    def expiry_bound_us(self, side: int, window_us: int, self_join: bool) -> int | None:
        """The newest ``ts`` (epoch microseconds) a stored tuple of ``side`` may have and meet no
        future tuple within a time window of ``window_us``: every tuple still to come of its
        partner stream is dated at or after that stream's mark less L (earlier rows are
        quarantined as late). None: the partner has no mark yet (every tuple is live)."""
        mark = self.marks_us.get(side if self_join else 1 - side)
        return None if mark is None else mark - int(window_us) - self.lateness_us

    def expiry_bounds_us(self, window_us: int, self_join: bool, sides: Any = (0, 1)) -> dict[int, int]:
        """:meth:`expiry_bound_us` of each side that has one."""
        got = {s: self.expiry_bound_us(s, window_us, self_join) for s in sides}
        return {s: b for s, b in got.items() if b is not None}

    def projected(self, on_time_us: dict[int, int | None]) -> EventTime:
        """The event time once a unit whose rows of stream ``s`` dated at or before its publish
        time reach ``on_time_us[s]`` (``on_time_max``; None: none) is published: what a stage
        that drops state at publish sees before the publish commits it."""
        epoch = dt.datetime(1970, 1, 1)
        marks = dict(self.marks)
        for s, top in on_time_us.items():
            if top is not None:
                m = epoch + dt.timedelta(microseconds=int(top))
                marks[s] = max(marks[s], m) if s in marks else m
        return EventTime(marks, self.lateness_s, min(marks.values()) if self.watermark is not None else None)


def on_time_max(ts_us: Any, due_us: int) -> int | None:
    """The largest of the epoch-microsecond ``ts_us`` at or before ``due_us`` (a unit's publish
    time), None when there is none: what a unit's rows of one stream move its mark to (rows dated
    later are joined but never move a mark; docs/operations.md, "Lateness")."""
    import numpy as np

    ts = np.asarray(ts_us)
    ts = ts[ts <= due_us]
    return int(ts.max()) if len(ts) else None


@dataclass(frozen=True)
class Unit:
    unit: int
    #: the staged rows: a DataFrame, or a pyarrow Table (``open_unit_table``)
    records: Any
    checkpoint_id: str
    #: the metadata ingest staged with the unit's first rows (JSON), read by the same job
    meta: str | None = None


@dataclass(frozen=True)
class BatchInfo:
    """The micro-batch being staged: its unit, its id, the committed progress and the state's identity."""

    unit: int
    batch_id: int
    progress: Progress
    checkpoint_id: str


def aware(t: dt.datetime) -> dt.datetime:
    """A timestamp Spark returned (naive, in the session's UTC) as an aware one."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def epoch_us(t: dt.datetime) -> int:
    d = aware(t) - dt.datetime(1970, 1, 1, tzinfo=UTC)
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds
