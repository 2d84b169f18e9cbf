"""The micro-batch engine's units, progress and the small value helpers every part shares."""

from __future__ import annotations

import datetime as dt
import json
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from simjoin.log import get_logger
from simjoin.quality.rows import spark_ts_string
from simjoin.runtime.event_time import (  # noqa: F401  (the engine's names for them)
    BatchInfo,
    CheckpointMismatch,
    EventTime,
    Progress,
    StaleUnit,
    Stopping,
    Unit,
    on_time_max,
)
from simjoin.runtime.tables import StreamTables

log = get_logger("simjoin.engine")
UTC = dt.UTC
IDENTITY_FILE = "simjoin.json"
PROGRESS_SCHEMA = "unit long, side byte, max_ts timestamp, fingerprint string, checkpoint_id string, meta string"
QUARANTINE_SCHEMA = ("side byte, id long, ts timestamp, ts_raw string, row string, reason string, stage string, "
                     "unit long, batch string")





#: Committed units' staged records are deleted every this many units.
RECORDS_HOUSEKEEPING_EVERY = 4






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

