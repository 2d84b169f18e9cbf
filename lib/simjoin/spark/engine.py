"""The micro-batch engine under every stream pipeline (DESIGN.md, "How streams become micro-batches").

A stream is an append-only Delta table (``id``, ``ts``, payload). A run of a stream pipeline
goes ``ingest -> stages -> gate -> publish`` over one *unit*:

- **ingest** (:meth:`MicroBatchEngine.ingest`) reads what arrived since the last run with
  Structured Streaming (``availableNow``, checkpoint ``<output>_checkpoint``), or - an output's
  ``direct`` mode, local tables - by reading the inputs' new Delta versions itself (the same
  snapshot-then-appends semantics, version offsets in the same checkpoint, no query to start:
  seconds less per run, and per follow-mode unit). Each micro-batch
  is checked (the schema before any cast; per row: a null or unreadable ``id``/``ts``, a ``ts``
  more than ``max_future`` past the current time), bad rows go to ``<output>_quarantine`` with
  their reason, the pipeline's ``prepare`` hook applies its own rules and windows, and the good
  rows are staged in ``<output>_work/records`` tagged with the unit. A unit is numbered
  ``last committed + 1`` and never changes: if a staged unit is still open (a run failed after
  ingest), ingest consumes nothing and the run finishes that unit first.
- the pipeline's stages read :meth:`open_unit` and write ``<output>_work/<name>`` tables tagged
  with the unit (:meth:`write_work` / :meth:`work`), so any stage can be rerun.
- **publish** (:meth:`publish`), after the gate, appends every piece (pairs, stats, state)
  with ``txnAppId = <pipeline>/<piece>/<checkpoint id>`` and ``txnVersion = unit``, then the
  progress row that marks the unit committed. A publish rerun after a crash skips what Delta
  already committed: published rows are never repeated or lost. Small pieces (stats) and the
  progress row are committed with ``deltalake`` on a local path (``delta.append_rows``: the same
  ``txn`` action, milliseconds instead of a second of small Spark jobs).

**Replay contract.** Every write is idempotent per (checkpoint, unit) or per (checkpoint,
micro-batch); stages only read state committed by earlier units. **Identity.** The checkpoint
holds ``simjoin.json`` with a random id that every progress row records. A deleted or foreign
checkpoint, or a config whose fingerprint differs from the state's, is refused with one line
naming ``--reset``, which clears the output, its state, work, stats, quarantine and checkpoint
together. **Watermark.** The minimum over the stream's sides of the largest committed ``ts``;
quarantined rows (e.g. future ones) never move it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from simjoin.faults import maybe_fail
from simjoin.log import get_logger
from simjoin.spark import delta, delta_source
from simjoin.spark.tables import StreamTables

__all__ = [
    "StreamTables",
    "Progress",
    "Unit",
    "BatchInfo",
    "Prepared",
    "MicroBatchEngine",
    "CheckpointMismatch",
    "StaleUnit",
    "QUARANTINE_SCHEMA",
    "assign_windows",
    "assign_count_windows",
    "stream_schema_check",
    "read_state",
    "micros",
    "aware",
    "epoch_us",
    "local_path",
]

log = get_logger("simjoin.engine")
UTC = dt.UTC
IDENTITY_FILE = "simjoin.json"
PROGRESS_SCHEMA = "unit long, side byte, max_ts timestamp, fingerprint string, checkpoint_id string, meta string"
QUARANTINE_SCHEMA = ("side byte, id long, ts timestamp, ts_raw string, row string, reason string, stage string, "
                     "unit long, batch string")
INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
NUMERIC = (*INTEGRAL, T.FloatType, T.DoubleType, T.DecimalType)


class CheckpointMismatch(ValueError):
    """The checkpoint does not belong to the output's state (deleted, foreign or stale)."""


class _Stopping(Exception):
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

    def late_marks(self) -> dict[int, dt.datetime]:
        """Per side, the earliest ts still on time: a row of side ``s`` dated before
        ``late_marks()[s]`` (its stream's committed max ts minus the allowed lateness) is late."""
        return {s: m - self.lateness for s, m in self.max_ts.items()}

    @property
    def closed_watermark(self) -> dt.datetime | None:
        """The watermark less the allowed lateness: a window that ended at or before it can get
        no more rows (S3J closes and expires windows by it)."""
        return None if self.watermark is None else self.watermark - self.lateness


#: A row dated more than this past its unit's publish time never advances its stream's committed
#: max ts beyond publish time + this skew, so a lone outlier (inside ``--max-future``) cannot make
#: the next micro-batch's ordinary rows late (docs/operations.md, "Lateness").
WATERMARK_SKEW = dt.timedelta(seconds=60)


@dataclass(frozen=True)
class Unit:
    unit: int
    #: the staged rows: a DataFrame, or a pyarrow Table (``open_unit_table``)
    records: Any
    checkpoint_id: str
    #: the metadata ingest staged with the unit's first rows (JSON), read by the same job
    meta: str | None = None


def read_state(spark: SparkSession, path: str, before_unit: int) -> DataFrame | None:
    """A state table as written by units before ``before_unit`` (what a replay of the unit saw), or None."""
    if not delta.table_exists(spark, path):
        return None
    small = delta.read_small(spark, path, [("unit", "<", int(before_unit))])
    if small is not None:
        return small
    return delta.read_table(spark, path).where(F.col("unit") < before_unit)


def _records_summary(records: Any) -> list[dict[str, Any]]:
    """Per side of a unit's staged records (a DataFrame or a pyarrow Table): the largest ts ``m``,
    the staged ``meta``, the last micro-batch ``b``, the smallest ts ``lo`` and the count ``n``."""
    if not isinstance(records, pa.Table):
        return [r.asDict() for r in records.groupBy("side").agg(
            F.max("ts").alias("m"), F.first("meta").alias("meta"), F.max("batch_id").alias("b"),
            F.min("ts").alias("lo"), F.count("*").alias("n")).collect()]

    out = []
    sides = records.column("side")
    for s in pc.unique(sides).to_pylist():
        t = records.filter(pc.equal(sides, s))
        ts = t.column("ts").cast(pa.timestamp("us", tz="UTC"))
        lo, hi = (v.as_py().astimezone(UTC).replace(tzinfo=None) for v in pc.min_max(ts).values())
        out.append({"side": s, "m": hi, "meta": t.column("meta")[0].as_py(),
                    "b": pc.max(t.column("batch_id")).as_py(), "lo": lo, "n": t.num_rows})
    return out


def spark_ts_string(us: int) -> str:
    """A UTC instant (epoch microseconds) as Spark casts a timestamp to a string (session time
    zone UTC): ``yyyy-MM-dd HH:mm:ss`` and the fraction without trailing zeros."""
    t = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=int(us))
    frac = f"{t.microsecond:06d}".rstrip("0")
    return t.strftime("%Y-%m-%d %H:%M:%S") + (f".{frac}" if frac else "")


def _ts_strings(us: Any) -> Any:
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


