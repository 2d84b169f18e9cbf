"""Ingest rules: the stream schema check and the ts parse every source row goes through."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

#: Spark types a payload column may have
INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
NUMERIC = (*INTEGRAL, T.FloatType, T.DoubleType, T.DecimalType)

#: the Spark types each payload kind of ``simjoin.quality.rows.InputSpec`` allows
KIND_TYPES: dict[str, Callable[[T.DataType], bool]] = {
    "numeric": lambda t: isinstance(t, NUMERIC),
    "integer": lambda t: isinstance(t, INTEGRAL),
    "vector": lambda t: isinstance(t, T.ArrayType) and isinstance(t.elementType, NUMERIC),
    "boolean": lambda t: isinstance(t, T.BooleanType),
}


def missing_stream(path: str, k: int) -> FileNotFoundError:
    """The one-line refusal of a stream input that holds no Delta table: its flag (``--left``,
    ``--right``; a DAG's param of that name), the path, and what is allowed."""
    return FileNotFoundError(f"no Delta table at {path!r} (--{('left', 'right')[min(k, 1)]}): allowed the path of a "
                             "Delta table (written by a producer, or by simjoin generate)")


def kind_checks(kinds: Mapping[str, str]) -> dict[str, Callable[[T.DataType], bool]]:
    """A source's payload (column -> kind) as the schema check's column -> type test."""
    return {c: KIND_TYPES[k] for c, k in kinds.items()}


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


def ts_expr(dtype: T.DataType, ts_unit: str | None, ts_zone: str = "UTC") -> Column:
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

