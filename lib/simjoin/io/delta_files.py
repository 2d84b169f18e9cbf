"""Delta writes whose Parquet files the executors write with pyarrow, committed by the driver.

Spark's Delta writer turns each Arrow batch back into rows, writes Parquet row by row and
collects per-file statistics on the JVM: for the millions of pairs a join emits, that is most of
a publish. Here each task receives the frame as Arrow batches (``mapInArrow``), writes its files
with pyarrow and returns one small row per file (path, size, partition values, Delta statistics).
The driver then commits those files in one ``deltalake`` commit: an append under the same
``txn`` (app id, version) Spark's ``txnAppId``/``txnVersion`` writes, or the replacement of one
partition (Spark's ``replaceWhere`` on the partition columns). A file is only in the table once
the commit names it, so a failed or retried task, or a failed commit, leaves files no reader sees
(``VACUUM`` removes them later) and never a partial or duplicate row.

Only for tables at a local path whose columns the frame has exactly (same names and Delta types);
otherwise ``write`` returns False and the caller writes with Spark.

Statistics: ``numRecords``, ``nullCount`` of every top-level column, and min/max of integer, date
and timestamp columns (timestamps widened to whole milliseconds, the precision Delta readers
assume). Strings, floats and nested columns get none: a reader then reads the file rather than
skip it, never the reverse.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from simjoin import faults
from simjoin.contracts import OWNER, owner_of  # noqa: F401 - the owner mark, read without Spark  # noqa: F401 - the owner mark, read without Spark  # noqa: F401 - the owner mark, read without Spark  # noqa: F401 - the owner mark, read without Spark  # noqa: F401 - the owner mark, read without Spark  # noqa: F401 - the owner mark, read without Spark  # noqa: F401 - the owner mark, read without Spark  # noqa: F401 - the owner mark, read without Spark
from simjoin.log import get_logger

log = get_logger("simjoin.delta")

#: The rows each task returns, one per file it wrote.
FILES_SCHEMA = "path string, size long, part string, n long, stats string"
_UTC = dt.UTC
_PLAIN = re.compile(r"[A-Za-z0-9_.-]+")
#: ``SIMJOIN_TASK_WRITES=0`` sends every write to Spark's Delta writer.
ENABLED = os.environ.get("SIMJOIN_TASK_WRITES", "1") != "0"




def owner_description() -> str | None:
    """The description a table created now gets: ``OWNER=<pipeline>``, the pipeline whose stage
    writes (``faults.writing_pipeline``); None outside a pipeline (a test, a tool)."""
    name = faults.writing_pipeline()
    return f"{OWNER}={name}" if name else None


_FILE_SCHEME = r"^file:(?://)?(?=/)"


def file_key(path: str) -> str:
    """A data file in the one form files are compared in (``pins.appended``): its path on the file
    system (the ``file:`` scheme dropped), or the URI of another store, never percent-encoded.
    ``path`` is a decoded name: Hadoop's ``Path`` string (Spark's ``inputFiles()``), or a Delta log
    ``add.path`` already decoded. A percent-encoded URI (Spark's ``_metadata.file_path``, in which a
    space is ``%20`` and a ``%`` is ``%25``) is decoded once by :func:`file_key_col`: comparing the
    two forms as they come counts every file of a path with a space, ``%`` or non-ASCII name as new."""
    return re.sub(_FILE_SCHEME, "", path)


class Unsupported(Exception):
    """This write is Spark's: a table or frame the task writer does not handle (nothing was written)."""