def _naive_utc(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo is None else t.astimezone(UTC).replace(tzinfo=None)


def aware(t: dt.datetime) -> dt.datetime:
    """A timestamp Spark returned (naive, in the session's UTC) as an aware one."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def epoch_us(t: dt.datetime) -> int:
    d = aware(t) - dt.datetime(1970, 1, 1, tzinfo=UTC)
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def micros(col: str) -> Column:
    return F.unix_micros(F.col(col))


@dataclass(frozen=True)
class BatchInfo:
    """What a pipeline's ``prepare`` hook knows about the micro-batch it prepares."""

    unit: int
    batch_id: int
    progress: Progress
    checkpoint_id: str
    #: the batch is staged through the driver (follow mode): state the hook compares with is
    #: better read with ``deltalake`` (``delta.read_arrow``) than by Spark jobs
    local: bool = False


@dataclass
class Prepared:
    """A ``prepare`` hook's answer: rows to stage, rows to quarantine (with ``reason``) and
    metadata to keep with the unit (e.g. the vector dimension)."""

    staged: DataFrame
    bad: DataFrame | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


Prepare = Callable[[DataFrame, BatchInfo], Prepared]
#: A ``Prepare`` twin on pyarrow Tables (``Prepared`` with Tables), for batches staged through the driver.
PrepareArrow = Callable[[Any, BatchInfo], Prepared]


def local_path(path: str) -> str | None:
    if "://" in path and not path.startswith("file://"):
        return None
    return os.path.abspath(path.removeprefix("file://"))


def _real(path: str) -> str:
    loc = local_path(path)
    return os.path.realpath(loc) if loc is not None else path.rstrip("/")


def _same(a: str, b: str) -> bool:
    return _real(a) == _real(b)


def _inside(child: str, parent: str) -> bool:
    """Whether ``child`` is ``parent`` or lives under it (symlinks resolved)."""
    c, p = _real(child), _real(parent)
    return c == p or c.startswith(p.rstrip(os.sep) + os.sep)


def _is_dir_tables(tables: StreamTables) -> bool:
    """An output that is a directory holding the pipeline's tables (S2J), not a table."""
    from simjoin.spark.tables import DirTables

    return isinstance(tables, DirTables)


def stream_schema_check(schema: T.StructType, path: str, ts_unit: str | None,
                        payload: dict[str, Callable[[T.DataType], bool]], payload_text: str) -> None:
    """The input schema, checked before any cast: ``id`` an integer type; ``ts`` a timestamp, a
    string (parsed per row) or a number with a declared unit; the payload columns' types."""
    types = {f.name: f.dataType for f in schema.fields}
    want = f"allowed id <integer>, ts timestamp, {payload_text}"
    missing = [c for c in ("id", "ts", *payload) if c not in types]
    if missing:
        raise ValueError(f"input {path} lacks columns {missing} (has {list(types)}): {want}")
    if not isinstance(types["id"], INTEGRAL):
        raise ValueError(f"input {path}: id is {types['id'].simpleString()}: allowed an integer type "
                         "(tinyint, smallint, int, bigint)")
    ts = types["ts"]
    if isinstance(ts, NUMERIC):
        if ts_unit is None:
            raise ValueError(f"input {path}: ts is {ts.simpleString()}: pass --ts-unit s|ms|us to say its unit "
                             "(or store a timestamp)")
    elif not isinstance(ts, (T.TimestampType, T.TimestampNTZType, T.StringType, T.DateType)):
        raise ValueError(f"input {path}: ts is {ts.simpleString()}: allowed timestamp, a string, or a number "
                         "with --ts-unit s|ms|us")
    for c, ok in payload.items():
        if not ok(types[c]):
            raise ValueError(f"input {path}: {c} is {types[c].simpleString()}: {want}")


#: a ts string that names its own zone or offset (``Z``, ``+02:00``, ``UTC``, ``Europe/Berlin``) after its time
_ZONED_TS = (r"(?i)\d{1,2}:\d{2}(:\d{2}(\.\d*)?)?\s*(z|[+-]\d{1,2}(:?\d{2}){0,2}|(ut|utc|gmt)([+-]\S+)?"
             r"|[a-z_]+/[a-z0-9_/+-]+)\s*$")


def _ts_expr(dtype: T.DataType, ts_unit: str | None, ts_zone: str = "UTC") -> Column:
    """``ts`` as an instant. A zone-less value (``TIMESTAMP_NTZ``, a date, a string without a zone
    or offset) is wall time in ``ts_zone``; a ``TIMESTAMP`` or a string with a zone is already an
    instant. The session's zone is UTC (``simjoin.spark.session``), so ``to_utc_timestamp`` of the
    value read in UTC is the wall time read in ``ts_zone``."""
    c = F.col("ts")
    utc = ts_zone.upper() in ("UTC", "Z", "GMT", "ETC/UTC")
    if isinstance(dtype, T.TimestampType):
        return c
    if isinstance(dtype, (T.TimestampNTZType, T.DateType)):
        return c.cast("timestamp") if utc else F.to_utc_timestamp(c.cast("timestamp"), ts_zone)
    if isinstance(dtype, T.StringType):
        parsed = F.try_to_timestamp(c)
        return parsed if utc else F.when(c.rlike(_ZONED_TS), parsed).otherwise(F.to_utc_timestamp(parsed, ts_zone))
    # a number with a unit; beyond ±3e11 s (year ~11,000) it is unreadable rather than an overflow
    scale = {"s": 1.0, "ms": 1e-3, "us": 1e-6}[ts_unit or "s"]
    secs = c.cast("double") * F.lit(scale)
    ok = secs.isNotNull() & ~F.isnan(secs) & (F.abs(secs) < F.lit(3e11))
    return F.when(ok, F.timestamp_micros(F.round(secs * F.lit(1e6)).cast("long")))


class MicroBatchEngine:
    """One stream pipeline's engine over its tables (see the module docstring)."""

    def __init__(self, spark: SparkSession, pipeline: str, tables: StreamTables, sources: Sequence[str],
                 fingerprint: str, ts_unit: str | None = None, max_future_s: float = 3600.0,
                 follow: Any = None, allowed_lateness_s: float = 0.0, ts_zone: str = "UTC") -> None:
        self.spark = spark
        self.pipeline = pipeline
        self.tables = tables
        self.sources = list(sources)
        self.fingerprint = fingerprint
        self.ts_unit = ts_unit
        self.max_future_s = float(max_future_s)
        self.allowed_lateness_s = float(allowed_lateness_s)
        #: the zone of a TIMESTAMP_NTZ ts column or of ts strings without a zone
        self.ts_zone = ts_zone
        #: follow mode (``simjoin.pipeline.runner.Follow``): ingest runs a processingTime query
        self.follow = follow
        self._progress: Progress | None = None
        self._direct_read_s = 0.0  # seconds the last direct batch took to read with pyarrow
        #: every table path of the run (``StreamRun.table_paths``): ``--reset`` of an output
        #: created before the identity file listed what it created removes these
        self.owned: list[str] = []

    # ----------------------------------------------------------------- identity and progress

    def checkpoint_id(self) -> str | None:
        p = local_path(self.tables.checkpoint)
        if p is None:
            raise ValueError(f"checkpoint {self.tables.checkpoint}: only local paths are supported")
        f = os.path.join(p, IDENTITY_FILE)
        if not os.path.exists(f):
            return None
        return str(json.loads(open(f).read())["id"])

    def _checkpoint_consumed(self) -> bool:
        p = local_path(self.tables.checkpoint)
        commits = os.path.join(p or "", "commits")
        return os.path.isdir(commits) and any(not n.startswith(".") for n in os.listdir(commits))

    def ingest_mode(self) -> str:
        """How this output's ingest reads its stream, fixed when the output is created:
        ``foreach`` (a ``foreachBatch`` query in this process; a local Spark only), ``landing``
        (the query appends to a Delta landing table that this process then stages commit by
        commit; the mode of outputs created on the warm Spark over Spark Connect) or ``direct``
        (no query: this process reads the inputs' new versions by their Delta logs,
        :meth:`_ingest_direct`; local tables and a pipeline that stages through the driver, on a
        local or the warm Spark)."""
        p = local_path(self.tables.checkpoint)
        f = os.path.join(p or "", IDENTITY_FILE)
        if os.path.exists(f):
            return str(json.loads(open(f).read()).get("ingest", "foreach"))
        from simjoin.spark.session import is_remote

        if self._direct_possible():  # on either Spark: the warm one's server reads the same local files
            return "direct"
        return "landing" if is_remote(self.spark) else "foreach"

    def _direct_possible(self) -> bool:
        """Whether a new output may read its inputs by their Delta logs (``direct``): the pipeline
        stages batches through the driver (its ``prepare_arrow``), every table is local, every input
        is one ``delta_source`` reads, and ``SIMJOIN_DIRECT_INGEST`` is not 0."""
        if os.environ.get("SIMJOIN_DIRECT_INGEST", "1") == "0" or getattr(self, "_prepare_arrow", None) is None:
            return False
        if not self.local_tables() or local_path(self.tables.checkpoint) is None:
            return False
        for src in self.sources:
            loc = local_path(src)
            if loc is None or delta_source.latest_version(loc) < 0:
                return False
            why = delta_source.unsupported(loc)
            if why is not None:
                log.info("%s: input %s is read by a streaming query: %s", self.pipeline, src, why)
                return False
        return True

    def _new_checkpoint_id(self) -> str:
        p = local_path(self.tables.checkpoint)
        assert p is not None
        mode = self.ingest_mode()
        # what this output will own: refused if an input lives there or it holds foreign files
        targets = self._reset_targets(legacy=True)
        self._refuse_inputs_under(targets, "where this output's tables would be written")
        created, foreign = [], []
        for t in targets:
            loc = local_path(t)
            if loc is None or not os.path.exists(loc) or (os.path.isdir(loc) and not os.listdir(loc)):
                created.append(t)
            elif t != self.tables.checkpoint:
                foreign.append(t)
        if foreign:
            raise CheckpointMismatch(
                f"{foreign[0]} already exists and was not created by simjoin {self.pipeline} for "
                f"{self.tables.output}: allowed: a new --output, or remove it yourself")
        if self.tables.checkpoint not in created:
            created.append(self.tables.checkpoint)
        out = local_path(self.tables.output)
        dirs = [self.tables.output] if _is_dir_tables(self.tables) and out and not os.path.exists(out) else []
        os.makedirs(p, exist_ok=True)
        ident = uuid.uuid4().hex
        self._write_identity({"id": ident, "output": self.tables.output, "pipeline": self.pipeline,
                              "ingest": mode, "inputs": self._input_ids(), "created": created,
                              "created_dirs": dirs})
        return ident

    # ----------------------------------------------------------------- input identity, reset

    def _identity(self) -> dict[str, Any] | None:
        """The checkpoint's identity file (None when there is none)."""
        p = local_path(self.tables.checkpoint)
        f = os.path.join(p or "", IDENTITY_FILE)
        if not os.path.exists(f):
            return None
        with open(f) as fh:
            return dict(json.load(fh))

    def _write_identity(self, content: dict[str, Any]) -> None:
        p = local_path(self.tables.checkpoint)
        assert p is not None
        tmp = os.path.join(p, IDENTITY_FILE + ".tmp")
        with open(tmp, "w") as fh:
            fh.write(json.dumps(content))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, os.path.join(p, IDENTITY_FILE))

    def _input_ids(self) -> list[dict[str, Any]]:
        """Each input's Delta table id (``metaData.id``; None where it cannot be read here)."""
        return [{"path": src, "table_id": delta_source.table_id(loc) if (loc := local_path(src)) else None}
                for src in self.sources]

    def _spark_offsets(self) -> dict[str, dict[str, Any]]:
        """The streaming query's last offsets in the checkpoint, per input table id (the Delta
        source's ``reservoirId``): ``reservoirVersion``, ``index``, ``isStartingVersion``."""
        d = self._direct_dir("offsets")
        ids = [int(n) for n in os.listdir(d) if n.isdigit()] if os.path.isdir(d) else []
        if not ids:
            return {}
        out: dict[str, dict[str, Any]] = {}
        with open(os.path.join(d, str(max(ids)))) as fh:
            for line in fh:
                try:
                    o = json.loads(line)
                except ValueError:
                    continue
                if isinstance(o, dict) and "reservoirId" in o:
                    out[str(o["reservoirId"])] = o
        return out

    def check_inputs(self) -> None:
        """Refuse, with one line naming the input and ``--reset``, an input that is not the table
        this output read (its Delta table id changed: deleted and written again at the same path)
        or whose versions this output still has to read are gone from its log. Outputs created
        before the ids were recorded get them now."""
        ident = self._identity()
        if ident is None:
            return
        recorded = [g.get("table_id") for g in ident.get("inputs") or []]  # in the order of the sources
        direct = ident.get("ingest") == "direct"
        spark_offsets = {} if direct else self._spark_offsets()
        last = self._direct_last("commits") if direct else -1
        read = self._direct_ranges(last) if direct and last >= 0 else None
        for k, src in enumerate(self.sources):
            loc = local_path(src)
            if loc is None:
                continue  # not a local table: the streaming source checks its id itself
            cur = delta_source.table_id(loc)
            if cur is None:
                if delta_source.latest_version(loc) < 0:
                    raise CheckpointMismatch(f"input {src} holds no Delta table any more: allowed: restore it, "
                                             f"or {self._reset_hint()}")
                continue
            was = recorded[k] if k < len(recorded) else None
            if was is None and spark_offsets and cur not in spark_offsets:  # recorded by the query
                was = " or ".join(sorted(spark_offsets))
            if was is not None and was != cur:
                raise CheckpointMismatch(
                    f"input {src} is another Delta table (id {cur}) than the one this output read (id {was}): "
                    f"it was deleted and written again: {self._reset_hint()}")
            latest = delta_source.latest_version(loc)
            if read is not None:  # direct: the next batch reads the commits after the last end
                end = read[k].end
                if latest < end:
                    raise CheckpointMismatch(
                        f"input {src} ends at version {latest}, before version {end} that this output read: "
                        f"its log was rewritten: {self._reset_hint()}")
                gone = next((v for v in range(end + 1, latest + 1) if not delta_source.commit_exists(loc, v)), None)
            elif cur in spark_offsets:  # the streaming query resumes at its offset's version
                o = spark_offsets[cur]
                v = int(o.get("reservoirVersion", -1))
                if latest < v - 1 or (o.get("isStartingVersion") and latest < v):
                    raise CheckpointMismatch(
                        f"input {src} ends at version {latest}, before version {v} that this output read: "
                        f"its log was rewritten: {self._reset_hint()}")
                # it resumes by reading the commits from its offset's version on (a snapshot: at it)
                gone = (None if o.get("isStartingVersion") else
                        next((w for w in range(v, latest + 1) if not delta_source.commit_exists(loc, w)), None))
            else:
                gone = None
            if gone is not None:
                raise CheckpointMismatch(
                    f"input {src}: the log of version {gone} is gone (cleaned up or vacuumed before this output "
                    f"read it): allowed: keep the input's log until every output read it, or {self._reset_hint()}")
        if "inputs" not in ident:
            self._write_identity({**ident, "inputs": self._input_ids()})

    def _reset_targets(self, legacy: bool = False) -> list[str]:
        """What ``--reset`` removes: the tables and folders the identity file says this pipeline
        created for the output; without one (``legacy``, or an output created before they were
        recorded), the tables the engine names beside the output (for a directory output, its
        ``_`` tables and the run's tables in it, never the directory)."""
        ident = None if legacy else self._identity()
        if ident is not None and ident.get("created") is not None and _same(str(ident.get("output")),
                                                                            self.tables.output):
            return [str(t) for t in ident["created"]]
        dir_out = _is_dir_tables(self.tables)
        base = [p for k, p in self.tables.paths().items() if not (dir_out and k == "output")]
        extra = [p for p in self.owned if p not in base and not any(_inside(p, b) for b in base)
                 and not (dir_out and _same(p, self.tables.output))]
        return base + extra

    def _refuse_inputs_under(self, targets: Sequence[str], why: str) -> None:
        for src in self.sources:
            for t in targets:
                if _inside(src, t):
                    what = "is" if _same(src, t) else "lives under"
                    raise ValueError(f"input {src} {what} {t}, {why}: allowed: inputs outside "
                                     f"{self.tables.output} and its tables (move the input, or choose another "
                                     "--output)")

    def own(self, paths: Sequence[str]) -> None:
        """Record in the identity file the tables this pipeline is about to create (``--reset``
        removes exactly what is recorded)."""
        ident = self._identity()
        if ident is None or ident.get("created") is None:
            return
        have = list(ident["created"])
        new = [p for p in paths if p not in have and not any(_inside(p, h) for h in have)
               and (loc := local_path(p)) is not None and not os.path.exists(loc)]
        if new:
            self._write_identity({**ident, "created": have + new})

    def _reset_hint(self) -> str:
        return (f"run again with --reset to clear {self.tables.output} with its state, work, stats, "
                "quarantine and checkpoint together (every input is then joined again)")

    def progress(self, fresh: bool = False) -> Progress:
        """What the committed units say. Read once per engine (a run's stages share their
        unit's engine) and again after :meth:`publish` or :meth:`reset`; ``fresh`` rereads."""
        if self._progress is None or fresh:
            self._progress = self._read_progress()
        return self._progress

    def _read_progress(self) -> Progress:
        rows = delta.small_rows(self.spark, self.tables.progress)
        for r in rows:  # deltalake reads an instant as aware UTC, Spark as naive UTC: one form
            if r["max_ts"] is not None and r["max_ts"].tzinfo is not None:
                r["max_ts"] = r["max_ts"].astimezone(UTC).replace(tzinfo=None)
        if not rows:
            return Progress(-1, None, {}, None, None, {}, self.allowed_lateness_s)
        last = max(rows, key=lambda r: r["unit"])
        marks: dict[int, dt.datetime] = {}
        for r in rows:
            if r["max_ts"] is not None:
                s = int(r["side"])
                marks[s] = max(marks[s], r["max_ts"]) if s in marks else r["max_ts"]
        wm = min(marks.values()) if len(marks) == len(self.sources) else None
        return Progress(int(last["unit"]), wm, marks, last["checkpoint_id"], last["fingerprint"],
                        json.loads(last["meta"] or "{}"), self.allowed_lateness_s)

    def verify(self, prog: Progress | None = None) -> str:
        """The checkpoint's identity, after checking it and the config against the state.
        Creates the identity of a fresh output."""
        prog = prog if prog is not None else self.progress()
        ident = self.checkpoint_id()
        if prog.checkpoint_id is not None:
            if ident is None:
                raise CheckpointMismatch(
                    f"checkpoint {self.tables.checkpoint} is missing, but {self.tables.output} holds "
                    f"{prog.last_unit + 1} committed units: {self._reset_hint()}")
            if ident != prog.checkpoint_id:
                raise CheckpointMismatch(
                    f"checkpoint {self.tables.checkpoint} ({ident}) is not the one {self.tables.output} was "
                    f"written with ({prog.checkpoint_id}): {self._reset_hint()}")
            if prog.fingerprint != self.fingerprint:
                raise CheckpointMismatch(
                    f"{self.tables.output} holds state of another configuration ({prog.fingerprint}); this run "
                    f"is ({self.fingerprint}): use the same settings, a new --output, or {self._reset_hint()}")
            return ident
        if ident is None:
            if self._checkpoint_consumed():
                raise CheckpointMismatch(f"checkpoint {self.tables.checkpoint} has no identity: "
                                         f"{self._reset_hint()}")
            if delta.table_exists(self.spark, self.tables.output):
                raise CheckpointMismatch(
                    f"{self.tables.output} already holds a table but no stream state: {self._reset_hint()}")
            return self._new_checkpoint_id()
        kept = [self.tables.records] + ([self.tables.work("landing")] if self.ingest_mode() == "landing" else [])
        if self._checkpoint_consumed() and not any(delta.table_exists(self.spark, t) for t in kept):
            raise CheckpointMismatch(
                f"checkpoint {self.tables.checkpoint} has consumed input that {self.tables.output} never "
                f"committed: {self._reset_hint()}")
        return ident

    def write_id(self, piece: str, checkpoint_id: str) -> str:
        return f"{self.pipeline}/{piece}/{checkpoint_id}"

    def reset(self) -> list[str]:
        """Remove exactly the tables and folders this pipeline created for the output, as its
        identity file lists them (:meth:`_reset_targets`); a folder it made to hold them (an S2J
        output directory) only once it is empty. Refused, before anything is removed, when an
        input is one of them or lives under one."""
        removed = []
        self._progress = None
        ident = self._identity() or {}
        targets = self._reset_targets()
        for p in targets:
            if local_path(p) is None:
                raise ValueError(f"--reset: {p} is not a local path; remove it with your storage tools")
        self._refuse_inputs_under(targets, "which --reset would remove")
        # the identity file goes last: a reset that fails half-way is done again from the same list
        ck = self.tables.checkpoint
        for p in sorted(targets, key=lambda t: t == ck):
            loc = local_path(p)
            assert loc is not None
            if os.path.isdir(loc):
                shutil.rmtree(loc)
                removed.append(p)
            elif os.path.exists(loc):
                os.remove(loc)
                removed.append(p)
        for d in ident.get("created_dirs") or []:
            loc = local_path(str(d))
            if loc is not None and os.path.isdir(loc) and not os.listdir(loc):
                os.rmdir(loc)
                removed.append(str(d))
        log.info("%s: reset removed %s", self.pipeline, ", ".join(removed) or "nothing")
        return removed

    # ----------------------------------------------------------------- units and work tables

    def open_unit(self) -> Unit | None:
        """The staged unit not yet committed, checked against the checkpoint and the config."""
        prog = self.progress()
        ident = self.verify(prog)
        if not delta.table_exists(self.spark, self.tables.records):
            return None
        recs = delta.read_table(self.spark, self.tables.records).where(F.col("unit") > prog.last_unit)
        row = recs.agg(F.min("unit").alias("u"), F.max("unit").alias("v"),
                       F.collect_set("fingerprint").alias("fp"),
                       F.collect_set("checkpoint_id").alias("ck"), F.first("meta").alias("meta")).first()
        if row is None or row["u"] is None:
            return None
        if row["u"] != row["v"]:
            raise RuntimeError(f"{self.tables.records} holds several open units {row['u']}..{row['v']}: "
                               f"{self._reset_hint()}")
        if list(row["fp"]) != [self.fingerprint]:
            raise CheckpointMismatch(
                f"unit {row['u']} was staged with another configuration ({', '.join(row['fp'])}); this run is "
                f"({self.fingerprint}): rerun with the same settings, or {self._reset_hint()}")
        if list(row["ck"]) != [ident]:
            raise CheckpointMismatch(f"unit {row['u']} was staged under another checkpoint: {self._reset_hint()}")
        return Unit(int(row["u"]), recs.drop("fingerprint", "checkpoint_id"), ident, row["meta"])

    def open_unit_table(self, columns: Sequence[str] | None = None) -> Unit | None:
        """:meth:`open_unit` read in this process with ``deltalake`` (no Spark job): the unit's
        records as a pyarrow Table. Raises ``delta.NotLocal`` when the records table is not local or
        deltalake cannot read it (the caller then uses :meth:`open_unit`)."""
        prog = self.progress()
        ident = self.verify(prog)
        local = local_path(self.tables.records)
        if local is None or not os.path.isdir(os.path.join(local, "_delta_log")):
            if local is not None and not os.path.exists(local):
                return None
            raise delta.NotLocal(f"{self.tables.records} is not a local Delta table")
        try:
            from deltalake import DeltaTable

            t = DeltaTable(local).to_pyarrow_table(columns=None if columns is None else [
                *columns, "unit", "fingerprint", "checkpoint_id", "meta"],
                filters=[("unit", ">", int(prog.last_unit))])
        except Exception as e:  # a reader feature deltalake lacks
            raise delta.NotLocal(f"deltalake cannot read {self.tables.records}: {e}") from e
        if t.num_rows == 0:
            return None
        lo, hi = pc.min_max(t.column("unit")).values()
        if lo.as_py() != hi.as_py():
            raise RuntimeError(f"{self.tables.records} holds several open units {lo}..{hi}: {self._reset_hint()}")
        fps = pc.unique(t.column("fingerprint")).to_pylist()
        if fps != [self.fingerprint]:
            raise CheckpointMismatch(
                f"unit {lo} was staged with another configuration ({', '.join(map(str, fps))}); this run is "
                f"({self.fingerprint}): rerun with the same settings, or {self._reset_hint()}")
        if pc.unique(t.column("checkpoint_id")).to_pylist() != [ident]:
            raise CheckpointMismatch(f"unit {lo} was staged under another checkpoint: {self._reset_hint()}")
        meta = t.column("meta")[0].as_py()
        return Unit(int(lo.as_py()), t.drop_columns(["fingerprint", "checkpoint_id"]), ident, meta)

    def write_work(self, df: DataFrame, name: str, unit: int) -> str:
        path = self.tables.work(name)
        delta.overwrite(df.withColumn("unit", F.lit(unit).cast("long")), path)
        return path

    def work(self, name: str, unit: int, keep_unit: bool = False) -> DataFrame:
        """A work table of the open unit (without its ``unit`` tag unless ``keep_unit``);
        refuses one left by another unit."""
        path = self.tables.work(name)
        if not delta.table_exists(self.spark, path):
            raise StaleUnit(f"no {name} table at {path}: run the previous stage first")
        # a small local work table (a micro-batch's) is read with deltalake: no snapshot jobs
        df = delta.read_small_or_table(self.spark, path)
        got = df.select(F.max("unit")).first()[0]  # type: ignore[index]
        if got is not None and int(got) != unit:
            raise StaleUnit(f"{path} holds unit {got}, expected {unit}: rerun the previous stage")
        return df if keep_unit else df.drop("unit")

    # ----------------------------------------------------------------- ingest

    def _read(self, k: int, path: str, payload: dict[str, Callable[[T.DataType], bool]],
              payload_text: str, casts: dict[str, str]) -> DataFrame:
        if not delta.table_exists(self.spark, path):
            raise FileNotFoundError(f"no Delta table at {path!r}")
        src = self.spark.readStream.format("delta").load(delta._abs(path))
        return self._shape(k, path, src, src.schema, payload, payload_text, casts)

    def _shape(self, k: int, path: str, src: DataFrame, schema: T.StructType,
               payload: dict[str, Callable[[T.DataType], bool]], payload_text: str,
               casts: dict[str, str]) -> DataFrame:
        """A source's rows as the engine stages them (``id`` long, ``ts``, ``ts_raw``, the payload,
        ``side``), after checking its schema before any cast."""
        stream_schema_check(schema, path, self.ts_unit, payload, payload_text)
        ts_type = schema["ts"].dataType
        cols = [F.col("id").cast("long").alias("id"), _ts_expr(ts_type, self.ts_unit, self.ts_zone).alias("ts"),
                F.col("ts").cast("string").alias("ts_raw")]
        cols += [F.col(c).cast(casts[c]).alias(c) if c in casts else F.col(c) for c in payload]
        return src.select(*cols, F.lit(k).cast("byte").alias("side"))

    def ingest(self, prepare: Prepare,
               payload: dict[str, Callable[[T.DataType], bool]] | Sequence[dict[str, Callable[[T.DataType], bool]]],
               payload_text: str, casts: dict[str, str] | None = None,
               max_files_per_trigger: int | None = None, prepare_arrow: PrepareArrow | None = None) -> dict[str, Any]:
        """Stage what arrived since the last run as one new unit (or resume the open one).
        ``payload``: the columns every source must have (name -> type check), or one such dict
        per source. ``prepare_arrow``: the pipeline's ``prepare`` on pyarrow Tables; with it, each
        micro-batch is staged through the driver (:meth:`_stage_arrow`) when the tables are local."""
        self._prepare_arrow = prepare_arrow
        per_source: list[dict[str, Callable[[T.DataType], bool]]] = (
            list(payload) if isinstance(payload, (list, tuple)) else [payload] * len(self.sources))  # type: ignore[list-item]
        prog = self.progress()
        if prog.checkpoint_id is None and self.checkpoint_id() is None:
            # a new output: a missing input or a wrong schema is refused before anything is written
            direct = self._direct_possible()
            for k, src in enumerate(self.sources):
                if direct:
                    loc = local_path(src)
                    assert loc is not None
                    stream_schema_check(delta_source.spark_schema(loc, delta_source.latest_version(loc)), src,
                                        self.ts_unit, per_source[k], payload_text)
                else:
                    self._read(k, src, per_source[k], payload_text, casts or {})
        ident = self.verify(prog)
        open_ = None
        if self.local_tables():  # read with deltalake: no Spark job
            try:
                open_ = self.open_unit_table(["side"])
            except delta.NotLocal:
                open_ = self.open_unit()
        else:
            open_ = self.open_unit()
        if open_ is not None:
            log.info("%s: unit %d is still open; finishing it before reading new input", self.pipeline,
                     open_.unit)
            res = {"unit": open_.unit, "resumed": True, "batches": [], "rows": 0, "staged": 0, "quarantined": 0}
            if getattr(open_, "records", None) is not None:  # the open unit's size, read with deltalake
                res["unit_rows"] = int(open_.records.num_rows)
            return res
        unit = prog.last_unit + 1
        self.check_inputs()  # an input deleted and written again, or its unread versions gone: refused
        if self.ingest_mode() == "direct":
            if max_files_per_trigger:
                raise ValueError("max_files_per_trigger: a direct ingest reads whole versions of its inputs")
            return self._ingest_direct(prepare, per_source, payload_text, casts or {}, prog, ident)
        parts = [self._read(k, p, per_source[k], payload_text, casts or {}) for k, p in enumerate(self.sources)]
        stream = parts[0]
        for p in parts[1:]:  # sources may carry different payload columns (each side's own)
            stream = stream.unionByName(p, allowMissingColumns=True)
        totals: dict[str, Any] = {"batches": [], "rows": 0, "staged": 0, "quarantined": 0}
        if self.follow is not None:
            return self._follow(stream, prepare, ident, max_files_per_trigger, totals)

        # foreach mode: a micro-batch the stream replays after a crash between staging it and its
        # checkpoint commit was staged by a committed unit already: it is not staged (or judged
        # late or duplicate against its own rows) again
        staged_before = int(prog.meta.get("staged_batch", -1)) if self.ingest_mode() == "foreach" else -1

        def stage(batch: DataFrame, batch_id: int) -> None:
            if int(batch_id) <= staged_before:
                log.info("%s: micro-batch %d was staged by a committed unit; skipped", self.pipeline, batch_id)
                return
            info = self._stage(batch, int(batch_id), BatchInfo(unit, int(batch_id), prog, ident), prepare)
            totals["batches"].append(int(batch_id))
            for k in ("rows", "staged", "quarantined"):
                totals[k] += info[k]

        if self.ingest_mode() == "landing":
            self._ingest_landing(stream, stage, prog, ident, max_files_per_trigger)
        else:
            self._ingest_foreach(stream, stage, ident, max_files_per_trigger)
        staged = totals["staged"]
        return {"unit": unit if staged else None, "resumed": False, **totals, "unit_rows": staged}

    def _ingest_foreach(self, stream: DataFrame, stage: Callable[[DataFrame, int], None], ident: str,
                        max_files_per_trigger: int | None) -> None:
        from simjoin.spark.session import is_remote

        if is_remote(self.spark):
            raise ValueError(
                f"{self.tables.output} was created with a local Spark, whose stream reader runs in the "
                "job's own process; on the warm Spark (SIMJOIN_SPARK_REMOTE) it cannot: allowed: run it with "
                f"SIMJOIN_SPARK_REMOTE=off, or {self._reset_hint()} on the warm Spark")
        errors: list[BaseException] = []

        def on_batch(batch: DataFrame, batch_id: int) -> None:
            try:
                stage(batch, batch_id)
            except BaseException as e:  # Spark reports only the Python side's last line: keep the cause
                log.exception("%s: micro-batch %d failed", self.pipeline, batch_id)
                errors.append(e)
                raise

        writer = stream.writeStream.foreachBatch(on_batch).option(
            "checkpointLocation", delta._abs(self.tables.checkpoint)).trigger(availableNow=True)
        if max_files_per_trigger:
            writer = writer.option("maxFilesPerTrigger", int(max_files_per_trigger))
        q = writer.queryName(f"simjoin_{self.pipeline}_{ident[:8]}").start()
        try:
            q.awaitTermination()
        except Exception:
            if errors:
                raise errors[0] from None
            raise

    def _follow(self, stream: DataFrame, prepare: Prepare, ident: str, max_files_per_trigger: int | None,
                totals: dict[str, Any]) -> dict[str, Any]:
        """Follow mode: one ``foreachBatch`` query with a ``processingTime`` trigger. Each
        micro-batch is staged as its own unit, then ``follow.after_unit(unit)`` runs the later
        stages and publishes it before the batch is committed to the checkpoint: a crash leaves
        an open unit (or an uncommitted batch) that the next start finishes first, as in batch
        mode. A stop request lets the batch in progress finish; a batch that starts after it
        raises at once, before staging anything, and is read again by the next start."""
        import threading
        import time as _time

        from simjoin.spark.session import is_remote

        follow = self.follow
        if self.ingest_mode() == "landing" or is_remote(self.spark):
            raise ValueError(f"--follow runs the stream's query in this process: {self.tables.output} needs a local "
                             "Spark (run it with SIMJOIN_SPARK_REMOTE=off)")
        busy = threading.Event()
        errors: list[BaseException] = []
        totals["units"] = []

        def on_batch(batch: DataFrame, batch_id: int) -> None:
            if follow.stop.is_set():
                errors.append(_Stopping())
                raise _Stopping()
            busy.set()
            try:
                prog = self.progress(fresh=True)  # the last unit was published by the stages' engine
                if int(batch_id) <= int(prog.meta.get("staged_batch", -1)):
                    log.info("%s: micro-batch %d was staged by a committed unit; skipped", self.pipeline, batch_id)
                    return
                unit = prog.last_unit + 1
                info = self._stage(batch, int(batch_id), BatchInfo(unit, int(batch_id), prog, ident), prepare,
                                   follow=True)
                totals["batches"].append(int(batch_id))
                for k in ("rows", "staged", "quarantined"):
                    totals[k] += info[k]
                if info["staged"]:
                    follow.after_unit(unit)
                    totals["units"].append(unit)
            except BaseException as e:
                log.exception("%s: micro-batch %d failed", self.pipeline, batch_id)
                errors.append(e)
                raise
            finally:
                busy.clear()

        writer = (stream.writeStream.foreachBatch(on_batch)
                  .option("checkpointLocation", delta._abs(self.tables.checkpoint))
                  .trigger(processingTime=f"{max(1, round(follow.trigger_s * 1000))} milliseconds"))
        if max_files_per_trigger:
            writer = writer.option("maxFilesPerTrigger", int(max_files_per_trigger))
        q = writer.queryName(f"simjoin_{self.pipeline}_follow_{ident[:8]}").start()
        log.info("%s: following %s every %gs (Ctrl-C stops)", self.pipeline, ", ".join(self.sources),
                 follow.trigger_s)
        try:
            while q.isActive and not follow.stop.is_set():
                q.awaitTermination(0.25)  # type: ignore[arg-type]  # seconds; a float works
            if q.isActive:
                while busy.is_set():
                    _time.sleep(0.05)
                q.stop()
        except Exception:
            if not errors or not isinstance(errors[0], _Stopping):
                if errors:
                    raise errors[0] from None
                raise
        real = [e for e in errors if not isinstance(e, _Stopping)]
        if real:
            raise real[0]
        log.info("%s: follow mode stopped after %d units", self.pipeline, len(totals["units"]))
        return {"unit": None, "resumed": False, "follow": True, **totals}

    # ----------------------------------------------------------------- direct ingest

    def _ingest_direct(self, prepare: Prepare, per_source: Sequence[dict[str, Callable[[T.DataType], bool]]],
                       payload_text: str, casts: dict[str, str], prog: Progress, ident: str) -> dict[str, Any]:
        """``direct`` mode: no streaming query. A micro-batch is the inputs' versions since the last
        batch (the first takes each input's snapshot), read by their Delta logs
        (``simjoin.spark.delta_source``) and staged as any micro-batch. Exactly once as a query's
        checkpoint: the batch's version ranges are written to ``<checkpoint>/offsets/<id>`` before it
        is staged and ``commits/<id>`` after; a batch planned but not committed is staged again with
        the same ranges (its writes are idempotent, and one a committed unit staged is skipped).
        A run takes what arrived before it started; follow mode polls every trigger."""
        totals: dict[str, Any] = {"batches": [], "rows": 0, "staged": 0, "quarantined": 0}
        follow = self.follow
        args = (prepare, per_source, payload_text, casts, ident, totals)
        if follow is None:
            if self._direct_step(*args) == "replayed":  # then what arrived since it was planned
                self._direct_step(*args)
            return {"unit": prog.last_unit + 1 if totals["staged"] else None, "resumed": False, **totals,
                    "unit_rows": totals["staged"]}
        totals["units"] = []
        log.info("%s: following %s every %gs (Ctrl-C stops)", self.pipeline, ", ".join(self.sources),
                 follow.trigger_s)
        while not follow.stop.is_set():
            t0 = time.monotonic()
            if self._direct_step(*args) is None:  # nothing new: wait for the next trigger
                follow.stop.wait(max(0.0, follow.trigger_s - (time.monotonic() - t0)))
        log.info("%s: follow mode stopped after %d units", self.pipeline, len(totals["units"]))
        return {"unit": None, "resumed": False, "follow": True, **totals}

    def _direct_step(self, prepare: Prepare, per_source: Sequence[dict[str, Callable[[T.DataType], bool]]],
                     payload_text: str, casts: dict[str, str], ident: str, totals: dict[str, Any]) -> str | None:
        """One direct micro-batch: the one planned but not committed (``"replayed"``), else the
        inputs' new versions (``"new"``); None when nothing arrived."""
        if self.follow is not None:  # an input replaced while following is refused before it is read
            self.check_inputs()
        done, planned = self._direct_last("commits"), self._direct_last("offsets")
        if planned > done:
            b, ranges, kind = planned, self._direct_ranges(planned), "replayed"
            files = [delta_source.files_between(local_path(src) or src, r) for src, r in zip(self.sources, ranges,
                                                                                          strict=True)]
        else:
            prev = self._direct_ranges(done) if done >= 0 else [delta_source.Range(-1, -1)] * len(self.sources)
            ranges = []
            for src, r in zip(self.sources, prev, strict=True):
                loc = local_path(src)
                assert loc is not None
                ranges.append(delta_source.Range(r.end, delta_source.latest_version(loc)))
            files = [delta_source.files_between(local_path(src) or src, r) for src, r in zip(self.sources, ranges,
                                                                                          strict=True)]
            if not any(files):  # nothing appended (a compaction, or no input yet): nothing to record
                return None
            b, kind = done + 1, "new"
            self._direct_write("offsets", b, {"sources": [{"path": src, "start": r.start, "end": r.end}
                                                          for src, r in zip(self.sources, ranges, strict=True)]})
        prog = self.progress(fresh=self.follow is not None)  # follow: the last unit was published since
        if b <= int(prog.meta.get("staged_batch", -1)):
            log.info("%s: micro-batch %d was staged by a committed unit; skipped", self.pipeline, b)
        else:
            maybe_fail(f"{self.pipeline}.ingest.planned")
            unit = prog.last_unit + 1
            batch = self._direct_batch(ranges, files, per_source, payload_text, casts)
            info = self._stage(batch, b, BatchInfo(unit, b, prog, ident), prepare, follow=self.follow is not None)
            totals["batches"].append(b)
            for k in ("rows", "staged", "quarantined"):
                totals[k] += info[k]
            if self.follow is not None and info["staged"]:
                self.follow.after_unit(unit)
                totals["units"].append(unit)
            maybe_fail(f"{self.pipeline}.ingest.staged")
        self._direct_write("commits", b, {})
        return kind

    def _direct_batch(self, ranges: Sequence[delta_source.Range], files_of: Sequence[Sequence[str]],
                      per_source: Sequence[dict[str, Callable[[T.DataType], bool]]], payload_text: str,
                      casts: dict[str, str]) -> DataFrame:
        """The rows the versions of ``ranges`` appended (``files_of``: their files, per source),
        shaped as the streaming query shapes them."""
        t0 = time.perf_counter()
        parts = []
        for k, (src, r) in enumerate(zip(self.sources, ranges, strict=True)):
            loc = local_path(src)
            assert loc is not None
            schema = delta_source.spark_schema(loc, max(r.end, 0))
            files = files_of[k]
            got = self._shape_arrow(k, src, files, schema, per_source[k], payload_text, casts)
            if got is not None:
                parts.append(got)
                continue
            df = (self.spark.read.schema(schema).parquet(*files) if files
                  else self.spark.createDataFrame([], schema))
            parts.append(self._shape(k, src, df, schema, per_source[k], payload_text, casts))
        if all(isinstance(p, pa.Table) for p in parts):
            self._direct_read_s = time.perf_counter() - t0
            return pa.concat_tables(parts, promote_options="default")  # type: ignore[return-value]
        from simjoin.spark.session import arrow_frame

        parts = [arrow_frame(self.spark, p) if isinstance(p, pa.Table) else p for p in parts]
        out = parts[0]
        for p in parts[1:]:
            out = out.unionByName(p, allowMissingColumns=True)
        return out

    #: payload casts that Arrow makes as Spark does (``_shape_arrow``)
    _ARROW_CASTS: ClassVar[dict[str, Any]] = {
        "array<double>": pa.list_(pa.float64()), "double": pa.float64(), "bigint": pa.int64(), "long": pa.int64()}

    def _shape_arrow(self, k: int, path: str, files: Sequence[str], schema: T.StructType,
                     payload: dict[str, Callable[[T.DataType], bool]], payload_text: str,
                     casts: dict[str, str]) -> Any:
        """:meth:`_shape` on the files read with pyarrow in this process (no Spark job), as a
        pyarrow Table in the schema Spark's ``toArrow`` gives; None when Spark must shape them:
        the tables are not staged through the driver, ``ts`` is not a timestamp (a string or a
        number is parsed by Spark's rules), or a payload cast is not one Arrow makes the same way."""
        import pyarrow.parquet as pq

        stream_schema_check(schema, path, self.ts_unit, payload, payload_text)
        if not self.local_tables() or not isinstance(schema["ts"].dataType, (T.TimestampType, T.TimestampNTZType)):
            return None
        if isinstance(schema["ts"].dataType, T.TimestampNTZType) and self.ts_zone.upper() not in ("UTC", "Z", "GMT",
                                                                                                   "ETC/UTC"):
            return None  # wall time in another zone: Spark's rules for DST gaps and overlaps decide
        want: dict[str, Any] = {"id": pa.int64(), "ts": pa.timestamp("us", tz="UTC")}
        for c in payload:
            if c in casts:
                if casts[c] not in self._ARROW_CASTS:
                    return None
                want[c] = self._ARROW_CASTS[casts[c]]
            else:
                return None
        pieces = []
        for f in files:
            t = pq.read_table(f, columns=list(want))
            ts = t.column("ts")
            if pa.types.is_timestamp(ts.type) and ts.type.tz is None:  # NTZ or INT96: UTC wall time
                t = t.set_column(t.schema.get_field_index("ts"), "ts", ts.cast(pa.timestamp("us")).cast(
                    pa.timestamp("us", tz="UTC")))
            pieces.append(pa.Table.from_arrays([t.column(c).cast(typ) for c, typ in want.items()],
                                               names=list(want)))
        t = (pa.concat_tables(pieces) if pieces
             else pa.Table.from_pylist([], schema=pa.schema(list(want.items()))))
        us = t.column("ts").cast(pa.int64())
        cols = {"id": t.column("id"), "ts": t.column("ts"), "ts_raw": _ts_strings(us)}
        cols.update({c: t.column(c) for c in payload})
        cols["side"] = pa.array(np.full(t.num_rows, k, np.int8))
        return pa.Table.from_arrays(list(cols.values()), names=list(cols))

    def _direct_dir(self, kind: str) -> str:
        base = local_path(self.tables.checkpoint)
        assert base is not None
        return os.path.join(base, kind)

    def _direct_last(self, kind: str) -> int:
        d = self._direct_dir(kind)
        ids = [int(n) for n in os.listdir(d) if n.isdigit()] if os.path.isdir(d) else []
        return max(ids, default=-1)

    def _direct_ranges(self, b: int) -> list[delta_source.Range]:
        with open(os.path.join(self._direct_dir("offsets"), str(b))) as fh:
            got = json.load(fh)["sources"]
        if [g["path"] for g in got] != list(self.sources):
            raise CheckpointMismatch(f"checkpoint {self.tables.checkpoint} read the inputs {[g['path'] for g in got]}, "
                                     f"not {list(self.sources)}: {self._reset_hint()}")
        return [delta_source.Range(int(g["start"]), int(g["end"])) for g in got]

    def _direct_write(self, kind: str, b: int, content: dict[str, Any]) -> None:
        d = self._direct_dir(kind)
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, f".{b}.tmp")
        with open(tmp, "w") as fh:
            fh.write(json.dumps(content))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, os.path.join(d, str(b)))

    def local_tables(self) -> bool:
        """Whether a batch may be staged through the driver (``_stage_local``): the records and
        quarantine tables are local, and ``SIMJOIN_LOCAL_INGEST`` is not 0."""
        if os.environ.get("SIMJOIN_LOCAL_INGEST", "1") == "0":
            return False
        return local_path(self.tables.records) is not None and local_path(self.tables.quarantine) is not None

    def _ingest_landing(self, stream: DataFrame, stage: Callable[[DataFrame, int], None], prog: Progress,
                        ident: str, max_files_per_trigger: int | None) -> None:
        """The query appends what arrived to ``<output>_work/landing`` (Delta's exactly-once sink,
        no Python in the query); then every landing commit not staged yet is staged as one
        micro-batch whose id is its commit version, read back through the change data feed.
        ``landed`` in the progress meta is the last commit a committed unit staged."""
        landing = self.tables.work("landing")
        self.spark.conf.set("spark.databricks.delta.properties.defaults.enableChangeDataFeed", "true")
        writer = stream.writeStream.format("delta").option(
            "checkpointLocation", delta._abs(self.tables.checkpoint)).trigger(availableNow=True)
        if max_files_per_trigger:
            writer = writer.option("maxFilesPerTrigger", int(max_files_per_trigger))
        q = writer.queryName(f"simjoin_{self.pipeline}_{ident[:8]}").start(delta._abs(landing))
        q.awaitTermination()
        maybe_fail(f"{self.pipeline}.ingest.landed")
        if not delta.table_exists(self.spark, landing):
            return
        last = delta.latest_version(self.spark, landing)
        for version in range(int(prog.meta.get("landed", -1)) + 1, last + 1):
            batch = (self.spark.read.format("delta").option("readChangeFeed", "true")
                     .option("startingVersion", version).option("endingVersion", version).load(delta._abs(landing))
                     .where(F.col("_change_type") == "insert")
                     .drop("_change_type", "_commit_version", "_commit_timestamp"))
            stage(batch, version)

    def seen(self, info: BatchInfo, live: DataFrame | None) -> DataFrame | None:
        """(side, id) a new row may not repeat, with a true ``_seen`` column: ``live`` (the
        pipeline's live state, as (side, id)) and the rows staged earlier in this unit; None if neither."""
        if info.local:
            return self._seen_local(info, live)
        parts = [] if live is None else [live.select("side", "id")]
        if delta.table_exists(self.spark, self.tables.records):
            staged = delta.read_table(self.spark, self.tables.records)
            parts.append(staged.where((F.col("unit") == info.unit) & (F.col("batch_id") < info.batch_id))
                         .select("side", "id"))
        if not parts:
            return None
        out = parts[0]
        for p in parts[1:]:
            out = out.unionByName(p)
        return out.distinct().withColumn("_seen", F.lit(True))

    def _seen_local(self, info: BatchInfo, live: Any) -> DataFrame | None:
        """``seen`` for a batch staged through the driver: :meth:`seen_keys` as one small local
        DataFrame (broadcast into the batch's job), or None when there is nothing to compare with."""
        from simjoin.spark.session import arrow_frame

        keys = self.seen_keys(info, live)
        return None if keys is None else arrow_frame(self.spark, keys).withColumn("_seen", F.lit(True))

    def seen_keys(self, info: BatchInfo, live: Any) -> Any:
        """``seen`` as a pyarrow Table of distinct (side, id), or None: ``live`` (a Table or a
        DataFrame of the pipeline's live state) and the unit's earlier rows, read with deltalake."""
        if live is not None and not isinstance(live, pa.Table):
            live = live.select("side", "id").toArrow()
        parts = [] if live is None else [live.select(["side", "id"])]
        try:
            earlier = delta.read_arrow(self.tables.records, [("unit", "=", int(info.unit)),
                                                             ("batch_id", "<", int(info.batch_id))], ["side", "id"])
        except delta.NotLocal:
            earlier = delta.read_table(self.spark, self.tables.records).where(
                (F.col("unit") == info.unit) & (F.col("batch_id") < info.batch_id)).select("side", "id").toArrow()
        if earlier is not None:
            parts.append(earlier)
        want = pa.schema([("side", pa.int8()), ("id", pa.int64())])
        parts = [t.cast(want) for t in parts if t.num_rows]
        if not parts:
            return None
        return pa.concat_tables(parts).group_by(["side", "id"]).aggregate([])

    def _stage(self, batch: DataFrame, batch_id: int, info: BatchInfo, prepare: Prepare,
               follow: bool = False) -> dict[str, int]:
        """One micro-batch staged. Through the driver when the tables are local: with the
        pipeline's Arrow hook entirely (:meth:`_stage_arrow`), else in follow mode with one Spark
        job (``_stage_batch(local=True)``); otherwise by Spark's jobs and writes."""
        if self.local_tables():
            pa_prep = getattr(self, "_prepare_arrow", None)
            if pa_prep is not None:
                return self._stage_arrow(batch, batch_id, info, pa_prep)
            if follow:
                return self._stage_batch(batch, batch_id, info, prepare, local=True)
        return self._stage_batch(batch, batch_id, info, prepare)

    def _stage_arrow(self, batch: DataFrame, batch_id: int, info: BatchInfo, prepare: PrepareArrow) -> dict[str, int]:
        """``_stage_batch`` through the driver: the batch is read in ONE Spark job (``toArrow``),
        the engine's rules and the pipeline's Arrow hook check it here (the twins of the Column
        rules: same rows, same reasons), and the staged and quarantined rows are committed with
        ``deltalake`` under the same txn ids - no cache, count or write jobs (a second each on 2 cores)."""
        maybe_fail(f"{self.pipeline}.ingest.batch")
        t0 = time.perf_counter()
        raw = batch if isinstance(batch, pa.Table) else batch.toArrow()
        if isinstance(batch, pa.Table):  # a direct batch, read with pyarrow already: that read's time
            t_job = self._direct_read_s
            t0 -= t_job
        else:
            t_job = time.perf_counter() - t0
        now = dt.datetime.now(UTC)
        reason = self._engine_reasons(raw, now)
        ok = np.array([r == "" for r in reason], bool)
        good = raw.filter(pa.array(ok))
        bad = raw.filter(pa.array(~ok)).append_column("reason", pa.array([r for r in reason if r], pa.string()))
        prep = prepare(good, BatchInfo(info.unit, info.batch_id, info.progress, info.checkpoint_id, local=True))
        batch_key = f"{info.checkpoint_id}-{batch_id}"
        payload = [c for c in raw.schema.names if c not in ("id", "ts", "ts_raw", "side")]
        q_parts = [bad] + ([prep.bad] if prep.bad is not None and prep.bad.num_rows else [])
        q = pa.concat_tables([self._to_quarantine(x, payload, info.unit, batch_key) for x in q_parts])
        st: Any = prep.staged
        n = int(st.num_rows)
        st = (st.append_column("unit", pa.array(np.full(n, info.unit, np.int64)))
              .append_column("batch_id", pa.array(np.full(n, batch_id, np.int64)))
              .append_column("meta", pa.array([json.dumps(prep.meta, sort_keys=True)] * n, pa.string()))
              .append_column("fingerprint", pa.array([self.fingerprint] * n, pa.string()))
              .append_column("checkpoint_id", pa.array([info.checkpoint_id] * n, pa.string())))
        return self._commit_staged(st, q, raw.num_rows, batch_id, batch_key, info, t_job, t0)

    def _engine_reasons(self, raw: Any, now: dt.datetime) -> list[str]:
        """The engine's row rules on Arrow (first match, as ``_stage_batch``'s ``when`` chain)."""
        n = raw.num_rows
        id_null = np.asarray(raw.column("id").is_null().to_numpy(zero_copy_only=False), bool)
        raw_null = np.asarray(raw.column("ts_raw").is_null().to_numpy(zero_copy_only=False), bool)
        ts = raw.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        ts_null = np.asarray(ts.is_null().to_numpy(zero_copy_only=False), bool)
        ts_us = np.asarray(ts.fill_null(0).to_numpy(), np.int64)
        bound = epoch_us(now) + round(self.max_future_s * 1e6)
        out = [""] * n
        unit = f" (ts unit {self.ts_unit})" if self.ts_unit else ""
        for i in np.flatnonzero(id_null | raw_null | ts_null | (~ts_null & (ts_us > bound))).tolist():
            if id_null[i]:
                out[i] = "null id"
            elif raw_null[i]:
                out[i] = "null ts"
            elif ts_null[i]:
                out[i] = f"unreadable ts {raw.column('ts_raw')[i].as_py()}{unit}"
            else:
                out[i] = (f"future: ts {spark_ts_string(int(ts_us[i]))} is more than {self.max_future_s:g}s past the "
                          f"current time {now.isoformat()}")
        return out

    def _to_quarantine(self, t: Any, payload: Sequence[str], unit: int, batch_key: str) -> Any:
        """Rows with ``reason`` in ``QUARANTINE_SCHEMA`` (the payload as JSON in ``row``)."""
        n = t.num_rows
        sch = delta.arrow_schema(QUARANTINE_SCHEMA)
        rows = [json_row({c: t.column(c)[i].as_py() for c in payload}) if payload else None for i in range(n)]
        cols = {"side": t.column("side"), "id": t.column("id"), "ts": t.column("ts"), "ts_raw": t.column("ts_raw"),
                "row": pa.array(rows, pa.string()), "reason": t.column("reason"),
                "stage": pa.array(["ingest"] * n, pa.string()), "unit": pa.array(np.full(n, unit, np.int64)),
                "batch": pa.array([batch_key] * n, pa.string())}
        return pa.Table.from_arrays([cols[f.name].cast(f.type) for f in sch], schema=sch)

    def _commit_staged(self, st: Any, q: Any, n_rows: int, batch_id: int, batch_key: str, info: BatchInfo,
                       t_job: float, t0: float) -> dict[str, int]:
        """The staged rows and the quarantined ones of a batch checked in the driver: deltalake
        commits under the txn ids ``_stage_batch`` uses."""
        n_staged, n_bad = st.num_rows, q.num_rows
        if n_bad:
            delta.overwrite_rows(self.spark, q, QUARANTINE_SCHEMA, self.tables.quarantine, {"batch": batch_key})
        elif delta.table_exists(self.spark, self.tables.quarantine):  # a replay's earlier rows go
            delta.overwrite_rows(self.spark, [], QUARANTINE_SCHEMA, self.tables.quarantine, {"batch": batch_key})
        # an empty (or all-quarantined) batch still creates the records table (see _stage_batch)
        if n_staged or not delta.table_exists(self.spark, self.tables.records):
            delta.append_rows(self.spark, st, "", self.tables.records, self.write_id("records", info.checkpoint_id),
                              batch_id)
        log.info("%s ingest micro-batch %d -> unit %d: %d rows, %d staged, %d quarantined (through the driver: "
                 "read %.2fs, checked and committed %.2fs)", self.pipeline, batch_id, info.unit, n_rows, n_staged,
                 n_bad, t_job, time.perf_counter() - t0 - t_job)
        return {"rows": n_rows, "staged": n_staged, "quarantined": n_bad}

    def _stage_batch(self, batch: DataFrame, batch_id: int, info: BatchInfo, prepare: Prepare,
                     local: bool = False) -> dict[str, int]:
        """Stage one micro-batch: rules, quarantine, the staged rows. ``local`` (follow mode): the
        batch is computed in ONE Spark job into the driver, and its staged and quarantined rows
        are committed with ``deltalake`` - the same rules, tables and txn ids, without the
        count and write jobs (a second each on 2 cores)."""
        maybe_fail(f"{self.pipeline}.ingest.batch")
        now = dt.datetime.now(UTC)
        bound = now + dt.timedelta(seconds=self.max_future_s)
        reason = (
            F.when(F.col("id").isNull(), F.lit("null id"))
            .when(F.col("ts_raw").isNull(), F.lit("null ts"))
            .when(F.col("ts").isNull(), F.concat(F.lit("unreadable ts "), F.col("ts_raw"),
                                                   F.lit(f" (ts unit {self.ts_unit})" if self.ts_unit else "")))
            .when(F.col("ts") > F.lit(bound), F.concat(
                F.lit("future: ts "), F.col("ts").cast("string"),
                F.lit(f" is more than {self.max_future_s:g}s past the current time {now.isoformat()}")))
            .otherwise(F.lit("")))
        tagged = batch.withColumn("reason", reason)
        if not local:
            tagged = tagged.cache()
            n_rows = tagged.count()
        good = tagged.where(F.col("reason") == "").drop("reason")
        bad = tagged.where(F.col("reason") != "")
        if local:
            info = BatchInfo(info.unit, info.batch_id, info.progress, info.checkpoint_id, local=True)
        prep = prepare(good, info)
        quarantine = [bad]
        if prep.bad is not None:
            quarantine.append(prep.bad)
        batch_key = f"{info.checkpoint_id}-{batch_id}"
        payload = [c for c in batch.columns if c not in ("id", "ts", "ts_raw", "side")]

        def to_q(df: DataFrame) -> DataFrame:
            return df.select(F.col("side").cast("byte"), F.col("id").cast("long"), F.col("ts").cast("timestamp"),
                             F.col("ts_raw").cast("string"),
                             F.to_json(F.struct(*[F.col(c) for c in payload])).alias("row") if payload
                             else F.lit(None).cast("string").alias("row"),
                             "reason", F.lit("ingest").alias("stage"), F.lit(info.unit).cast("long").alias("unit"),
                             F.lit(batch_key).alias("batch"))

        qdf = to_q(quarantine[0])
        for extra in quarantine[1:]:
            qdf = qdf.unionByName(to_q(extra))
        staged = (prep.staged.withColumn("unit", F.lit(info.unit).cast("long"))
                  .withColumn("batch_id", F.lit(batch_id).cast("long"))
                  .withColumn("meta", F.lit(json.dumps(prep.meta, sort_keys=True)))
                  .withColumn("fingerprint", F.lit(self.fingerprint))
                  .withColumn("checkpoint_id", F.lit(info.checkpoint_id)))
        if local:
            return self._stage_local(tagged, staged, qdf, batch_id, batch_key, info)
        qdf = qdf.cache()
        staged = staged.cache()
        # one job counts both (and fills both caches)
        n = {r["k"]: r["count"] for r in qdf.select(F.lit(0).alias("k")).unionByName(
            staged.select(F.lit(1).alias("k"))).groupBy("k").count().collect()}
        n_bad, n_staged = int(n.get(0, 0)), int(n.get(1, 0))
        if n_bad:
            delta.overwrite_partition(qdf, self.tables.quarantine, {"batch": batch_key})
        elif delta.table_exists(self.spark, self.tables.quarantine):  # a replay's earlier rows go
            delta.overwrite_rows(self.spark, [], QUARANTINE_SCHEMA, self.tables.quarantine, {"batch": batch_key})
        # an empty (or all-quarantined) batch still creates the records table: the checkpoint has
        # consumed it, and verify() must not take a missing table for lost input
        if n_staged or not delta.table_exists(self.spark, self.tables.records):
            delta.append_idempotent(staged, self.tables.records, self.write_id("records", info.checkpoint_id),
                                    batch_id)
        staged.unpersist()
        qdf.unpersist()
        tagged.unpersist()
        log.info("%s ingest micro-batch %d -> unit %d: %d rows, %d staged, %d quarantined", self.pipeline,
                 batch_id, info.unit, n_rows, n_staged, n_bad)
        return {"rows": n_rows, "staged": n_staged, "quarantined": n_bad}

    def _stage_local(self, tagged: DataFrame, staged: DataFrame, qdf: DataFrame, batch_id: int, batch_key: str,
                     info: BatchInfo) -> dict[str, int]:
        """``_stage_batch`` through the driver for a pipeline without an Arrow hook: staged rows,
        quarantined rows and the batch's row count in one job (``toArrow``), then the commits."""
        s_cols, q_cols = staged.columns, qdf.columns
        both = (staged.select(F.lit(0).cast("byte").alias("_k"), *s_cols)
                .unionByName(qdf.select(F.lit(1).cast("byte").alias("_k"), *q_cols), allowMissingColumns=True)
                .unionByName(tagged.groupBy().count().select(F.lit(2).cast("byte").alias("_k"),
                                                              F.col("count").alias("_n")), allowMissingColumns=True))
        t0 = time.perf_counter()
        t = both.toArrow()
        t_job = time.perf_counter() - t0
        k = t.column("_k").to_numpy()
        st = t.filter(pa.array(k == 0)).select(s_cols)
        q = t.filter(pa.array(k == 1)).select(q_cols)
        n_rows = int(t.filter(pa.array(k == 2)).column("_n")[0].as_py())
        return self._commit_staged(st, q, n_rows, batch_id, batch_key, info, t_job, t0)

    # ----------------------------------------------------------------- publish

    def _marker(self, unit: int) -> str:
        base = local_path(self.tables.work_dir)
        assert base is not None
        return os.path.join(base, "_publishing", f"{self.checkpoint_id()}-{unit}")

    def publishing(self, unit: int) -> bool:
        """Whether publishing of ``unit`` began (its gate passed before)."""
        return os.path.exists(self._marker(unit))

    def publish(self, unit: Unit, pieces: Sequence[tuple[str, DataFrame | delta.Files | Any, str]],
                meta: dict[str, Any] | None = None,
                options: Mapping[str, Mapping[str, str]] | None = None,
                small: Collection[str] = ("stats",)) -> dict[str, Any]:
        """Append each ``(piece, df, path)`` once per (checkpoint, unit), then commit the unit. ``df``
        may be ``delta.Files``: Parquet files tasks already wrote into ``path``, committed as they are.
        ``df`` may also be a pyarrow Table (rows computed in this process, e.g. by a unit run in the
        driver): one ``delta.append_rows`` commit.
        ``options``: extra Delta write options per piece (e.g. a commit's ``userMetadata``).
        ``small``: pieces of a few rows (stats), collected and committed with ``delta.append_rows``.
        Only called after the unit's gate passed."""
        marker = self._marker(unit.unit)
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        open(marker, "w").close()
        self.own([path for _, _, path in pieces])  # a table created now is recorded first (--reset)
        # the pieces go to different tables: append them as concurrent Spark jobs
        from concurrent.futures import ThreadPoolExecutor

        def append(piece: str, df: DataFrame | delta.Files | Any, path: str) -> None:
            app, opts = self.write_id(piece, unit.checkpoint_id), dict((options or {}).get(piece) or {})
            if isinstance(df, pa.Table):  # rows computed in this process: one deltalake commit
                metadata = opts.pop("userMetadata", None)
                merge = str(opts.pop("mergeSchema", "false")).lower() == "true"
                if opts:
                    raise ValueError(f"publish: options {sorted(opts)} of the piece {piece} are not supported")
                delta.append_rows(self.spark, df, "", path, app, unit.unit, metadata=metadata, merge_schema=merge)
                return
            if isinstance(df, delta.Files):  # files the tasks wrote into the table's directory: one commit
                if opts:
                    raise ValueError(f"publish: options {sorted(opts)} of the files piece {piece} are not supported")
                delta.append_files(self.spark, df, path, app, unit.unit)
                return
            if piece not in small:
                delta.append_idempotent(df, path, app, unit.unit, None, opts)
                return
            # a few rows: collected, then one deltalake commit instead of Spark's small jobs
            merge = str(opts.pop("mergeSchema", "false")).lower() == "true"
            metadata = opts.pop("userMetadata", None)
            if opts:
                raise ValueError(f"publish: options {sorted(opts)} of the small piece {piece} are not supported")
            delta.append_rows(self.spark, df.toArrow(), "", path, app, unit.unit, metadata=metadata,
                              merge_schema=merge)

        with ThreadPoolExecutor(max(1, min(8, len(pieces) + 1)), thread_name_prefix="publish") as pool:
            futures = [pool.submit(append, piece, df, path) for piece, df, path in pieces]
            # what the progress row needs is read beside the appends (the lock keeps it unchanged)
            summary = pool.submit(_records_summary, unit.records)
            prog = self.progress()
        for f in futures:
            f.result()
        got = summary.result()
        maybe_fail(f"{self.pipeline}.publish.mid")
        # a lone outlier does not move the watermark: a stream's committed max ts advances to at most
        # the publish time + WATERMARK_SKEW (the outlier itself is joined and kept like any row)
        cap = dt.datetime.now(UTC).replace(tzinfo=None) + WATERMARK_SKEW
        marks = {int(r["side"]): min(_naive_utc(r["m"]), cap) for r in got}
        for s, mt in prog.max_ts.items():
            marks[s] = max(marks[s], mt) if s in marks else mt
        staged_meta = json.loads(got[0]["meta"]) if got and got[0]["meta"] else {}
        meta_all = {**prog.meta, **staged_meta, **(meta or {})}

        if self.ingest_mode() == "landing":  # the landing commits staged so far
            meta_all["landed"] = max([int(prog.meta.get("landed", -1))] + [int(r["b"]) for r in got])
        else:  # the stream's micro-batches staged so far (a replay of one of them is skipped)
            meta_all["staged_batch"] = max([int(prog.meta.get("staged_batch", -1))] + [int(r["b"]) for r in got])
        rows = [(unit.unit, int(s), mt, self.fingerprint, unit.checkpoint_id, json.dumps(meta_all, sort_keys=True))
                for s, mt in sorted(marks.items())]
        # the commit that publishes the unit says so (its time is the unit's publish time)
        delta.append_rows(self.spark, rows, PROGRESS_SCHEMA, self.tables.progress,
                          self.write_id("progress", unit.checkpoint_id), unit.unit,
                          metadata=json.dumps({"unit": unit.unit}))
        self._progress = None
        now = dt.datetime.now(UTC)
        wm = min(marks.values()) if len(marks) == len(self.sources) else None
        # housekeeping: committed units' staged rows are no longer needed (readers skip them by
        # unit; a DELETE costs a second or two, so it runs every few units)
        if unit.unit % RECORDS_HOUSEKEEPING_EVERY == RECORDS_HOUSEKEEPING_EVERY - 1:
            self.delete(self.tables.records, f"unit <= {unit.unit}")
            landing = self.tables.work("landing")
            if "landed" in meta_all and delta.table_exists(self.spark, landing) \
                    and delta.latest_version(self.spark, landing) == meta_all["landed"]:
                self.delete(landing, "true")  # every landed commit is staged and committed
        log.info("%s: unit %d published (%s), watermark %s", self.pipeline, unit.unit,
                 ", ".join(p for p, _, _ in pieces), wm)
        if got:  # event time to result: the newest and the oldest record of the unit
            lo = aware(min(r["lo"] for r in got))
            hi = aware(max(r["m"] for r in got))
            log.info("%s: unit %d: %d records, published %.1fs after its newest and %.1fs after its oldest "
                     "record's ts", self.pipeline, unit.unit, sum(int(r["n"]) for r in got),
                     (now - hi).total_seconds(), (now - lo).total_seconds())
        return {"unit": unit.unit, "watermark": None if wm is None else wm.isoformat(),
                "watermark_ts": wm, "previous_watermark_ts": prog.watermark}

    def delete(self, path: str, cond: str) -> None:
        delta.delete(self.spark, path, cond)

    def expire(self, path: str, watermark: dt.datetime | None, column: str = "window_end",
               previous: dt.datetime | None = None, windows: tuple[float, float] | None = None) -> None:
        """Drop state rows whose window ended at or before the watermark. With ``previous`` (the
        watermark before this unit) and ``windows`` (size, slide in seconds of epoch-aligned
        windows), skip the DELETE when no window ended between the two watermarks: rows of
        windows that ended earlier were dropped then (or are never read again)."""
        if watermark is None:
            return
        if previous is not None and windows is not None:
            size_us, slide_us = (round(x * 1e6) for x in windows)

            def closed(t: dt.datetime) -> int:
                return (epoch_us(t) - size_us) // slide_us

            if closed(previous) == closed(watermark):
                return
        self.delete(path, f"{column} <= '{aware(watermark).astimezone(UTC).isoformat()}'")


