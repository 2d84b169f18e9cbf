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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

__all__ = ["Range", "bounded", "version_rows", "plain_uri", "latest_version", "unsupported", "spark_schema",
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


def latest_version(path: str) -> int:
    """The newest committed version (a listing of the log; -1 when there is none). A checkpoint
    whose JSON commits were cleaned up still names its version in ``_last_checkpoint``."""
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
    table. Read from the first commit when the log still holds it (one small file), else by
    ``deltalake`` from the latest checkpoint."""
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
        return str(_table(path).metadata().id)
    except Exception:  # a reader feature deltalake lacks: the identity cannot be checked here
        return None


def commit_exists(path: str, version: int) -> bool:
    """Whether the log still holds the JSON commit of ``version``."""
    return os.path.exists(os.path.join(_log_dir(path), f"{version:020d}.json"))


def _table(path: str, version: int | None = None) -> Any:
    """The table at ``version`` (None: its newest): the thread's kept table when it is at that
    version (``delta_files.open_table``), else opened at it."""
    from deltalake import DeltaTable

    from simjoin.spark.delta_files import open_table

    t = open_table(path)
    return t if version is None or t.version() == version else DeltaTable(path, version=version)


def unsupported(path: str, version: int | None = None) -> str | None:
    """Why the table cannot be read by its log here (None: it can)."""
    try:
        t = _table(path, version)
    except Exception as e:  # a reader feature deltalake lacks, or no table
        return f"deltalake cannot read it ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
    return _why(t)


def _why(t: Any) -> str | None:
    md = t.metadata()
    if md.partition_columns:
        return f"it is partitioned by {list(md.partition_columns)}"
    if (md.configuration or {}).get("delta.columnMapping.mode", "none") not in ("none", None):
        return "it uses column mapping"
    features = set(t.protocol().reader_features or [])
    if "deletionVectors" in features or "columnMapping" in features:
        return f"it uses the reader features {sorted(features)}"
    return None


def spark_schema(path: str, version: int) -> Any:
    """The table's schema at ``version`` as a Spark ``StructType`` (Delta's schema string is
    Spark's). Raises ValueError when the table no longer qualifies (:func:`unsupported`)."""
    from pyspark.sql import types as T

    t = _table(path, version)
    why = _why(t)
    if why is not None:
        raise ValueError(f"input {path} at version {version}: {why}; this output reads it by its Delta log: "
                         "allowed: an unpartitioned append-only table without column mapping or deletion "
                         "vectors, or --reset (then a streaming query reads it)")
    return T.StructType.fromJson(json.loads(t.schema().to_json()))


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
    f = os.path.join(_log_dir(path), f"{version:020d}.json")
    if not os.path.exists(f):
        raise ValueError(f"input {path}: the log of version {version} is gone (cleaned up before this output "
                         "read it): allowed: keep the input's log until every output read it, or --reset")
    added: list[dict[str, Any]] = []
    with open(f) as fh:
        for line in fh:
            if not line.strip():
                continue
            action = json.loads(line)
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