def _stat_kind(t: Any) -> str | None:
    import pyarrow as pa

    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_date32(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "ts"
    return None


def _stat_value(kind: str, v: Any, upper: bool) -> Any:
    if kind == "int":
        return int(v)
    if kind == "date":
        return v.isoformat()
    # a timestamp as whole milliseconds: the lower bound floored, the upper bound ceiled
    us = int(v)
    ms = us // 1000 if not upper else -(-us // 1000)
    t = dt.datetime(1970, 1, 1, tzinfo=_UTC) + dt.timedelta(milliseconds=ms)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


class _File:
    """One Parquet file a task writes, with its running statistics."""

    def __init__(self, root: str, schema: Any, part: dict[str, str | None]) -> None:
        import pyarrow.parquet as pq

        # Spark's layout (``k=v/``) where the values need no escaping; Delta needs no layout at all
        plain = all(v is not None and _PLAIN.fullmatch(v) for v in part.values())
        folder = "/".join(f"{k}={v}" for k, v in part.items()) + "/" if part and plain else ""
        os.makedirs(os.path.join(root, folder), exist_ok=True)
        self.rel = f"{folder}part-{uuid.uuid4().hex}-c000.snappy.parquet"
        self.part, self.n = part, 0
        self.nulls = dict.fromkeys(schema.names, 0)
        self.kinds = {f.name: k for f in schema if (k := _stat_kind(f.type)) is not None}
        self.lo: dict[str, Any] = {}
        self.hi: dict[str, Any] = {}
        self.writer = pq.ParquetWriter(os.path.join(root, self.rel), schema, compression="snappy",
                                       use_dictionary=dictionary_columns(schema))

    def write(self, t: Any) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        self.writer.write_table(t)
        self.n += t.num_rows
        for name in t.column_names:
            col = t.column(name)
            self.nulls[name] += col.null_count
            kind = self.kinds.get(name)
            if kind is None or col.null_count == len(col):
                continue
            mm = pc.min_max(col.cast(pa.int64()) if kind == "ts" else col)
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            self.lo[name] = lo if name not in self.lo else min(self.lo[name], lo)
            self.hi[name] = hi if name not in self.hi else max(self.hi[name], hi)

    def close(self, root: str) -> tuple[str, int, str, int, str]:
        self.writer.close()
        stats = {"numRecords": self.n,
                 "minValues": {k: _stat_value(self.kinds[k], v, False) for k, v in self.lo.items()},
                 "maxValues": {k: _stat_value(self.kinds[k], v, True) for k, v in self.hi.items()},
                 "nullCount": self.nulls}
        size = os.path.getsize(os.path.join(root, self.rel))
        return self.rel, size, json.dumps(self.part), self.n, json.dumps(stats)


def _part_value(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _write_task(root: str, schema_ipc: bytes, part_cols: list[str],
                expect: dict[str, str | None] | None, packed: dict[str, Any] | None = None,
                transform: Any = None) -> Any:
    """The task: write its batches as Parquet files (one per partition value) under ``root``;
    yield one ``FILES_SCHEMA`` row per file. ``packed``: its batches hold packed rows (a ``rows``
    column of Arrow IPC values, a ``part`` column numbering their partitions), to which the task
    adds these constant columns, after ``transform(rows, part)`` of each partition's rows."""

    def unpacked(batches: Iterator[Any], full: Any) -> Iterator[Any]:
        import pyarrow as pa

        got: dict[int, list[Any]] = {}
        for b in batches:
            for part, blob in zip(b.column("part").to_pylist(), b.column("rows"), strict=True):
                got.setdefault(int(part), []).append(pa.ipc.open_stream(blob.as_buffer()).read_all())
        for part in sorted(got):
            ts = got.pop(part)
            t = ts[0] if len(ts) == 1 else pa.concat_tables(ts)
            if transform is not None:
                t = transform(t, part)
            for c, v in (packed or {}).items():
                if c not in t.column_names:
                    t = t.append_column(c, pa.array([v] * t.num_rows, full.field(c).type))
            yield from t.to_batches()

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        full = pa.ipc.read_schema(pa.py_buffer(schema_ipc))
        if packed is not None:
            batches = unpacked(batches, full)
        os.makedirs(root, exist_ok=True)  # a new table's directory
        file_schema = pa.schema([f for f in full if f.name not in part_cols])
        files: dict[tuple[Any, ...], _File] = {}
        try:
            for b in batches:
                if b.num_rows == 0:
                    continue
                t = pa.Table.from_batches([b])
                groups = [((), t)] if not part_cols else _split(t, part_cols)
                for key, g in groups:
                    part = {c: _part_value(v) for c, v in zip(part_cols, key)}
                    if expect is not None and part != expect:
                        raise ValueError(f"a row of partition {part} in a write that replaces partition {expect}")
                    f = files.get(key)
                    if f is None:
                        f = files[key] = _File(root, file_schema, part)
                    f.write(g.select(file_schema.names).cast(file_schema))
        finally:
            done = [f.close(root) for f in files.values()]
        rows: list[Any] = list(zip(*done)) if done else [[], [], [], [], []]
        yield pa.RecordBatch.from_arrays(
            [pa.array(rows[0], pa.string()), pa.array(rows[1], pa.int64()), pa.array(rows[2], pa.string()),
             pa.array(rows[3], pa.int64()), pa.array(rows[4], pa.string())],
            names=["path", "size", "part", "n", "stats"])

    return run


def _split(t: Any, cols: list[str]) -> list[tuple[tuple[Any, ...], Any]]:
    import pyarrow.compute as pc

    keys = t.group_by(cols).aggregate([]).to_pylist()
    out = []
    for k in keys:
        mask = None
        for c in cols:
            m = pc.is_null(t.column(c)) if k[c] is None else pc.equal(t.column(c), k[c])
            mask = m if mask is None else pc.and_(mask, m)
        out.append((tuple(k[c] for c in cols), t.filter(mask)))
    return out


def _delta_fields(schema: Any) -> dict[str, str]:
    """Column name -> Delta type (JSON), nullability aside."""
    out = {}
    for f in json.loads(schema.to_json())["fields"]:
        out[f["name"]] = json.dumps(_strip_nullable(f["type"]), sort_keys=True)
    return out


def _strip_nullable(t: Any) -> Any:
    if isinstance(t, dict):
        return {k: _strip_nullable(v) for k, v in t.items()
                if k not in ("nullable", "containsNull", "valueContainsNull", "metadata")}
    if isinstance(t, list):
        return [_strip_nullable(v) for v in t]
    return t


def _commit(local: str, want: Any, rows: list[Any], *, table: Any, part_cols: list[str], app_id: str | None,
            version: int | None, metadata: str | None, overwrite: bool = False, filters: Any = None) -> None:
    """One deltalake commit of the files ``rows`` (``FILES_SCHEMA``) to the table at ``local``
    (``table`` None: create it), under the ``txn`` (app_id, version) when given."""
    from deltalake import CommitProperties, Transaction
    from deltalake.transaction import AddAction, create_table_with_add_actions

    now = int(time.time() * 1000)
    adds: list[Any] = [AddAction(r["path"], int(r["size"]), json.loads(r["part"]), now, True, r["stats"])
                       for r in rows if int(r["n"]) > 0]
    props = CommitProperties(
        app_transactions=[Transaction(app_id, int(version))] if app_id is not None and version is not None else None,
        custom_metadata={"userMetadata": metadata} if metadata is not None else None)
    try:
        if table is None:
            create_table_with_add_actions(local, want, adds, mode="error", partition_by=part_cols or None,
                                          description=owner_description(), commit_properties=props)
        else:
            table.create_write_transaction(adds, mode="overwrite" if overwrite else "append", schema=want,
                                           partition_by=part_cols or None, partition_filters=filters,
                                           commit_properties=props)
    except Exception as e:  # a table deltalake cannot commit to (a writer feature it lacks): Spark writes
        raise Unsupported(f"deltalake cannot commit ({str(e).splitlines()[0][:200] if str(e) else type(e).__name__})"
                          ) from e


def read_parquet(path: str, columns: list[str] | None = None) -> Any:
    """One Parquet data file as a pyarrow Table (``columns``: those only). ``ParquetFile`` reads it
    without ``pyarrow.dataset``, whose first use imports pandas (0.3 s of a micro-batch's process
    start); a Delta data file of an unpartitioned table needs nothing the dataset layer adds."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).read(columns=columns)


def dictionary_columns(schema: Any) -> list[str]:
    """The columns of the Arrow ``schema`` worth Parquet's dictionary encoding: text (a pipeline's
    ``kind``, a key's labels). Ids, scores, timestamps and serialized indexes are mostly distinct:
    trying a dictionary on them doubled the time to write a unit's pairs for nothing."""
    import pyarrow as pa

    return [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]


def writer_properties(schema: Any) -> Any:
    """``deltalake``'s writer properties for a table of ``schema``: dictionary encoding on the
    :func:`dictionary_columns` alone; snappy, as every other writer here (given properties,
    deltalake would otherwise write uncompressed Parquet: S3J's state of 5 MB of images took GBs)."""
    from deltalake import ColumnProperties, WriterProperties

    return WriterProperties(compression="SNAPPY",
                            default_column_properties=ColumnProperties(dictionary_enabled=False),
                            column_properties={c: ColumnProperties(dictionary_enabled=True)
                                               for c in dictionary_columns(schema)} or None)


def write_file(root: str, t: Any) -> dict[str, Any]:
    """Inside a task: ``t`` (a pyarrow Table in the target table's columns) as one Parquet file
    in the directory ``root`` of an unpartitioned table; the ``FILES_SCHEMA`` row that commits it.
    The file is in no table until ``commit_files`` names it."""
    os.makedirs(root, exist_ok=True)
    f = _File(root, t.schema, {})
    try:
        if t.num_rows:
            f.write(t)
    finally:
        path, size, part, n, stats = f.close(root)
    return {"path": path, "size": size, "part": part, "n": n, "stats": stats}


#: tables one thread keeps open (:func:`open_table`)
OPEN_TABLES = 32
_open = threading.local()


def open_table(local: str) -> Any:
    """The local Delta table at ``local`` at its newest version, as a deltalake ``DeltaTable``.
    Opening one replays its log (tens of milliseconds once a stream's state table holds a few
    hundred commits, several times per unit); so each thread keeps the tables it opened (the
    last :data:`OPEN_TABLES`) and brings them up to date with ``update_incremental`` (a listing of
    the log's newer commits). A table deleted and written again at the path (its first commit is
    another file) is opened anew; once maintenance cleaned up the log's first commits, a kept
    table is known by its table id (``metaData.id``)."""
    from deltalake import DeltaTable

    local = os.path.abspath(local)
    try:
        st = os.stat(os.path.join(local, "_delta_log", f"{0:020d}.json"))
        key: tuple[Any, ...] = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
    except OSError:  # the log's first entries were cleaned up (maintenance): the table id tells
        if not os.path.isfile(os.path.join(local, "_delta_log", "_last_checkpoint")):
            return DeltaTable(local)
        key = ("checkpointed",)
    tables: OrderedDict[str, tuple[Any, Any]] | None = getattr(_open, "tables", None)
    if tables is None:
        tables = _open.tables = OrderedDict()
    got = tables.pop(local, None)
    table = None
    if got is not None and (got[0] == key if key[0] != "checkpointed" else got[0][0] == "checkpointed"):
        try:
            got[1].update_incremental()
            table = got[1]
        except Exception:
            table = None
    if table is None:
        table = DeltaTable(local)
    if key == ("checkpointed",):
        key = ("checkpointed", table.metadata().id)
        if got is not None and got[0] != key and table is got[1]:  # another table at the path
            table = DeltaTable(local)
            key = ("checkpointed", table.metadata().id)
    tables[local] = (key, table)
    while len(tables) > OPEN_TABLES:
        tables.popitem(last=False)
    return table


def forget_open(paths: Sequence[str]) -> None:
    """This thread's kept tables at ``paths`` are opened anew on their next use (maintenance
    compacted them and cleaned up their log)."""
    tables = getattr(_open, "tables", None)
    if tables:
        for p in paths:
            tables.pop(os.path.abspath(p), None)


class _Kept:
    """A table's rows held in memory (:func:`read_kept`): one pyarrow Table per data file."""

    def __init__(self) -> None:
        self.version = -1
        self.files: dict[str, Any] = {}
        self.rows: Any = None


#: path prefixes whose tables :func:`read_kept` holds in memory (:func:`keeping`), and their rows
_keep_under: list[str] = []
_kept: dict[str, _Kept] = {}
_kept_lock = threading.Lock()


@contextmanager
def keeping(*prefixes: str) -> Iterator[None]:
    """While in the block, the local tables under ``prefixes`` (a stream's state directory in
    follow mode) are held in memory between reads: :func:`read_kept` reads only the files the
    commits since its last read added and drops those they removed. Delta stays the savepoint:
    what is held is what the log says, brought up to date at every read."""
    added = [os.path.abspath(p).rstrip("/") + "/" for p in prefixes]
    with _kept_lock:
        _keep_under.extend(added)
    try:
        yield
    finally:
        with _kept_lock:
            for p in added:
                _keep_under.remove(p)
            for k in [k for k in _kept if not any(k.startswith(p) for p in _keep_under)]:
                del _kept[k]


def read_kept(local: str, where: Any = None, columns: list[str] | None = None) -> Any:
    """The newest rows of the local table at ``local`` as a pyarrow Table (``where``: deltalake's
    ``filters``; ``columns``: the columns to return), as ``DeltaTable.to_pyarrow_table`` reads
    them. A table under a :func:`keeping` prefix is served from memory, its new files read alone
    (a state table of a few hundred small files costs hundreds of milliseconds to read whole);
    a partitioned table, or one with deletion vectors or column mapping, is read whole."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from simjoin.io.delta_source import plain_uri

    local = os.path.abspath(local)
    table = open_table(local)
    if not any(local.startswith(p) for p in _keep_under) or _whole_only(table):
        return table.to_pyarrow_table(columns=columns, filters=where)
    with _kept_lock:
        kept = _kept.setdefault(local, _Kept())
        if kept.version != table.version():
            schema = pa.schema(table.schema().to_arrow())
            now = [plain_uri(u) for u in table.file_uris()]
            files = {}
            for f in now:
                got = kept.files.get(f)
                files[f] = got if got is not None and got.schema == schema else _conform(read_parquet(f), schema)
            kept.files, kept.version = files, table.version()
            kept.rows = pa.concat_tables(list(files.values())) if files else schema.empty_table()
        rows = kept.rows
    if where:
        rows = rows.filter(pq.filters_to_expression(where))
    return rows if columns is None else rows.select(list(columns))


def _whole_only(table: Any) -> bool:
    md = table.metadata()
    features = set(table.protocol().reader_features or [])
    return bool(md.partition_columns or features & {"deletionVectors", "columnMapping"}
                or (md.configuration or {}).get("delta.columnMapping.mode", "none") not in ("none", None))


def _conform(t: Any, schema: Any) -> Any:
    """A data file's rows in the table's schema (a column the file lacks, written before the
    schema gained it, is null)."""
    import pyarrow as pa

    cols = [t.column(f.name).cast(f.type) if f.name in t.column_names else pa.nulls(t.num_rows, f.type)
            for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


def target_schema(local: str, want: Any) -> Any:
    """The Arrow schema files for the unpartitioned Delta table at ``local`` must have, to be
    committed by ``commit_files``: the table's own when it has ``want``'s columns (names and Delta
    types), ``want`` when there is no table yet. Raises ``Unsupported`` otherwise."""
    import pyarrow as pa
    from deltalake import Schema

    if not os.path.isdir(os.path.join(local, "_delta_log")):
        return want
    table = open_table(local)
    if _delta_fields(table.schema()) != _delta_fields(Schema.from_arrow(want)):
        raise Unsupported("the table's columns differ from the files'")
    if table.metadata().partition_columns:
        raise Unsupported("the table is partitioned")
    return pa.schema(table.schema().to_arrow())


def commit_files(local: str, schema: Any, rows: list[Any], *, app_id: str, version: int,
                 metadata: str | None = None) -> bool:
    """Append the files ``rows`` (``write_file``'s, written under ``local``) to the unpartitioned
    Delta table at ``local`` in one commit, once per (``app_id``, ``version``); a new table is
    created with ``schema``. False when that txn was committed before (a rerun: nothing done).
    Raises ``Unsupported`` (nothing committed) for a table deltalake cannot commit to."""
    from deltalake import Schema

    want = Schema.from_arrow(schema)
    table = open_table(local) if os.path.isdir(os.path.join(local, "_delta_log")) else None
    if table is not None:
        if _delta_fields(table.schema()) != _delta_fields(want) or table.metadata().partition_columns:
            raise Unsupported("the table's columns or partitioning changed since the files were written")
        if committed(table, app_id, version):
            return False
    _commit(local, want, rows, table=table, part_cols=[], app_id=app_id, version=version, metadata=metadata)
    log.info("delta: %d rows in %d files written beside the table (by the tasks or the stage), committed to %s",
             sum(int(r["n"]) for r in rows), sum(1 for r in rows if int(r["n"]) > 0), local)
    return True


def committed(table: Any, app_id: str, version: int) -> bool:
    """Whether the deltalake ``table`` holds a ``txn`` of ``app_id`` at ``version`` or later
    (either engine's: Spark's ``txnAppId``/``txnVersion`` writes the same action)."""
    done = table.transaction_version(app_id)
    return done is not None and done >= version