def assign_windows(df: DataFrame, size_s: float, slide_s: float | None = None, ts_col: str = "ts") -> DataFrame:
    """Time-based tumbling (``slide`` None or equal to ``size``) or sliding windows on ``ts``.

    Adds ``window_start`` and ``window_end``; with sliding windows a row appears once per window
    that contains it (start <= ts < end).
    """
    if size_s <= 0:
        raise ValueError(f"invalid window size {size_s}s: allowed > 0")
    slide_s = slide_s or size_s
    if not 0 < slide_s <= size_s:
        raise ValueError(f"invalid slide {slide_s}s: allowed 0 < slide <= window ({size_s}s)")
    w = F.window(F.col(ts_col), f"{round(size_s * 1e6)} microseconds", f"{round(slide_s * 1e6)} microseconds")
    return df.withColumn("_w", w).select(
        "*", F.col("_w.start").alias("window_start"), F.col("_w.end").alias("window_end")).drop("_w")


def assign_count_windows(df: DataFrame, size: int, slide: int | None = None, order: Sequence[str] = ("ts", "id"),
                         offset: int = 0) -> DataFrame:
    """Count-based windows: the i-th row (by ``order``, counting from ``offset``) belongs to
    windows k with k*slide <= i < k*slide + size. Adds ``window_id`` (and ``row_index``)."""
    if size < 1:
        raise ValueError(f"invalid count window {size}: allowed >= 1")
    slide = slide or size
    if not 1 <= slide <= size:
        raise ValueError(f"invalid count slide {slide}: allowed 1 <= slide <= window ({size})")
    from pyspark.sql import Window

    idx = F.row_number().over(Window.orderBy(*order)) - 1 + F.lit(offset)
    d = df.withColumn("row_index", idx)
    first = F.greatest(F.lit(0), F.floor((F.col("row_index") - size) / slide) + 1)
    last = F.floor(F.col("row_index") / slide)
    return d.withColumn("window_id", F.explode(F.sequence(first.cast("long"), last.cast("long"))))
