"""What the Airflow plugin shows, read with ``deltalake`` and ``pyarrow`` (no Spark, no JVM).

Every read is bounded: a page of rows is a scan stopped after ``offset + limit`` rows (at most
:data:`MAX_SCAN_ROWS`), a count comes from the Delta log's file statistics, a download streams
at most :data:`MAX_DOWNLOAD_ROWS` rows and :func:`download_max_bytes` bytes in bounded memory.
Nothing here writes or deletes a table. Every data file read lies under its table's real path.

Paths are confined to the warehouse (``SIMJOIN_WAREHOUSE``): a path is resolved (symlinks too)
and refused unless it is a Delta table at or under the warehouse. Errors are :class:`Refused`,
one line naming the value and what is allowed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

__all__ = ["Refused", "PAGE_ROWS", "MAX_PAGE_ROWS", "MAX_SCAN_ROWS", "MAX_DOWNLOAD_ROWS", "warehouse_root",
           "confine", "relative", "find_tables", "TableCard", "card", "history", "Page", "rows", "download",
           "RunTables", "run_tables", "runs_of"]

PAGE_ROWS = 50
MAX_PAGE_ROWS = 1000
#: A page is at most this far into a table (offset + limit): deeper, filter instead.
MAX_SCAN_ROWS = 1_000_000
MAX_DOWNLOAD_ROWS = 1_000_000
DOWNLOAD_ROWS = 100_000
#: A download ends before this many bytes (``SIMJOIN_UI_DOWNLOAD_MAX_BYTES`` sets it).
DOWNLOAD_MAX_BYTES = 256 * 2**20
DOWNLOAD_BATCH_ROWS = 1024
DOWNLOAD_CHUNK_BYTES = 2 * 2**20
FOOTER_BYTES = 2**16
#: How deep under the warehouse tables are looked for (a stream's state tables are 2 levels down).
FIND_DEPTH = 4


class Refused(ValueError):
    """A request the plugin does not serve; ``status``: the HTTP status it answers with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def warehouse_root() -> str:
    """The warehouse the DAGs write to (``SIMJOIN_WAREHOUSE``), resolved."""
    from simjoin.pipeline.dags import warehouse

    return os.path.realpath(warehouse())


def _is_table(path: str) -> bool:
    return os.path.isdir(os.path.join(path, "_delta_log"))


def confine(path: str, root: str | None = None) -> str:
    """The Delta table ``path`` (absolute, or relative to the warehouse) resolved; refused unless
    it lies at or under the warehouse and is a Delta table."""
    root = root or warehouse_root()
    if not path or "\x00" in path:
        raise Refused(f"invalid table path {path!r}: allowed a Delta table under the warehouse {root}")
    p = os.path.realpath(path if os.path.isabs(path) else os.path.join(root, path))
    if os.path.commonpath([p, root]) != root:
        raise Refused(f"invalid table path {path!r}: outside the warehouse {root}", 403)
    if not _is_table(p):
        raise Refused(f"no Delta table at {path!r} (under the warehouse {root})", 404)
    return p


def relative(path: str, root: str | None = None) -> str:
    """``path`` relative to the warehouse (how pages link to a table)."""
    root = root or warehouse_root()
    return os.path.relpath(os.path.realpath(path), root)


def find_tables(root: str | None = None, depth: int = FIND_DEPTH) -> list[str]:
    """Every Delta table at most ``depth`` folders under the warehouse, sorted; a table's own
    folders are not searched further."""
    root = root or warehouse_root()
    out: list[str] = []
    if not os.path.isdir(root):
        return out
    base = root.rstrip(os.sep).count(os.sep)
    for dirpath, dirs, _ in os.walk(root):
        if _is_table(dirpath):
            out.append(dirpath)
            dirs[:] = [d for d in dirs if not d.startswith("_delta_log")]
            # a DirTables output holds its own tables (``<output>/_stats``, ``<output>/<task>``)
        if dirpath.count(os.sep) - base >= depth:
            dirs[:] = []
        dirs[:] = sorted(d for d in dirs if d != "_delta_log" and not d.startswith("."))
    return sorted(out)


