"""Local Delta tables as Arrow, with ``deltalake`` only: which references are local, the reader
of a unit's state and work tables, a deltalake write with its fallback signal, and Parquet files
written beside a table for one commit (``Files``). The Spark executor's I/O
(``simjoin.spark.delta``) uses these for local tables and Spark for the rest."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simjoin import faults
from simjoin.io import delta_files
from simjoin.log import get_logger

__all__ = ["is_path", "abs_ref", "local_dir", "by_deltalake", "NotLocal", "read_arrow", "overwrite_arrow", "Files",
           "file_target", "write_parts", "overwrite_partition_arrow", "sql_literal", "has_commit", "AnyOf", "predicate"]

log = get_logger("simjoin.delta")


def is_path(ref: str) -> bool:
    """A reference with a slash, a leading dot or a URI scheme is a path; otherwise a table name."""
    return "/" in ref or ref.startswith(".") or ":" in ref or os.path.exists(ref)


def abs_ref(ref: str) -> str:
    return ref if ":" in ref else os.path.abspath(ref)


def local_dir(ref: str) -> str | None:
    """The directory of a table at a local path (``/x``, ``file:/x``, ``file:///x``), else None.
    None too for a path with a ``%``: ``deltalake`` percent-decodes its table path (``%41`` reads
    as ``A``), committing at one path and reading back another; Spark reads and writes it."""
    if not is_path(ref):
        return None
    path = abs_ref(ref)
    if path.startswith("file:") or "://" not in path:
        local = path.removeprefix("file://").removeprefix("file:")
        return None if "%" in local else local
    return None


def by_deltalake(ref: str, what: str, write: Any) -> bool:
    """Run ``write(local_dir)`` (a deltalake commit) for a table at a local path; True once it
    committed (counted for ``SIMJOIN_FAULTS``). False when ``ref`` is not local or deltalake
    cannot (a writer feature or predicate it lacks): the caller then uses Spark, and the log says so."""
    local = local_dir(ref)
    if local is None:
        return False
    try:
        write(local)
    except faults.InjectedFault:
        raise
    except Exception as e:  # a table or predicate deltalake cannot handle: Spark does it
        log.info("delta: %s on %s runs on Spark: deltalake cannot (%s)", what, ref,
                 str(e).splitlines()[0][:200] if str(e) else type(e).__name__)
        return False
    faults.after_commit(ref)
    return True


class NotLocal(LookupError):
    """A table this process cannot read with ``deltalake`` (not local, or a feature it lacks): the
    caller reads it with Spark."""


def read_arrow(ref: str, where: Any = None, columns: Sequence[str] | None = None) -> Any:
    """A table at a local path read in this process with ``deltalake`` (``where``: its
    ``filters``), as a pyarrow Table; None when there is no table. Raises ``NotLocal`` when the
    table is not local or deltalake cannot read it (``NotLocal``; the caller then reads it with Spark)."""
    local = local_dir(ref)
    if local is None:
        raise NotLocal(f"{ref} is not a local table")
    if not os.path.isdir(os.path.join(local, "_delta_log")):
        return None
    try:

        return delta_files.read_kept(local, where, None if columns is None else list(columns))
    except Exception as e:  # a reader feature deltalake lacks
        raise NotLocal(f"deltalake cannot read {ref}: {e}") from e


@dataclass(frozen=True)
class Files:
    """Parquet files tasks wrote into a table's directory (``delta_files.write_file`` rows, paths
    relative to ``root``), in ``schema``'s columns, that no commit names yet."""

    root: str
    schema: Any  # pyarrow.Schema
    rows: tuple[dict[str, Any], ...]

    @property
    def paths(self) -> list[str]:
        return [os.path.join(self.root, r["path"]) for r in self.rows if int(r["n"]) > 0]

    @property
    def n(self) -> int:
        return sum(int(r["n"]) for r in self.rows)


