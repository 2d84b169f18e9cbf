"""Input pins of a batch run: the Delta version of each input that a run read.

A batch stage reads versioned Delta inputs (docs/operations.md, "Reruns and backfills"): the first
stage of a run pins, per input,
the latest version, or for a scheduled run or a backfill the last version committed at or before
the end of its data interval, in ``<output>_runs``. A retry or a rerun of that Airflow run reads
the very versions it pinned, so it reproduces its output even after the inputs moved on; a
scheduled or asset-triggered run whose pins equal the last published run's has nothing new.
CLI runs (run id ``cli`` by default, reused by every CLI run) always pin afresh.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from simjoin.io import delta_files
from simjoin.spark import delta, delta_tasks
from simjoin.spark.session import small_frame

__all__ = ["PIN_SCHEMA", "version_as_of", "pin_inputs", "mark_published", "last_published", "published_runs",
           "append_only", "appended", "read_rows"]

PIN_SCHEMA = "run_id string, side int, path string, version long, as_of string, pinned_at timestamp, published boolean"


def version_as_of(spark: SparkSession, ref: str, as_of: dt.datetime) -> int:
    """The last version of ``ref`` committed at or before ``as_of`` (tz-aware, or UTC if naive)."""
    if as_of.tzinfo is None:
        as_of = as_of.replace(tzinfo=dt.UTC)
    ms = as_of.timestamp() * 1000
    h = delta.history_rows(spark, ref)
    got = [r["version"] for r in h if r["timestamp_ms"] <= ms]
    if not got:
        first = min((r["timestamp_ms"] for r in h), default=None)
        since = dt.datetime.fromtimestamp(first / 1e3, dt.UTC).isoformat() if first is not None else "?"
        raise ValueError(f"input {ref} has no version at or before {as_of.isoformat()} (its oldest kept commit "
                         f"is at {since}): allowed a data interval that ends after the table was written")
    return int(max(got))


def read_rows(spark: SparkSession, table: str) -> list[Any]:
    """Every row of the pins table (none if there is no table yet): one per input per run, small."""
    return delta.small_rows(spark, table)


def pin_inputs(spark: SparkSession, table: str, run_id: str, inputs: Sequence[tuple[int, str]],
               as_of: dt.datetime | None = None, reuse: bool = True, rows: list[Any] | None = None,
               latest: Mapping[int, int] | None = None) -> dict[int, int]:
    """``{side: version}`` this run reads. With ``reuse``, a run that pinned these inputs before
    (an Airflow retry or rerun) gets its earlier pins back; otherwise the pins are taken now and
    written to ``table`` (the run's ``run_id`` partition, replaced). ``rows``: the table's rows, if
    already read; ``latest``: each input's latest version, if already read (not for ``as_of``)."""
    if reuse:
        mine = [r for r in (read_rows(spark, table) if rows is None else rows) if r["run_id"] == run_id]
        if mine and {(r["side"], r["path"]) for r in mine} == set(inputs):
            return {int(r["side"]): int(r["version"]) for r in mine}
    versions = {side: (version_as_of(spark, path, as_of) if as_of is not None
                       else latest[side] if latest is not None and side in latest
                       else delta.latest_version(spark, path))
                for side, path in inputs}
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    out = [(run_id, side, path, versions[side], as_of.isoformat() if as_of else None, now, False)
           for side, path in inputs]
    delta.overwrite_rows(spark, out, PIN_SCHEMA, table, {"run_id": run_id})
    return versions


def mark_published(spark: SparkSession, table: str, run_id: str) -> None:
    """The run's output is published: later scheduled runs compare their pins with these."""
    rows = [r for r in read_rows(spark, table) if r["run_id"] == run_id]
    if rows and not all(r["published"] for r in rows):
        out = [(r["run_id"], r["side"], r["path"], r["version"], r["as_of"], r["pinned_at"], True) for r in rows]
        delta.overwrite_rows(spark, out, PIN_SCHEMA, table, {"run_id": run_id})


def published_runs(spark: SparkSession, table: str, exclude: str, rows: list[Any] | None = None
                   ) -> list[tuple[str, dict[tuple[int, str], int]]]:
    """Every published run other than ``exclude``, the latest pinned first: (run_id, {(side, path): version}).
    ``rows``: the table's rows, if already read."""
    runs: dict[str, list[Any]] = {}
    for r in read_rows(spark, table) if rows is None else rows:
        if r["published"] and r["run_id"] != exclude:
            runs.setdefault(r["run_id"], []).append(r)
    order = sorted(runs, key=lambda k: max(r["pinned_at"] for r in runs[k]), reverse=True)
    return [(k, {(int(r["side"]), r["path"]): int(r["version"]) for r in runs[k]}) for k in order]


def last_published(spark: SparkSession, table: str, exclude: str, rows: list[Any] | None = None
                   ) -> tuple[str, dict[tuple[int, str], int]] | None:
    """The latest published run other than ``exclude``: (run_id, {(side, path): version})."""
    runs = published_runs(spark, table, exclude, rows)
    return runs[0] if runs else None


# Commits that only add rows: a blind append, or a streaming append. Anything else (an overwrite, a
# MERGE, DELETE or UPDATE, an OPTIMIZE that rewrites files, a schema change) may move or drop rows.
_APPENDS = {"WRITE": "mode", "STREAMING UPDATE": "outputMode"}


def append_only(spark: SparkSession, ref: str, since: int, until: int) -> str | None:
    """``None`` if every commit of ``ref`` after version ``since`` up to ``until`` only appended
    rows; otherwise why not, in one line."""
    if until < since:
        return f"{ref} v{until} is older than v{since}"
    if until == since:
        return None
    got = {r["version"]: r for r in delta.history_rows(spark, ref) if since < r["version"] <= until}
    for v in range(since + 1, until + 1):
        r = got.get(v)
        if r is None:
            return f"{ref} v{v}: the commit is no longer in the table's history"
        key = _APPENDS.get(r["operation"])
        params = r["operationParameters"] or {}
        if key is None or params.get(key) != "Append":
            how = f"{r['operation']} ({', '.join(f'{k}={w}' for k, w in sorted(params.items()))})"
            return f"{ref} v{v} is a {how}, not an append"
    return None


def appended(spark: SparkSession, ref: str, df: Any, since: int) -> Any:
    """``df`` (read from ``ref``) with a boolean column ``_appended``: whether the row lies in a data
    file that version ``since`` of ``ref`` did not have. Exact when the commits since then only
    appended (``append_only``): old rows stay in their files. Files are compared in one form
    (``delta_files.file_key``): Spark names a version's files decoded (``inputFiles()``) and a row's
    file percent-encoded (``_metadata.file_path``)."""
    old = {delta_files.file_key(f) for f in delta.read_table(spark, ref, version=since).inputFiles()}
    files = small_frame(spark, [(f,) for f in sorted(old)], "_file string").withColumn("_old", F.lit(True))
    return (df.withColumn("_file", delta_tasks.file_key_col(F.col("_metadata.file_path")))
            .join(F.broadcast(files), "_file", "left")
            .withColumn("_appended", F.col("_old").isNull()).drop("_file", "_old"))