def _table(path: str, version: int | None = None) -> Any:
    from deltalake import DeltaTable

    try:
        t = DeltaTable(path)
        latest = t.version()
        if version is not None and version != latest:
            if not 0 <= version <= latest:
                raise Refused(f"invalid version {version}: allowed 0..{latest} (the versions of {path})")
            t.load_as_version(version)
    except Refused:
        raise
    except Exception as e:  # a version whose log a cleanup removed, an unreadable table
        from simjoin.pipeline.runner import one_line

        raise Refused(f"cannot read {path}" + (f" at version {version}" if version is not None else "") +
                      f": {one_line(e)}", 404) from e
    return t


@dataclass
class TableCard:
    """A table at a version: what the nav and the run's page show of it."""

    path: str
    version: int
    latest: int
    rows: int
    files: int
    bytes: int
    owner: str | None
    schema: list[tuple[str, str]]
    partition_columns: list[str]
    updated: dt.datetime | None = None
    #: the output whose manifest owns the table, and the table's role there (None: no output's)
    output: str | None = None
    role: str | None = None


def card(path: str, version: int | None = None) -> TableCard:
    """Schema, row count (from the log's file statistics), files and size of the table at
    ``version`` (default the latest); no data file is read."""
    from simjoin.contracts import owner_of

    t = _table(path, version)
    latest = _table(path).version() if version is not None else t.version()
    adds = t.get_add_actions(flatten=True)
    rows = sum(int(x or 0) for x in adds.column("num_records").to_pylist()) if adds.num_rows else 0
    size = sum(int(x or 0) for x in adds.column("size_bytes").to_pylist()) if adds.num_rows else 0
    md = t.metadata()
    schema = [(f.name, str(f.type)) for f in _arrow_schema(t)]
    h = t.history(1)
    when = dt.datetime.fromtimestamp(h[0]["timestamp"] / 1000, dt.UTC) if h and "timestamp" in h[0] else None
    from simjoin.runtime.manifest import find_for

    m = find_for(path)  # the owner is the pipeline whose output's manifest owns the table, else its mark
    owner = m.pipeline if m is not None and m.pipeline else owner_of(md.description, md.configuration)
    return TableCard(path, t.version(), latest, rows, adds.num_rows, size, owner, schema, list(md.partition_columns),
                     when, m.output if m is not None else None, m.role(path) if m is not None else None)


def _arrow_schema(t: Any) -> Any:
    import pyarrow as pa

    return pa.schema(t.schema().to_arrow())


def history(path: str, limit: int = 500) -> list[dict[str, Any]]:
    """The table's commits, newest first: version, time, operation, its parameters and metrics,
    and ``userMetadata`` (an S2J snapshot, a stream's unit)."""
    out = []
    for h in _table(path).history(limit):
        ts = h.get("timestamp")
        out.append({"version": int(h.get("version", -1)),
                    "timestamp": dt.datetime.fromtimestamp(ts / 1000, dt.UTC) if ts is not None else None,
                    "operation": h.get("operation", ""), "parameters": h.get("operationParameters") or {},
                    "metrics": h.get("operationMetrics") or {}, "user_metadata": h.get("userMetadata")})
    return out


def _value(field: Any, text: str) -> Any:
    """``text`` as a value of the Arrow ``field``'s type (a filter's value); one line if not."""
    import pyarrow as pa

    t = field.type
    try:
        if pa.types.is_integer(t):
            return pa.scalar(int(text.strip()), t)
        if pa.types.is_floating(t):
            return pa.scalar(float(text.strip()), t)
        if pa.types.is_boolean(t):
            v = text.strip().lower()
            if v not in ("true", "false"):
                raise ValueError(v)
            return pa.scalar(v == "true")
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return pa.scalar(text, t)
        if pa.types.is_timestamp(t):
            d = dt.datetime.fromisoformat(text.strip())
            if t.tz is not None and d.tzinfo is None:
                d = d.replace(tzinfo=dt.UTC)
            return pa.scalar(d, t)
        if pa.types.is_date(t):
            return pa.scalar(dt.date.fromisoformat(text.strip()), t)
    except (ValueError, OverflowError, pa.ArrowInvalid) as e:
        raise Refused(f"invalid filter value {text!r} for column {field.name}: allowed a value of type {t}") from e
    raise Refused(f"invalid filter column {field.name} ({t}): allowed a column of numbers, text, booleans, "
                  "dates or timestamps")


