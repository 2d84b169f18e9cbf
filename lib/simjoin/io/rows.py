"""Driver-side rows as Arrow: a flat Spark DDL schema (``"a int, b array<int>, t timestamp"``) as
an Arrow schema, and a few rows of it (tuples in its order) as a pyarrow Table. Pure pyarrow: the
stages build their small bookkeeping tables (stats, decisions, plans) with it on either executor."""

from __future__ import annotations

import datetime as dt
from typing import Any

_ARROW_TYPES = {"string": "string", "byte": "int8", "tinyint": "int8", "short": "int16", "smallint": "int16",
                "int": "int32", "integer": "int32", "long": "int64", "bigint": "int64",
                "double": "float64", "float": "float32", "boolean": "bool_", "binary": "binary", "date": "date32"}


def _arrow_type(ddl: str) -> Any:
    import pyarrow as pa

    ddl = ddl.strip().lower()
    if ddl.startswith("array<") and ddl.endswith(">"):
        return pa.list_(_arrow_type(ddl[6:-1]))
    if ddl == "timestamp":
        return pa.timestamp("us", tz="UTC")  # Spark's timestamp: an instant, stored in UTC
    if ddl not in _ARROW_TYPES:
        raise ValueError(f"no Arrow type for the Spark type {ddl!r}")
    return getattr(pa, _ARROW_TYPES[ddl])()


def arrow_schema(ddl: str) -> Any:
    """``"a int, b array<int>, t timestamp"`` as an Arrow schema (flat Spark DDL: no maps or structs)."""
    import pyarrow as pa

    return pa.schema([(name, _arrow_type(typ)) for name, typ in (f.strip().split(None, 1) for f in ddl.split(","))])


def rows_table(rows: Any, schema: str) -> Any:
    """Driver-side rows (tuples in the DDL ``schema``'s order) as a pyarrow Table of that schema (an
    Arrow table is returned as it is)."""
    import pyarrow as pa

    if isinstance(rows, pa.Table):
        return rows
    sch = arrow_schema(schema)
    rows = list(rows)
    for r in rows:
        if len(r) != len(sch):
            raise ValueError(f"a row of {len(r)} values for the {len(sch)} columns of {schema!r}: {tuple(r)!r}")
    cols = list(zip(*rows)) if rows else [() for _ in sch]
    # timestamps as integer microseconds: pyarrow converting datetime objects imports pandas (0.3 s)
    return pa.Table.from_arrays([pa.array([_micros(v) for v in c], pa.int64()).cast(f.type)
                                 if pa.types.is_timestamp(f.type) else pa.array(c, f.type)
                                 for f, c in zip(sch, cols)], schema=sch)


_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=dt.UTC)


def _micros(v: Any) -> int | None:
    """A datetime as integer microseconds since the epoch (a naive one read as UTC, as pyarrow does)."""
    if v is None or isinstance(v, int):
        return v
    return (v - (_EPOCH if v.tzinfo is None else _EPOCH_UTC)) // dt.timedelta(microseconds=1)


def aggregate_table(t: Any, keys: Any, aggs: Any) -> Any:
    """Table ``t`` grouped by ``keys`` (nulls group together), each ``column -> sum|max`` of
    ``aggs`` over its group (a sum of sums and a max of maxes are the same: how the executors
    aggregate each partition first)."""
    got = t.group_by(list(keys), use_threads=False).aggregate([(c, f) for c, f in aggs.items()])
    got = got.rename_columns([c.rsplit("_", 1)[0] if c not in keys else c for c in got.column_names])
    return got.select([*keys, *aggs])
