"""A local Delta table read as a stream by its log (the engine's ``direct`` ingest).

What Structured Streaming's Delta source does, without a streaming query: the first read takes
the snapshot of a version (every file in it), every later read takes the files that the commits
after the last version read appended. Offsets are table versions. Only appends are a stream: a
commit that removes data (a delete, an update, an overwrite) is refused, as the streaming source
refuses it. Compaction (``dataChange: false``) adds and removes nothing of the stream.

A table qualifies when ``deltalake`` reads it and it has no partition columns, no column mapping
and no deletion vectors (:func:`unsupported`); other tables take the streaming query."""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

__all__ = ["Range", "bounded", "version_rows", "plain_uri", "latest_version", "unsupported", "schema_json",
           "files_between", "table_id", "commit_exists"]

_JSON = re.compile(r"^([0-9]{20})\.json$")


@dataclass(frozen=True)
class Range:
    """The versions of one source a micro-batch reads: after ``start`` (-1: none read yet, the
    batch takes the snapshot of ``end``) up to ``end`` inclusive."""

    start: int
    end: int

    def empty(self) -> bool:
        return self.end <= self.start


def _log_dir(path: str) -> str:
    return os.path.join(path, "_delta_log")


def latest_version(path: str, after: int | None = None) -> int:
    """The newest committed version (-1 when there is none). With ``after`` (a version this
    reader saw): when its JSON commit and the next are still in the log, the commits after it are
    probed one by one (versions are contiguous), so a follower's poll costs the new commits, not a
    read of a log that holds every commit of the retention. When the next commit is not there the
    log is listed, so a later version after a gap (the next one's JSON cleaned up or deleted) is
    still seen, and the caller refuses the gap instead of waiting at ``after`` forever. A
    checkpoint whose JSON commits were cleaned up still names its version in
    ``_last_checkpoint``."""
    if after is not None and after >= 0 and commit_exists(path, after) and commit_exists(path, after + 1):
        v = after + 1
        while commit_exists(path, v + 1):
            v += 1
        return v
    best = -1
    try:
        names = os.listdir(_log_dir(path))
    except FileNotFoundError:
        return -1
    for n in names:
        m = _JSON.match(n)
        if m:
            best = max(best, int(m.group(1)))
    if best < 0 and "_last_checkpoint" in names:
        with open(os.path.join(_log_dir(path), "_last_checkpoint")) as fh:
            best = int(json.load(fh)["version"])
    return best


def table_id(path: str) -> str | None:
    """The table's id (``metaData.id``; Delta gives a table a new one when it is created, so a
    table deleted and written again at the same path has another), or None when there is no
    table. Read from the first commit when the log still holds it (one small file), else from
    the kept metadata (:func:`_meta_at`: the commits since it was kept, or a snapshot)."""
    first = os.path.join(_log_dir(path), f"{0:020d}.json")
    try:
        with open(first) as fh:
            for line in fh:
                if '"metaData"' in line:
                    md = json.loads(line).get("metaData")
                    if md and md.get("id"):
                        return str(md["id"])
    except FileNotFoundError:
        pass
    if latest_version(path) < 0:
        return None
    try:
        return _meta_at(path, latest_version(path)).table_id
    except Exception:  # a reader feature deltalake lacks: the identity cannot be checked here
        return None


def commit_exists(path: str, version: int) -> bool:
    """Whether the log still holds the JSON commit of ``version``."""
    return os.path.exists(os.path.join(_log_dir(path), f"{version:020d}.json"))


def _table(path: str, version: int | None = None) -> Any:
    """The table at ``version`` (None: its newest): the thread's kept table when it is at that
    version (``delta_files.open_table``), else opened at it."""
    from deltalake import DeltaTable

    from simjoin.io.delta_files import open_table

    t = open_table(path)
    return t if version is None or t.version() == version else DeltaTable(path, version=version)


@dataclass(frozen=True)
class _Meta:
    """What a reader needs of a table at ``version`` besides its files: the schema (Delta's
    ``schemaString``, Spark's StructType JSON), partition columns, configuration, reader
    features and the table id. ``key``: the file of ``version``'s JSON commit (:func:`_commit_key`)."""

    version: int
    key: tuple[Any, ...]
    schema_json: str
    partition_columns: tuple[str, ...]
    configuration: dict[str, Any]
    reader_features: tuple[str, ...]
    table_id: str