@dataclass
class Page:
    """One page of a table's rows."""

    table: Any  # pyarrow.Table
    offset: int
    limit: int
    more: bool  # a row follows this page
    total: int | None  # every row of the selection (None: not counted, e.g. under a filter)
    note: str = ""
    columns: list[str] = field(default_factory=list)


def _inside(table: str, uri: str) -> str:
    """The real path of the data file ``uri`` (URI-encoded: a path relative to the table or
    absolute, or a ``file:`` URI, as the log names it); refused (403) unless it lies under the
    table's own real path: a commit that adds ``../other/x.parquet``, an absolute path, or a symlink out of the table
    would otherwise read another table's or any file's rows."""
    from urllib.parse import urlparse

    u = urlparse(uri)
    raw = unquote(u.path if u.scheme == "file" else uri)
    if u.scheme not in ("", "file") or "\x00" in raw:
        raise Refused(f"a data file of {table} is not a local file ({uri!r}): allowed files under the table", 403)
    real = os.path.realpath(raw if os.path.isabs(raw) else os.path.join(table, raw))
    root = os.path.realpath(table)
    if os.path.commonpath([real, root]) != root:
        import logging

        logging.getLogger("simjoin.ui").warning("refused: a data file of %s lies outside it: %r", table, uri)
        raise Refused(f"a data file of {table} lies outside the table ({uri!r}): allowed files under the "
                      "table only", 403)
    return real


def _dataset(path: str, version: int | None, files: list[dict[str, Any]] | None) -> tuple[Any, str]:
    """A pyarrow dataset over the table at ``version``, or over the data ``files`` (add actions of
    some commits, :func:`_added`); and a note on what it holds. Every file it would read is
    confined to the table (:func:`_inside`)."""
    import pyarrow.dataset as pads

    t = _table(path, version)
    if files is None:
        for raw in t.get_add_actions(flatten=True).column("path").to_pylist():  # as the log has them
            _inside(path, raw)
        return t.to_pyarrow_dataset(), ""
    real = {_inside(path, f["path"]): f for f in files}
    kept = [r for r in real if os.path.exists(r)]
    note = "" if len(kept) == len(real) else f"{len(real) - len(kept)} of its files were vacuumed since"
    if t.metadata().partition_columns:  # the table's own fragments carry the partition values
        whole = t.to_pyarrow_dataset()
        want = set(kept)
        frags = [f for f in whole.get_fragments() if os.path.realpath(os.path.join(path, f.path)) in want]
        return pads.FileSystemDataset(frags, whole.schema, whole.format, whole.filesystem), note
    return pads.dataset(kept, schema=_arrow_schema(t), format="parquet"), note


def _added(path: str, versions: list[int]) -> list[dict[str, Any]] | None:
    """The add actions the commits ``versions`` of the table made (their log files); None when a
    commit's log file is no longer there (a log cleanup)."""
    out: list[dict[str, Any]] = []
    for v in versions:
        f = os.path.join(path, "_delta_log", f"{v:020d}.json")
        try:
            with open(f) as fh:
                for line in fh:
                    a = json.loads(line).get("add") if line.strip() else None
                    if a and a.get("dataChange", True):
                        out.append(a)
        except FileNotFoundError:
            return None
    return out


