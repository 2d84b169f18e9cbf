"""``simjoin show`` and ``simjoin history`` without a JVM: a local Delta table read with
``deltalake`` (milliseconds for a small table, where Spark takes seconds to start). Rows are
printed as Spark's ``DataFrame.show`` prints them; each commit with its ``userMetadata`` (S2J's
snapshot, a stream's unit). A table ``deltalake`` cannot read (a reader feature it lacks) or one
that is not local raises :class:`Unreadable`, and the caller reads it with Spark."""

from __future__ import annotations

import datetime as dt
import json
import os
from typing import Any
from urllib.parse import unquote

__all__ = ["Unreadable", "local_table", "show", "history", "grid"]


class Unreadable(Exception):
    """``deltalake`` cannot read the table here: Spark must."""


def local_table(path: str) -> str | None:
    """The local folder of ``path`` (a path or a ``file:`` URI), or None for another URI."""
    if path.startswith("file:"):
        path = unquote(path.removeprefix("file://") if path.startswith("file://") else path.removeprefix("file:"))
    elif "://" in path:
        return None
    return os.path.abspath(os.path.expanduser(path))


def _open(path: str, version: int | None = None) -> Any:
    from deltalake import DeltaTable

    local = local_table(path)
    if local is None:
        raise Unreadable(f"{path} is not a local table")
    if not os.path.isdir(os.path.join(local, "_delta_log")):
        raise FileNotFoundError(f"no Delta table at {path!r}")
    try:
        t = DeltaTable(local)
    except Exception as e:  # a reader feature deltalake lacks
        raise Unreadable(str(e)) from e
    if version is not None:
        latest = t.version()
        if version > latest:
            raise ValueError(f"invalid --version {version}: allowed 0..{latest} (the versions of {path})")
        try:
            t = DeltaTable(local, version=version)
        except Exception as e:  # its log entry cleaned up: deltalake says it in its first line
            raise ValueError(f"cannot read {path} at version {version}: {str(e).splitlines()[0]}") from e
    return t


def show(path: str, limit: int, version: int | None = None) -> tuple[str, int, int, list[str]]:
    """The first ``limit`` rows of the table (at ``version``) as Spark's ``show`` prints them,
    the table's row count, its version and its columns."""
    t = _open(path, version)
    try:
        n, rows = _head(t, limit)
    except Exception as e:  # e.g. a version whose files a VACUUM removed
        at = f" at version {version}" if version is not None else ""
        raise ValueError(f"cannot read {path}{at}: {str(e).splitlines()[0]}") from e
    return grid(rows, n, limit), n, int(t.version()), list(rows.column_names)


def _head(t: Any, limit: int) -> tuple[int, Any]:
    """The table's row count and its first ``limit`` rows (in the order of its files). An
    unpartitioned table without deletion vectors is read file by file with ``pyarrow.parquet``
    (its count from the log's statistics), which imports in a fraction of the time
    ``pyarrow.dataset`` takes; any other table through deltalake's dataset."""
    import pyarrow as pa

    features = set(t.protocol().reader_features or [])
    if t.metadata().partition_columns or "deletionVectors" in features:
        ds = t.to_pyarrow_dataset()
        return ds.count_rows(), (ds.head(limit) if limit else ds.schema.empty_table())
    import pyarrow.parquet as pq

    schema = pa.schema(t.schema().to_arrow())
    files = [unquote(u) if "://" not in u else u for u in (x.removeprefix("file://") for x in t.file_uris())]
    # (pa.table() of it would import pandas: a second)
    counts = pa.RecordBatchReader.from_stream(t.get_add_actions(flatten=True)).read_all().column("num_records")
    n = (sum(pq.read_metadata(f).num_rows for f in files) if counts.null_count else
         int(sum(counts.to_pylist())))
    pieces, got = [], 0
    for f in files:
        if got >= limit:
            break
        part = pq.ParquetFile(f).read()  # (pq.read_table would import pandas: a second)
        cols = [_as(part.column(c), fld.type) if c in part.column_names else pa.nulls(part.num_rows, fld.type)
                for c, fld in zip(schema.names, schema, strict=True)]
        pieces.append(pa.Table.from_arrays(cols, schema=schema).slice(0, limit - got))
        got += pieces[-1].num_rows
    return n, (pa.concat_tables(pieces) if pieces else schema.empty_table())


