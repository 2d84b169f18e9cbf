"""The micro-batch engine's units, progress and the small value helpers every part shares."""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from simjoin.log import get_logger
from simjoin.quality.rows import spark_ts_string
from simjoin.runtime.tables import StreamTables

log = get_logger("simjoin.engine")
UTC = dt.UTC
IDENTITY_FILE = "simjoin.json"
PROGRESS_SCHEMA = "unit long, side byte, max_ts timestamp, fingerprint string, checkpoint_id string, meta string"
QUARANTINE_SCHEMA = ("side byte, id long, ts timestamp, ts_raw string, row string, reason string, stage string, "
                     "unit long, batch string")


class CheckpointMismatch(ValueError):
    """The checkpoint does not belong to the output's state (deleted, foreign or stale)."""


class Stopping(Exception):
    """Follow mode is stopping: a micro-batch that starts now is left for the next start."""


class StaleUnit(RuntimeError):
    """A work table holds another unit than the open one: the previous stage must run again."""


#: Committed units' staged records are deleted every this many units.
RECORDS_HOUSEKEEPING_EVERY = 4


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
        from simjoin.quality.rows import epoch_us

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


def records_summary(records: Any, due: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Per side of a unit's staged records (a DataFrame or a pyarrow Table): the largest ts ``m``,
    the largest ts at or before ``due`` (the unit's publish time, naive UTC) ``due`` (None when
    every row is dated after it, or no ``due`` is given), the staged ``meta``, the last
    micro-batch ``b``, the smallest ts ``lo`` and the count ``n``."""
    if not isinstance(records, pa.Table):
        on_time = F.max(F.when(F.col("ts") <= F.lit(due), F.col("ts"))) if due is not None else F.lit(None)
        return [r.asDict() for r in records.groupBy("side").agg(
            F.max("ts").alias("m"), on_time.alias("due"), F.first("meta").alias("meta"),
            F.max("batch_id").alias("b"), F.min("ts").alias("lo"), F.count("*").alias("n")).collect()]

    def naive(v: Any) -> Any:
        return None if v is None else v.astimezone(UTC).replace(tzinfo=None)

    out = []
    sides = records.column("side")
    for s in pc.unique(sides).to_pylist():
        t = records.filter(pc.equal(sides, s))
        ts = t.column("ts").cast(pa.timestamp("us", tz="UTC"))
        lo, hi = (naive(v.as_py()) for v in pc.min_max(ts).values())
        due_ts: Any = None
        if due is not None:
            before = ts.filter(pc.less_equal(ts, pa.scalar(due.replace(tzinfo=UTC), pa.timestamp("us", tz="UTC"))))
            due_ts = naive(pc.max(before).as_py()) if len(before) else None
        out.append({"side": s, "m": hi, "due": due_ts, "meta": t.column("meta")[0].as_py(),
                    "b": pc.max(t.column("batch_id")).as_py(), "lo": lo, "n": t.num_rows})
    return out


def ts_strings(us: Any) -> Any:
    """:func:`spark_ts_string` over an Arrow int64 column of epoch microseconds (nulls stay null):
    vectorized for 1970-9999, per value elsewhere."""
    n = len(us)
    valid = np.asarray(us.is_valid().to_numpy(zero_copy_only=False), bool)
    v = np.asarray(us.fill_null(0).to_numpy(), np.int64)
    out = np.empty(n, object)
    fast = valid & (v >= 0) & (v < 253402300800_000000)
    if fast.any():
        vf = v[fast]
        secs = pc.strftime(pa.array(vf // 1_000_000, pa.timestamp("s", tz="UTC")),
                           format="%Y-%m-%d %H:%M:%S").to_numpy(zero_copy_only=False).astype(str)
        frac = np.char.rstrip(np.char.zfill((vf % 1_000_000).astype(str), 6), "0")
        dot = np.where(np.char.str_len(frac) > 0, ".", "")
        out[fast] = np.char.add(np.char.add(secs, dot), frac)
    for i in np.flatnonzero(valid & ~fast).tolist():
        out[i] = spark_ts_string(int(v[i]))
    return pa.array(out, pa.string(), mask=~valid)


def with_ts_raw(t: Any) -> Any:
    """``t`` (a pyarrow Table with a typed ``ts``) with its ``ts_raw`` column: the string Spark's
    cast of that ts gives (:func:`ts_strings`), where it has none yet."""
    if "ts_raw" in t.column_names:
        return t
    us = t.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    return t.add_column(t.schema.get_field_index("ts") + 1, "ts_raw", ts_strings(us))


def json_row(values: dict[str, Any]) -> str:
    """A quarantined row's payload as ``to_json(struct(...))`` writes it (NaN and infinities as
    strings, nulls left out, no spaces)."""
    def fix(v: Any) -> Any:
        if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
            return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
        if isinstance(v, list):
            return [fix(x) for x in v]
        if isinstance(v, dict):
            return {k: fix(x) for k, x in v.items()}
        return v

    return json.dumps({k: fix(v) for k, v in values.items() if v is not None}, separators=(",", ":"))


def naive_utc(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo is None else t.astimezone(UTC).replace(tzinfo=None)


@dataclass(frozen=True)
class BatchInfo:
    """The micro-batch being staged: its unit, its id, the committed progress and the state's identity."""

    unit: int
    batch_id: int
    progress: Progress
    checkpoint_id: str


def local_path(path: str) -> str | None:
    if "://" in path and not path.startswith("file://"):
        return None
    return os.path.abspath(path.removeprefix("file://"))


def _real(path: str) -> str:
    loc = local_path(path)
    return os.path.realpath(loc) if loc is not None else path.rstrip("/")


def same_path(a: str, b: str) -> bool:
    return _real(a) == _real(b)


def path_inside(child: str, parent: str) -> bool:
    """Whether ``child`` is ``parent`` or lives under it (symlinks resolved)."""
    c, p = _real(child), _real(parent)
    return c == p or c.startswith(p.rstrip(os.sep) + os.sep)


def is_dir_tables(tables: StreamTables) -> bool:
    """An output that is a directory holding the pipeline's tables (S2J), not a table."""
    from simjoin.runtime.tables import DirTables

    return isinstance(tables, DirTables)