def rows(path: str, version: int | None = None, offset: int = 0, limit: int = PAGE_ROWS,
         column: str | None = None, value: str | None = None, versions: list[int] | None = None) -> Page:
    """Rows ``offset .. offset + limit`` of the table at ``version`` (or only those the commits
    ``versions`` added), where ``column`` equals ``value`` when given. The scan stops after the
    page's last row."""
    import pyarrow.compute as pc

    if not 1 <= limit <= MAX_PAGE_ROWS:
        raise Refused(f"invalid limit {limit}: allowed 1..{MAX_PAGE_ROWS}")
    if offset < 0 or offset + limit > MAX_SCAN_ROWS:
        raise Refused(f"invalid offset {offset}: allowed 0..{MAX_SCAN_ROWS - limit} (filter to go further)")
    files = None
    note = ""
    if versions:
        files = _added(path, versions)
        if files is None:
            note = "the log of this run's commits was cleaned up: rows of the whole table at its last version"
            version = max(versions)
    ds, more_note = _dataset(path, version, files)
    note = "; ".join(x for x in (note, more_note) if x)
    flt = None
    if column:
        names = ds.schema.names
        if column not in names:
            raise Refused(f"invalid filter column {column!r}: allowed one of {', '.join(names)}")
        flt = pc.field(column) == _value(ds.schema.field(column), value or "")
    got = _scan(path, lambda: ds.scanner(filter=flt, **_bounded(flt, offset + limit + 1)).head(offset + limit + 1))
    page = got.slice(offset, limit)
    total = None
    if flt is None:
        if files is not None:
            total = sum(int(json.loads(f.get("stats") or "{}").get("numRecords", 0)) for f in files) if all(
                f.get("stats") for f in files) else None
        else:
            total = card(path, version).rows
    return Page(page, offset, limit, got.num_rows > offset + limit, total, note, ds.schema.names)


def _scan(path: str, read: Any) -> Any:
    """``read()``, with a data file that is missing or not Parquet refused in one line (404)."""
    import pyarrow as pa

    try:
        return read()
    except (OSError, pa.ArrowException) as e:
        from simjoin.pipeline.runner import one_line

        raise Refused(f"cannot read {path}: {one_line(e)}", 404) from e


def _bounded(flt: Any, rows: int) -> dict[str, int]:
    """Scanner options for reading the first ``rows`` rows: without a filter no batch or file is
    read ahead (a page of a 100M-row table read 16 batches of 130k rows ahead: 5-10x slower);
    a filter scans on, with Arrow's read-ahead."""
    if flt is not None:
        return {}
    return {"batch_readahead": 0, "fragment_readahead": 0, "batch_size": max(1024, min(rows, 65536))}


def download_max_bytes() -> int:
    """The byte cap of one download (``SIMJOIN_UI_DOWNLOAD_MAX_BYTES``, default 256 MiB)."""
    raw = os.environ.get("SIMJOIN_UI_DOWNLOAD_MAX_BYTES", "")
    try:
        n = int(raw) if raw else DOWNLOAD_MAX_BYTES
    except ValueError:
        raise Refused(f"invalid SIMJOIN_UI_DOWNLOAD_MAX_BYTES {raw!r}: allowed a number of bytes >= 1", 500) from None
    return max(1, n)


def download(path: str, fmt: str, version: int | None = None, column: str | None = None, value: str | None = None,
             limit: int = DOWNLOAD_ROWS, versions: list[int] | None = None,
             max_bytes: int | None = None) -> tuple[Iterator[bytes], str]:
    """At most ``limit`` rows (:func:`rows`' selection) as CSV or Parquet, streamed: the chunks
    and the media type. Memory stays bounded (batches of :data:`DOWNLOAD_BATCH_ROWS` rows, no
    read-ahead), and the stream ends at a row boundary before ``max_bytes`` (default
    :func:`download_max_bytes`) as well as at the row cap. A CSV cell that a spreadsheet would
    take for a formula (it begins with ``= + - @``, a tab or a carriage return) starts with ``'``
    (OWASP's rule for CSV injection). The request is checked before the first byte: a refusal
    is still an HTTP status, not a broken download."""
    import pyarrow.compute as pc

    if fmt not in ("csv", "parquet"):
        raise Refused(f"invalid format {fmt!r}: allowed csv or parquet")
    if not 1 <= limit <= MAX_DOWNLOAD_ROWS:
        raise Refused(f"invalid limit {limit}: allowed 1..{MAX_DOWNLOAD_ROWS}")
    cap = download_max_bytes() if max_bytes is None else max_bytes
    files = _added(path, versions) if versions else None
    ds, _ = _dataset(path, version if files is not None or not versions else max(versions), files)
    flt = None
    if column:
        if column not in ds.schema.names:
            raise Refused(f"invalid filter column {column!r}: allowed one of {', '.join(ds.schema.names)}")
        flt = pc.field(column) == _value(ds.schema.field(column), value or "")
    cols = [f.name for f in ds.schema if fmt == "parquet" or _csv_ok(f.type)]
    batches = _scan(path, lambda: iter(ds.scanner(columns=cols, filter=flt, batch_size=DOWNLOAD_BATCH_ROWS,
                                                  batch_readahead=0, fragment_readahead=0).to_batches()))
    first = _scan(path, lambda: next(batches, None))  # a broken file is refused before the first byte
    media = "text/csv" if fmt == "csv" else "application/vnd.apache.parquet"
    return _stream(path, fmt, ds.schema, cols, first, batches, limit, cap), media