def file_target(ref: str, schema: Any) -> tuple[str, Any] | None:
    """Where tasks may write files for ``ref`` (``delta_files.write_file``): its local directory and
    the Arrow schema its files need (the table's, or ``schema`` for a new table); None when the
    table is not local, task writes are off, or the table's columns or partitioning differ."""
    local = local_dir(ref)
    if local is None or not delta_files.ENABLED:
        return None
    try:
        return local, delta_files.target_schema(local, schema)
    except delta_files.Unsupported as e:
        log.info("delta: tasks write no files for %s: %s", ref, e)
        return None


def write_parts(ref: str, parts: Sequence[Any]) -> Files | None:
    """Each pyarrow Table of ``parts`` as its own Parquet file in ``ref``'s directory, for
    ``publish`` to commit all in one transaction; None when no files can be written there (not
    local, task writes off, other columns or a partitioned table): then append the rows instead.

    A DELETE whose rows fill whole files drops those files without rewriting anything: state that
    expires part by part (an inequality join's PO-Join batches, a window's tuples) written one
    part per file expires without copying the parts that stay."""
    parts = [t for t in parts if t.num_rows]
    if not parts:
        return None
    target = file_target(ref, parts[0].schema)
    if target is None:
        return None
    root, schema = target
    rows = tuple(delta_files.write_file(root, t.select(schema.names).cast(schema)) for t in parts)
    return Files(root, schema, rows)


def overwrite_arrow(t: Any, local: str) -> None:
    """Replace the whole table at the local directory ``local`` by the pyarrow Table ``t``: one
    ``deltalake`` commit (its schema replaced too; a new table gets the owner mark)."""
    from deltalake import write_deltalake

    faults.check_rows(t.num_rows)
    exists = os.path.isdir(os.path.join(local, "_delta_log"))
    write_deltalake(delta_files.open_table(local) if exists else local, t, mode="overwrite",
                    schema_mode="overwrite" if exists else None,
                    description=None if exists else delta_files.owner_description(),
                    writer_properties=delta_files.writer_properties(t.schema))


_COMMIT = re.compile(r"^[0-9]{20}\.(json|checkpoint(\.[0-9]+\.[0-9]+)?\.parquet)$")


def has_commit(local: str) -> bool:
    """Whether the local directory holds a Delta table: a ``_delta_log`` with a commit or checkpoint."""
    log_dir = os.path.join(local, "_delta_log")
    return any(_COMMIT.match(os.path.basename(f)) for f in glob.glob(os.path.join(log_dir, "0*")))