_metas: dict[str, _Meta] = {}
_metas_lock = threading.Lock()


def _commit_key(path: str, version: int) -> tuple[Any, ...]:
    """The file of ``version``'s JSON commit (another table written at the path has another
    file for it); ``()`` when the log no longer holds it."""
    try:
        st = os.stat(os.path.join(_log_dir(path), f"{version:020d}.json"))
    except OSError:
        return ()
    return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)


def _meta_at(path: str, version: int) -> _Meta:
    """The table's :class:`_Meta` at ``version``. Kept per path: a later version reads only the
    JSON commits after the kept one for ``metaData`` and ``protocol`` actions, so a follower's
    poll costs its new commits, not a snapshot of every file of a long-lived input (a snapshot
    at an older version than the newest, which a poll reads while the producer appends, is a
    full replay of the log). Opened by ``deltalake`` the first time, for another table at the
    path (the kept version's commit is another file), for an older version, or when a commit
    in between is gone."""
    with _metas_lock:
        got = _metas.get(path)
    if got is not None and got.key and got.version <= version and _commit_key(path, got.version) == got.key:
        md: dict[str, Any] | None = None
        proto: dict[str, Any] | None = None
        for v in range(got.version + 1, version + 1):
            actions = _actions(path, v)
            if actions is None:
                break
            for a in actions:
                md = a.get("metaData", md)
                proto = a.get("protocol", proto)
        else:
            meta = _Meta(version, _commit_key(path, version),
                         md["schemaString"] if md else got.schema_json,
                         tuple(md.get("partitionColumns") or ()) if md else got.partition_columns,
                         dict(md.get("configuration") or {}) if md else got.configuration,
                         tuple(proto.get("readerFeatures") or ()) if proto else got.reader_features,
                         str(md.get("id") or got.table_id) if md else got.table_id)
            with _metas_lock:
                _metas[path] = meta
            return meta
    t = _table(path, version)
    md_t = t.metadata()
    meta = _Meta(version, _commit_key(path, version), t.schema().to_json(), tuple(md_t.partition_columns or ()),
                 dict(md_t.configuration or {}), tuple(t.protocol().reader_features or ()), str(md_t.id))
    with _metas_lock:
        _metas[path] = meta
    return meta


def _actions(path: str, version: int) -> list[dict[str, Any]] | None:
    """The actions of ``version``'s JSON commit; None when it is gone from the log."""
    try:
        with open(os.path.join(_log_dir(path), f"{version:020d}.json")) as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        return None


def unsupported(path: str, version: int | None = None) -> str | None:
    """Why the table cannot be read by its log here (None: it can)."""
    try:
        m = _meta_at(path, latest_version(path) if version is None else version)
    except Exception as e:  # a reader feature deltalake lacks, or no table
        return f"deltalake cannot read it ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
    return _why(m)


def _why(m: _Meta) -> str | None:
    if m.partition_columns:
        return f"it is partitioned by {list(m.partition_columns)}"
    if (m.configuration or {}).get("delta.columnMapping.mode", "none") not in ("none", None):
        return "it uses column mapping"
    features = set(m.reader_features)
    if "deletionVectors" in features or "columnMapping" in features:
        return f"it uses the reader features {sorted(features)}"
    return None


def schema_json(path: str, version: int) -> str:
    """The table's schema at ``version`` as Delta's schema string (Spark's ``StructType`` JSON).
    Raises ValueError when the table no longer qualifies (:func:`unsupported`)."""
    m = _meta_at(path, version)
    why = _why(m)
    if why is not None:
        raise ValueError(f"input {path} at version {version}: {why}; this output reads it by its Delta log: "
                         "allowed: an unpartitioned append-only table without column mapping or deletion "
                         "vectors, or --reset (then a streaming query reads it)")
    return m.schema_json


def files_between(path: str, r: Range) -> list[str]:
    """The data files of the stream between the versions of ``r``: the snapshot of ``r.end``
    when ``r.start`` is -1, else the files the commits after ``r.start`` appended. Raises
    ValueError on a commit that changed the stream other than by appending."""
    if r.empty():
        return []
    if r.start < 0:
        t = _table(path, r.end)
        return [plain_uri(u) for u in t.file_uris()]
    out: list[str] = []
    for v in range(r.start + 1, r.end + 1):
        out.extend(_appended(path, v))
    return out