def _stream(path: str, fmt: str, schema: Any, cols: list[str], first: Any, batches: Iterator[Any], limit: int,
            cap: int) -> Iterator[bytes]:
    import io

    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    out_schema = pa.schema([schema.field(c) for c in cols])
    writer = pq.ParquetWriter(buf, out_schema) if fmt == "parquet" else None
    sent = rows = 0
    header = True

    def take() -> bytes:
        chunk = buf.getvalue()
        buf.seek(0)
        buf.truncate()
        return chunk

    def pieces(b: Any) -> Iterator[Any]:  # wide rows (vectors) in slices of about DOWNLOAD_CHUNK_BYTES
        step = max(1, int(DOWNLOAD_CHUNK_BYTES * b.num_rows // max(1, b.nbytes)))
        for at in range(0, b.num_rows, step):
            yield b.slice(at, step)

    def scanned() -> Iterator[Any]:
        b = first
        while b is not None:
            yield from pieces(b)
            b = next(batches, None)

    try:
        for b in scanned():
            if rows >= limit:
                break
            b = b.slice(0, limit - rows)
            if fmt == "csv":
                pacsv.write_csv(_neutralised(pa.Table.from_batches([b], out_schema)), buf,
                                pacsv.WriteOptions(include_header=header))
                header = False
            else:  # a row group once written belongs to the file's footer: measured before it is written
                assert writer is not None
                if sent + b.nbytes > cap - FOOTER_BYTES:
                    break
                writer.write_table(pa.Table.from_batches([b], out_schema))
            chunk = take()
            if sent + len(chunk) > cap:  # the byte cap: end after the last whole slice
                break
            sent += len(chunk)
            rows += b.num_rows
            yield chunk
        if writer is not None:
            writer.close()
            writer = None
            yield take()  # the footer
    finally:
        if writer is not None:  # the client went away
            writer.close()


def _neutralised(t: Any) -> Any:
    """Every string cell that begins with ``= + - @``, a tab or a carriage return, prefixed with ``'``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cols = []
    for c in t.columns:
        if pa.types.is_dictionary(c.type):
            c = c.cast(c.type.value_type)
        if pa.types.is_string(c.type) or pa.types.is_large_string(c.type):
            risky = pc.fill_null(pc.match_substring_regex(c, "^[=+\\-@\t\r]"), False)
            c = pc.if_else(risky, pc.binary_join_element_wise(pa.scalar("'", c.type), c, pa.scalar("", c.type)), c)
        cols.append(c)
    return pa.table(cols, names=t.column_names)


def _csv_ok(t: Any) -> bool:
    import pyarrow as pa

    return not (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_nested(t))


# -- runs ------------------------------------------------------------------------------------------
@dataclass
class RunTables:
    """One table a run wrote: its role in the pipeline (output, stats, quarantine, a state or task
    table), and the versions the run committed."""

    role: str
    path: str
    versions: list[int]
    card: TableCard | None = None


def run_tables(pipeline: str, params: dict[str, Any], run_id: str, start: dt.datetime | None,
               end: dt.datetime | None, root: str | None = None) -> tuple[str, list[RunTables]]:
    """The output of the run ``run_id`` of ``pipeline`` with ``params``, and every table the
    pipeline keeps for it with the versions committed between ``start`` and ``end`` (one run holds
    an output's lock at a time, so those are this run's)."""
    from simjoin.pipeline import get_spec
    from simjoin.runtime.maintenance import tables_of

    root = root or warehouse_root()
    run = get_spec(pipeline).make_run(dict(params), run_id)
    paths = {k: v for k, v in run.table_paths().items() if isinstance(v, str)}
    output = str(getattr(run.cfg, "output", None) or paths.get("output") or paths.get("pairs") or "")
    roles = {os.path.realpath(p): k for k, p in paths.items()}
    if output:
        from simjoin.runtime.manifest import of

        m = of(output)
        for p in tables_of(output):  # what the output's manifest owns, by its role there
            roles.setdefault(os.path.realpath(p), _role(m, p))
    lo = (start - dt.timedelta(seconds=1)).timestamp() * 1000 if start else None
    hi = (end + dt.timedelta(seconds=1)).timestamp() * 1000 if end else None
    out = []
    for p, role in roles.items():
        if not _is_table(p) or os.path.commonpath([p, root]) != root:
            continue
        vs = [] if start is None else [int(h["version"]) for h in _recent(p, lo)  # not started: nothing yet
              if (lo is None or h.get("timestamp", 0) >= lo) and (hi is None or h.get("timestamp", 0) <= hi)]
        out.append(RunTables(role, p, sorted(vs)))
    order = {"output": 0, "pairs": 0, "quarantine": 1, "stats": 2}  # an S2J task's table is an output
    out.sort(key=lambda r: (0 if r.role.startswith("task:") else order.get(r.role, 3), not r.versions, r.path))
    return output, out


def _role(m: Any, path: str) -> str:
    """A table's role in its output's manifest, with its name under that role's folder
    (``state/tuples``): several tables share the role of the folder that holds them."""
    role = (m.role(path) if m is not None else None) or "output"
    base = m.at(role) if m is not None else None
    if base is None or os.path.realpath(base) == os.path.realpath(path):
        return role
    return f"{role}/{os.path.relpath(os.path.realpath(path), os.path.realpath(base))}"


def _recent(path: str, since_ms: float | None) -> list[dict[str, Any]]:
    """The table's commits back to the first one before ``since_ms`` (all when None), newest first:
    read 64 at a time, doubling, so a stream's table of thousands of commits is not read whole for
    its last run."""
    t = _table(path)
    n = 64
    while True:
        h = t.history(n)
        if since_ms is None or len(h) < n or (h and h[-1].get("timestamp", 0) < since_ms):
            return h
        n *= 2


def runs_of(tables: list[str] | None = None, timing: str | None = None,
            limit: int = 2000) -> dict[str, tuple[str, dt.datetime]]:
    """Output path -> (run id, start) of the latest run that wrote it (the task-timing table).
    Given the ``tables`` a page shows, only the timing rows of outputs that can hold them are
    read (a table's own path, and its path up to each ``_`` or ``/``), not the whole table."""
    import pyarrow.compute as pc

    from simjoin.pipeline.timing import timing_path

    path = timing or timing_path(os.environ.get("SIMJOIN_WAREHOUSE") or None)
    if not _is_table(path):
        return {}
    flt = None
    if tables is not None:
        wanted = {p[:i] for p in tables for i in range(1, len(p) + 1) if i == len(p) or p[i] in "_/"}
        if not wanted:
            return {}
        flt = pc.field("output").isin(sorted(wanted))
    ds, _ = _dataset(path, None, None)
    t = _scan(path, lambda: ds.to_table(columns=["run_id", "output", "started_at"], filter=flt))
    out: dict[str, tuple[str, dt.datetime]] = {}
    for rid, o, s in zip(t.column("run_id").to_pylist(), t.column("output").to_pylist(),
                         t.column("started_at").to_pylist(), strict=True):
        if o and (o not in out or s > out[o][1]):
            out[os.path.realpath(o)] = (rid, s)
    return dict(sorted(out.items(), key=lambda kv: kv[1][1], reverse=True)[:limit])