def _as(col: Any, typ: Any) -> Any:
    return col if col.type == typ else col.cast(typ)  # (a cast imports pyarrow.compute: 0.15 s)


def history(path: str) -> list[dict[str, Any]]:
    """The table's commits still in its log, oldest first: ``version``, ``timestamp`` (UTC),
    ``operation``, ``operationParameters`` and ``userMetadata`` (None when it has none)."""
    t = _open(path)
    out = []
    for h in t.history():
        given = h.get("operationParameters") or {}
        params = {k: v if isinstance(v, str) else json.dumps(v) for k, v in given.items()}
        ts = dt.datetime.fromtimestamp(int(h["timestamp"]) / 1000, dt.UTC).replace(tzinfo=None)
        out.append({"version": int(h["version"]), "timestamp": ts, "operation": h.get("operation"),
                    "operationParameters": params, "userMetadata": h.get("userMetadata")})
    return sorted(out, key=lambda r: r["version"])


def _cell(v: Any, truncate: int, nested: bool = False) -> str:
    if v is None:
        s = "NULL"
    elif isinstance(v, bool):
        s = "true" if v else "false"
    elif isinstance(v, float):
        s = _java_double(v)
    elif isinstance(v, dt.datetime):  # UTC, the fraction without trailing zeros (as Spark prints it)
        s = (v.astimezone(dt.UTC).replace(tzinfo=None) if v.tzinfo else v).strftime("%Y-%m-%d %H:%M:%S.%f")
        s = s.rstrip("0").rstrip(".")
    elif isinstance(v, list | tuple):
        s = "[" + ", ".join(_cell(x, 0, True) for x in v) + "]"
    elif isinstance(v, dict):
        s = "{" + ", ".join(f"{_cell(k, 0, True)} -> {_cell(x, 0, True)}" for k, x in v.items()) + "}"
    elif isinstance(v, bytes):
        s = "[" + " ".join(f"{b:02X}" for b in v) + "]"
    else:
        s = str(v)
    if not nested and truncate > 0 and len(s) > truncate:
        s = s[:truncate - 3] + "..." if truncate >= 4 else s[:truncate]
    return s


def _java_double(v: float) -> str:
    """A double as Java's ``Double.toString`` writes it (what Spark's ``show`` prints):
    ``0.5``, ``1.0E-5``, ``1.2345678E7``, ``NaN``, ``Infinity``."""
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    if v == 0 or 1e-3 <= abs(v) < 1e7:
        return repr(v)
    import numpy as np

    mant, _, exp = np.format_float_scientific(v, unique=True, trim="0").partition("e")
    return f"{mant}E{int(exp)}"


def grid(t: Any, total: int, limit: int, truncate: int = 80) -> str:
    """A pyarrow Table's rows as Spark's ``show(limit, truncate)`` prints them: a boxed grid,
    cells right-aligned, and ``only showing top N rows`` when the table holds more."""
    cols = list(t.column_names)
    values = [t.column(c).to_pylist() for c in cols]
    rows = [[_cell(values[i][r], truncate) for i in range(len(cols))] for r in range(t.num_rows)]
    widths = [max(3, len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    sep = "+" + "+".join("-" * w for w in widths) + "+"

    def line(cells: list[str]) -> str:
        return "|" + "|".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) + "|"

    out = [sep, line(cols), sep, *map(line, rows), sep]
    if total > limit:
        out.append(f"only showing top {limit} row{'' if limit == 1 else 's'}")
    return "\n".join(out)