def sql_literal(v: Any) -> str:
    """A partition value as a SQL literal (a Delta predicate's)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return "'" + str(v).replace("'", "''") + "'"


def overwrite_partition_arrow(t: Any, local: str, partition: Mapping[str, Any], merge_schema: bool = False) -> None:
    """Replace the rows of ``partition`` (column -> value; added to ``t`` where missing) in the table
    at the local directory ``local`` by the pyarrow Table ``t``: one ``deltalake`` commit. A new table
    is created, partitioned by the partition's columns, with the owner mark; an existing one keeps
    its own column types."""
    import pyarrow as pa
    from deltalake import write_deltalake

    if not partition:
        raise ValueError("a partition overwrite needs at least one partition column")
    for k, v in partition.items():
        if k not in t.column_names:
            t = t.append_column(k, pa.array([v] * t.num_rows, pa.string() if isinstance(v, str) else None))
    faults.check_rows(t.num_rows)  # a rows@N fault fails the write before its commit, as in a Spark task
    if not has_commit(local):
        write_deltalake(local, t, mode="overwrite", partition_by=list(partition),
                        description=delta_files.owner_description(),
                        writer_properties=delta_files.writer_properties(t.schema))
        return
    table = delta_files.open_table(local)
    have = pa.schema(table.schema().to_arrow())
    if set(have.names) == set(t.column_names):  # the table's own types (a Spark-made table's too)
        t = pa.Table.from_arrays([t.column(f.name).cast(f.type) for f in have], schema=have)
    cond = " AND ".join(f"{k} = {sql_literal(v)}" for k, v in partition.items())
    write_deltalake(table, t, mode="overwrite", predicate=cond, schema_mode="merge" if merge_schema else None,
                    writer_properties=delta_files.writer_properties(t.schema))


def read_version(local: str, version: int, columns: list[str], appended_since: int | None = None) -> Any:
    """``columns`` of the Delta table at the local directory ``local`` at ``version``, read with
    deltalake. With ``appended_since``, a boolean ``_appended``: the row is in a data file version
    ``appended_since`` did not have (as ``simjoin.spark.pins.appended`` tags rows on Spark: exact
    when the commits since only appended)."""
    import numpy as np
    import pyarrow as pa
    from deltalake import DeltaTable

    dt = DeltaTable(local, version=version)
    if appended_since is None:
        return dt.to_pyarrow_table(columns=columns)
    from urllib.parse import unquote

    def names(t: DeltaTable) -> set[str]:
        return {unquote(f) for f in t.get_add_actions(flatten=True).column("path").to_pylist()}

    old, now = names(DeltaTable(local, version=appended_since)), names(dt)
    ds = dt.to_pyarrow_dataset()
    parts, flags = [], []
    for frag in ds.get_fragments():
        if frag.path not in now:  # a name this reader spells otherwise than the log: never guess
            raise RuntimeError(f"{local}: the data file {frag.path} is not named in the Delta log as read; "
                               "run with --executor spark")
        got = frag.to_table(columns=columns)
        parts.append(got)
        flags.append(np.full(got.num_rows, frag.path not in old))
    t = pa.concat_tables(parts) if parts else pa.schema(ds.schema).empty_table().select(columns)
    new = np.concatenate(flags) if flags else np.zeros(0, bool)
    return t.append_column("_appended", pa.array(new, pa.bool_()))


#: A row condition as data: rows that match any of the conjunctions, each a list of
#: ``(column, op, value)`` (ops ``= != < <= > >=``, and ``in`` with a list of values).
AnyOf = Sequence[Sequence[tuple[str, str, Any]]]

_PREDICATE_OPS = ("=", "!=", "<", "<=", ">", ">=", "in")


def predicate(any_of: AnyOf) -> str | None:
    """``any_of`` as one SQL condition both Delta engines read (deltalake's DataFusion, Spark): the
    runtime writes it, a pipeline never does. A timezone-aware datetime is an ISO instant with its
    offset; None when ``any_of`` matches nothing."""
    import datetime as dt

    def lit(v: Any) -> str:
        if isinstance(v, dt.datetime):
            if v.tzinfo is None:
                raise ValueError(f"a naive datetime in a row condition: {v!r}; allowed a timezone-aware one")
            return f"'{v.isoformat()}'"
        return sql_literal(v)

    ors = []
    for conj in any_of:
        ands = []
        for col, op, v in conj:
            if op not in _PREDICATE_OPS or not str(col).replace("_", "").isalnum():
                raise ValueError(f"row condition ({col!r}, {op!r}, ...): allowed a column name and one of "
                                 f"{', '.join(_PREDICATE_OPS)}")
            ands.append(f"{col} IN ({', '.join(lit(x) for x in v)})" if op == "in" else f"{col} {op} {lit(v)}")
        if ands:
            ors.append("(" + " AND ".join(ands) + ")")
    return " OR ".join(ors) or None


def files_table(files: Files) -> Any:
    """The rows of ``files`` as one pyarrow Table, read in this process."""
    import pyarrow as pa

    parts = [delta_files.read_parquet(p).select(files.schema.names).cast(files.schema) for p in files.paths]
    return pa.concat_tables(parts) if parts else files.schema.empty_table()