def plain_uri(uri: str) -> str:
    """A data file's URI as deltalake gives it, as a local path (deltalake percent-encodes a local
    path too: ``in dir`` comes back as ``in%20dir``)."""
    if uri.startswith("file://"):
        return unquote(uri.removeprefix("file://"))
    return unquote(uri) if "://" not in uri else uri


def _appended(path: str, version: int) -> Sequence[str]:
    return [_file(path, a["path"]) for a in _adds(path, version)]


def _file(table: str, path: str) -> str:
    """A data file's path in the log (relative to the table, percent-encoded) as a local path."""
    return os.path.join(table, unquote(path)) if "://" not in path else plain_uri(path)


def _adds(path: str, version: int) -> list[dict[str, Any]]:
    """The ``add`` actions of ``version`` that change data. Raises ValueError when its commit is
    gone from the log or it changed the stream other than by appending."""
    actions = _actions(path, version)
    if actions is None:
        raise ValueError(f"input {path}: the log of version {version} is gone (cleaned up before this output "
                         "read it): allowed: keep the input's log until every output read it, or --reset")
    added: list[dict[str, Any]] = []
    for action in actions:
        if "add" in action:
            a = action["add"]
            if a.get("deletionVector"):
                raise ValueError(f"input {path}: version {version} adds a file with a deletion vector: "
                                 "allowed: an append-only stream input without deletion vectors")
            if a.get("dataChange", True):
                added.append(a)
        elif "remove" in action and action["remove"].get("dataChange", True):
            raise ValueError(f"input {path}: version {version} removed data (a delete, an update or an "
                             "overwrite): a stream input is append-only: allowed: append new rows only, or "
                             "--reset to join the input as it is now")
        elif "metaData" in action and action["metaData"].get("partitionColumns"):
            raise ValueError(f"input {path}: version {version} made it partitioned: allowed: an unpartitioned "
                             "stream input, or --reset")
    return added


def version_rows(path: str, version: int) -> int | None:
    """The rows ``version`` appended (its adds' ``numRecords`` statistic, else their Parquet
    footers); None when it cannot be read as an append (:func:`_adds`)."""
    try:
        adds = _adds(path, version)
    except ValueError:
        return None
    n = 0
    for a in adds:
        rows = json.loads(a.get("stats") or "{}").get("numRecords")
        if rows is None:
            import pyarrow.parquet as pq

            rows = pq.read_metadata(_file(path, a["path"])).num_rows
        n += int(rows)
    return n


def bounded(paths: Sequence[str], ranges: Sequence[Range], max_records: int | None) -> tuple[list[Range], int]:
    """``ranges`` cut at whole versions so that they append at most ``max_records`` rows together
    (None: no bound), each source's share in proportion to the rows it has waiting; at least one
    version when any waits (a single larger commit is a unit of its own). A first read (the
    snapshot of ``end``) is cut to the snapshot of an earlier version when every version up to
    ``end`` only appended. Never inside a commit: rows committed together stay in one unit, so
    lateness and duplicates are judged as if each commit had been read when it landed.
    Returns the ranges and the rows they leave for later batches."""
    if max_records is None:
        return list(ranges), 0
    per: list[list[int]] = []
    for path, r in zip(paths, ranges, strict=True):
        counts = [version_rows(path, v) for v in range(max(r.start + 1, 0), r.end + 1)] if not r.empty() else []
        if any(n is None for n in counts):
            return list(ranges), 0  # a history that is not append-only: read as it is, unbounded
        per.append([int(n or 0) for n in counts])
    waiting = sum(map(sum, per))
    if waiting <= max_records:
        return list(ranges), 0
    takes = []
    for rows in per:
        share, got, n = max_records * sum(rows) / waiting, 0, 0
        while n < len(rows) and got + rows[n] <= share:
            got, n = got + rows[n], n + 1
        takes.append(n)
    if not any(sum(rows[:n]) for rows, n in zip(per, takes, strict=True)):  # each next commit is over its share
        k = max(range(len(per)), key=lambda i: sum(per[i]))
        takes[k] = next(i for i, n in enumerate(per[k]) if n) + 1
    out = [Range(r.start, max(r.start + 1, 0) - 1 + n) for r, n in zip(ranges, takes, strict=True)]
    return out, waiting - sum(sum(rows[:n]) for rows, n in zip(per, takes, strict=True))
