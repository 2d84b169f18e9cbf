"""Delta Lake I/O: read by path or table name (optionally at a version), idempotent
overwrite of one partition (``replaceWhere``), idempotent append (``txnAppId``/``txnVersion``),
MERGE for state tables, DELETE, and history.

Everything goes through the DataFrame reader/writer and Delta's SQL (``MERGE INTO``,
``DELETE FROM``, ``DESCRIBE HISTORY``), never the ``DeltaTable`` object API, so that the same
code runs on a local Spark and on the warm Spark over Spark Connect (whose server needs a
separate Delta Connect plugin for ``DeltaTable``).
"""

from __future__ import annotations

import contextvars
import json
import os
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np
from pyspark.sql import DataFrame, SparkSession

from simjoin import faults
from simjoin.io import delta_files
from simjoin.io.rows import rows_table
from simjoin.io.tables import (
    Files,
    NotLocal,
    abs_ref,
    by_deltalake,
    file_target,
    has_commit,
    is_path,
    local_dir,
    read_arrow,
    sql_literal,
    write_parts,
)
from simjoin.log import get_logger
from simjoin.spark import delta_tasks

__all__ = [
    "is_path",
    "table_exists",
    "read_table",
    "columns",
    "overwrite",
    "overwrite_partition",
    "append_idempotent",
    "merge",
    "delete",
    "history",
    "latest_version",
    "background_writes",
    "small_rows",
    "read_arrow_any",
    "read_small",
    "overwrite_rows",
    "append_rows",
    "Files",
    "file_target",
    "write_parts",
    "files_frame",
    "append_files",
]

_local = threading.local()
log = get_logger("simjoin.delta")


@contextmanager
def background_writes(max_workers: int = 3) -> Iterator[None]:
    """Inside this block, ``overwrite_partition`` runs as concurrent Spark jobs in background
    threads (the driver is otherwise idle while a table commits); leaving the block waits for
    every write and re-raises the first failure. Only for tables the block does not read back."""
    pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="delta-write")
    futures: list[Future[None]] = []
    # each write runs in the submitting stage's context (fault injection counts its commits)
    _local.submit = lambda fn, *a: futures.append(pool.submit(contextvars.copy_context().run, fn, *a))
    _local.futures = futures
    try:
        yield
    finally:
        _local.submit = _local.futures = None
        pool.shutdown(wait=True)
    for f in futures:
        f.result()


@contextmanager
def in_order() -> Iterator[None]:
    """Commits that must land one after another (an output, then the record that it is complete):
    inside ``background_writes``, first wait for every write submitted so far (re-raising its
    failure), then write synchronously, in program order, until the block ends."""
    submit, futures = getattr(_local, "submit", None), getattr(_local, "futures", None)
    for f in list(futures or []):
        f.result()
    _local.submit = None
    try:
        yield
    finally:
        _local.submit = submit


def table_exists(spark: SparkSession, ref: str) -> bool:
    """A Delta table at a path (a ``_delta_log`` with a commit or checkpoint) or of a name."""
    if not is_path(ref):
        return bool(spark.catalog.tableExists(ref))
    path = abs_ref(ref)
    if path.startswith("file:") or "://" not in path:
        return has_commit(path.removeprefix("file://").removeprefix("file:"))
    try:  # object stores: ask Delta
        row = spark.sql(f"DESCRIBE DETAIL {_sql_ref(ref)}").select("format").first()
    except Exception:  # any failure to describe means no Delta table there
        return False
    return row is not None and row[0] == "delta"


def small_rows(spark: SparkSession, ref: str) -> list[dict[str, Any]]:
    """Every row of a small table (a run's bookkeeping: pins, increments), as dicts; none if there is
    no table. A local table is read with ``deltalake``, from its log and files, with no Spark job:
    the first Spark read of a table builds its snapshot with Spark jobs, about a second each on a
    cold JVM. Other tables, or a table deltalake cannot read, are read with Spark."""
    if not table_exists(spark, ref):
        return []
    local = local_dir(ref)
    if local is not None:
        try:
            return delta_files.open_table(local).to_pyarrow_table().to_pylist()  # type: ignore[no-any-return]
        except Exception:  # a reader feature deltalake lacks: Spark reads every Delta table it writes
            pass
    return [r.asDict() for r in read_table(spark, ref).collect()]


#: A state table up to this size (its files' bytes) is read with deltalake into a local DataFrame.
SMALL_TABLE_BYTES = int(os.environ.get("SIMJOIN_SMALL_TABLE_BYTES", str(4 << 20)))


def read_small(spark: SparkSession, ref: str, where: Any = None) -> DataFrame | None:
    """A small table at a local path, read with ``deltalake`` (``where``: its ``filters``, e.g.
    ``[("unit", "<", 3)]``) into a local DataFrame with the Spark schema of the Delta log; None
    when the table is not local, larger than ``SMALL_TABLE_BYTES``, or deltalake cannot read it.
    Spark's first read of a table costs snapshot and file-filtering jobs (a second or more on 2
    cores); a stage that reads a few state tables per unit pays that every unit."""
    local = local_dir(ref)
    if local is None or not table_exists(spark, ref):
        return None
    try:
        import json

        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        dt = delta_files.open_table(local)
        if sum(dt.get_add_actions(flatten=True).column("size_bytes").to_pylist()) > SMALL_TABLE_BYTES:
            return None
        schema = T.StructType.fromJson(json.loads(dt.schema().to_json()))
        from simjoin.spark.session import arrow_frame

        df = arrow_frame(spark, dt.to_pyarrow_table(filters=where).select(schema.names))
        return df.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])
    except Exception as e:  # a reader feature or a type deltalake or Arrow lacks: Spark reads it
        log.info("delta: %s is read with Spark: deltalake cannot (%s)", ref,
                 str(e).splitlines()[0][:200] if str(e) else type(e).__name__)
        return None


OPS = {"<": "__lt__", "<=": "__le__", ">": "__gt__", ">=": "__ge__", "=": "__eq__", "==": "__eq__",
        "!=": "__ne__"}


def read_arrow_any(spark: Any, ref: str, where: Any = None, columns: Sequence[str] | None = None) -> Any:
    """:func:`read_arrow`, and for a table this process cannot read with ``deltalake`` (not local,
    a feature it lacks) the same rows read with Spark into the driver: the one reader of a unit's
    state and work tables on either executor. ``where``: a conjunction of ``(column, op, value)``
    (ops ``< <= > >= = != in``). ``spark``: a session, or a callable that gives one (asked only
    when Spark reads)."""
    try:
        return read_arrow(ref, where, columns)
    except NotLocal as e:
        log.info("delta: %s is read with Spark: %s", ref, e)
    from pyspark.sql import functions as F

    session = spark() if callable(spark) else spark
    if not table_exists(session, ref):
        return None
    df = read_table(session, ref)
    for c, op, v in where or ():
        col = F.col(c)
        df = df.where(col.isin(list(v)) if op == "in" else getattr(col, OPS[op])(v))
    return (df if columns is None else df.select(*columns)).toArrow()


def owner(spark: SparkSession, ref: str) -> str | None:
    """The pipeline that owns the existing table ``ref`` (``delta_files.OWNER`` in its description,
    set in the commit that created it), or None when it is unmarked: from the Delta log with
    ``deltalake`` when local (no Spark), else Spark's ``DESCRIBE DETAIL``."""
    local = local_dir(ref)
    if local is not None:
        try:

            md = delta_files.open_table(local).metadata()
            return delta_files.owner_of(md.description, md.configuration)
        except Exception:  # a reader feature deltalake lacks: Spark reads it
            pass
    row = spark.sql(f"DESCRIBE DETAIL {_sql_ref(ref)}").select("description", "properties").first()
    return None if row is None else delta_files.owner_of(row[0], row[1])


def columns(spark: SparkSession, ref: str) -> list[str]:
    """The column names of an existing table: from its Delta log with ``deltalake`` when local
    (no Spark), else from Spark."""
    local = local_dir(ref)
    if local is not None:
        try:

            return [f.name for f in delta_files.open_table(local).schema().fields]
        except Exception:  # a reader feature deltalake lacks: Spark reads it
            pass
    return list(read_table(spark, ref).columns)


def _sql_ref(ref: str) -> str:
    """A table in Delta SQL: ``delta.`/abs/path``` or the table name."""
    if is_path(ref):
        return "delta.`" + abs_ref(ref).replace("`", "``") + "`"
    return ref


def read_table(
    spark: SparkSession, ref: str, version: int | None = None, timestamp: str | None = None
) -> DataFrame:
    """Read a Delta table by path or name; ``version``/``timestamp`` time-travel."""
    if not table_exists(spark, ref):
        raise FileNotFoundError(f"no Delta table at {ref!r}")
    r = spark.read.format("delta")
    if version is not None:
        if version < 0:
            raise ValueError(f"invalid version {version}: allowed >= 0")
        r = r.option("versionAsOf", int(version))
    if timestamp is not None:
        r = r.option("timestampAsOf", timestamp)
    if is_path(ref):
        return r.load(abs_ref(ref))
    if version is None and timestamp is None:
        return spark.table(ref)
    return r.table(ref)


def _writer(df: DataFrame, mode: str, partition_by: Sequence[str] | None, options: Mapping[str, Any]):
    w = faults.wrap_rows(df).write.format("delta").mode(mode)
    for k, v in options.items():
        w = w.option(k, str(v))
    if partition_by:
        w = w.partitionBy(*partition_by)
    return w


def _save(w: Any, ref: str) -> None:
    """Commit ``w`` to ``ref``; every commit is counted for ``SIMJOIN_FAULTS`` (``simjoin.faults``)."""
    try:
        if is_path(ref):
            w.save(abs_ref(ref))
        else:
            w.saveAsTable(ref)
    except Exception as e:
        faults.reraise_injected(e)
        raise
    faults.after_commit(ref)


def overwrite(df: DataFrame, ref: str, partition_by: Sequence[str] | None = None,
              overwrite_schema: bool = True, options: Mapping[str, Any] | None = None) -> None:
    """Replace the whole table (a rerun gives the same table, never duplicates). ``options``:
    more writer options, e.g. ``userMetadata`` recorded in the commit."""
    opts = {**({"overwriteSchema": "true"} if overwrite_schema else {}), **(options or {})}
    if set(options or {}) <= {"userMetadata"}:
        exists = table_exists(df.sparkSession, ref)
        if _by_task_files(ref, "the overwrite", lambda local: delta_tasks.write(
                df, local, replace=True, partition_by=list(partition_by or []),
                metadata=(options or {}).get("userMetadata"), exists=exists)):
            return
    _save(_writer(df, "overwrite", partition_by, opts), ref)


def overwrite_packed(df: DataFrame, schema: Any, rows: Any, ref: str, partition: Mapping[str, Any],
                     merge_schema: bool = False, transform: Any = None) -> None:
    """:func:`overwrite_partition` of packed rows (``simjoin.spark.executor.Packed``: ``df`` of
    Arrow IPC values of ``schema``, the partition's columns not in them): a local table's files
    are written by the tasks straight from the packed values (no Spark rows); elsewhere, or when
    the task writer cannot write the table, Spark writes ``rows()`` (a DataFrame of the rows with
    the partition's columns). ``transform(rows, part)``: what each partition's rows go through
    first (the executor's lazy maps)."""
    submit = getattr(_local, "submit", None)
    if submit is not None:
        submit(_overwrite_packed_now, df, schema, rows, ref, dict(partition), merge_schema, transform)
        return
    _overwrite_packed_now(df, schema, rows, ref, partition, merge_schema, transform)


def _overwrite_packed_now(df: DataFrame, schema: Any, rows: Any, ref: str, partition: Mapping[str, Any],
                          merge_schema: bool, transform: Any = None) -> None:
    exists = table_exists(df.sparkSession, ref)
    if _by_task_files(ref, "the partition overwrite", lambda local: delta_tasks.write(
            df, local, partition=partition, exists=exists, packed=schema, transform=transform)):
        return
    _overwrite_partition_now(rows(), ref, partition, merge_schema)


def overwrite_partition(df: DataFrame, ref: str, partition: Mapping[str, Any], merge_schema: bool = False) -> None:
    """Overwrite exactly the rows matching ``partition`` (e.g. ``{"run_id": "r1"}``) with ``replaceWhere``.

    The table is partitioned by the partition's columns on first write. Reruns of the
    same partition replace it, so a retried task never duplicates output. ``merge_schema``
    adds new columns to a table written by an older version (its old rows read them as null).
    """
    submit = getattr(_local, "submit", None)  # thread-local: the writer threads write synchronously
    if submit is not None:
        _check_partition(df, partition)
        submit(_overwrite_partition_now, df, ref, dict(partition), merge_schema)
        return
    _overwrite_partition_now(df, ref, partition, merge_schema)


def _check_partition(df: DataFrame, partition: Mapping[str, Any]) -> None:
    if not partition:
        raise ValueError("overwrite_partition needs at least one partition column")
    have = df.columns  # one schema call (a round trip on Spark Connect)
    missing = [c for c in partition if c not in have]
    if missing:
        raise ValueError(f"partition columns {missing} are not in the DataFrame columns {have}")


def _overwrite_partition_now(df: DataFrame, ref: str, partition: Mapping[str, Any], merge_schema: bool = False) -> None:
    _check_partition(df, partition)
    spark = df.sparkSession
    exists = table_exists(spark, ref)
    if _by_task_files(ref, "the partition overwrite", lambda local: delta_tasks.write(
            df, local, partition=partition, exists=exists)):
        return
    if not exists:
        _save(_writer(df, "overwrite", list(partition), {}), ref)
        return
    cond = " AND ".join(f"`{k}` = {sql_literal(v)}" for k, v in partition.items())
    _save(_writer(df, "overwrite", None, {"replaceWhere": cond, **({"mergeSchema": "true"} if merge_schema else {})}),
          ref)


def overwrite_rows(spark: SparkSession, rows: Sequence[Sequence[Any]], schema: str, ref: str,
                   partition: Mapping[str, Any], merge_schema: bool = False) -> None:
    """``overwrite_partition`` of a few driver-side rows (a run's bookkeeping: pins, plan, stats):
    the same table, partition and guarantees. A local table is written with ``deltalake``: one
    commit in milliseconds, where Spark's write of a tiny frame takes a second or more of small jobs
    (snapshot, file filter, write, commit) on 2 cores. Elsewhere, or if deltalake cannot write
    the table (a writer feature it lacks), Spark writes it."""
    if not partition:
        raise ValueError("overwrite_rows needs at least one partition column")
    if by_deltalake(ref, "the write", lambda local: _overwrite_rows_deltalake(
            rows, schema, local, partition, merge_schema, table_exists(spark, ref))):
        return
    from simjoin.spark.session import small_frame

    overwrite_partition(small_frame(spark, list(rows), schema), ref, partition, merge_schema=merge_schema)


def _overwrite_rows_deltalake(rows: Sequence[Sequence[Any]], schema: str, path: str, partition: Mapping[str, Any],
                              merge_schema: bool, exists: bool) -> None:
    from simjoin.io import tables

    tables.overwrite_partition_arrow(rows_table(rows, schema), path, partition, merge_schema)


def overwrite_partition_arrow(spark: Any, t: Any, ref: str, partition: Mapping[str, Any],
                              merge_schema: bool = False) -> None:
    """:func:`overwrite_partition` of a pyarrow Table (the partition's columns are added to it):
    the same table, partition and guarantees, written with ``deltalake`` for a local table (no
    Spark), else by Spark. Inside ``background_writes`` it runs in a writer thread."""
    import pyarrow as pa

    if not partition:
        raise ValueError("overwrite_partition_arrow needs at least one partition column")
    for k, v in partition.items():
        if k not in t.column_names:
            t = t.append_column(k, pa.array([v] * t.num_rows, pa.string() if isinstance(v, str) else None))
    submit = getattr(_local, "submit", None)
    if submit is not None:
        submit(_overwrite_partition_arrow_now, spark, t, ref, dict(partition), merge_schema)
        return
    _overwrite_partition_arrow_now(spark, t, ref, partition, merge_schema)


def _overwrite_partition_arrow_now(spark: Any, t: Any, ref: str, partition: Mapping[str, Any],
                                   merge_schema: bool) -> None:
    if by_deltalake(ref, "the partition overwrite", lambda local: _overwrite_rows_deltalake(
            t, "", local, partition, merge_schema, table_exists(spark, ref))):
        return
    from simjoin.spark.session import arrow_frame, real_session

    _overwrite_partition_now(arrow_frame(real_session(spark), t), ref, partition, merge_schema)


def overwrite_arrow(spark: SparkSession, t: Any, ref: str) -> None:
    """Replace the whole table at ``ref`` (a unit's work table) by the pyarrow Table ``t``: one
    ``deltalake`` commit for a local table (``simjoin.io.tables.overwrite_arrow``), else Spark's
    overwrite."""
    from simjoin.io import tables

    if by_deltalake(ref, "the overwrite", lambda local: tables.overwrite_arrow(t, local)):
        return
    from simjoin.spark.session import arrow_frame

    overwrite(arrow_frame(spark, t), ref)


def append_idempotent(df: DataFrame, ref: str, app_id: str, version: int,
                      partition_by: Sequence[str] | None = None, options: Mapping[str, Any] | None = None) -> None:
    """Append once per (app_id, version): Delta skips a write whose txn it has already committed.
    ``options``: more writer options, e.g. ``userMetadata`` recorded in the commit. A local table
    whose columns the frame has is written by the tasks with pyarrow and committed with deltalake
    (``simjoin.io.delta_files``); otherwise by Spark's Delta writer."""
    opts = {**(options or {}), "txnAppId": app_id, "txnVersion": int(version)}
    spark = df.sparkSession
    exists = table_exists(spark, ref)
    if set(options or {}) <= {"userMetadata", "mergeSchema"} and _by_task_files(
            ref, "the append", lambda local: delta_tasks.write(
                df, local, app_id=app_id, version=int(version), partition_by=list(partition_by or []),
                metadata=opts.get("userMetadata"), exists=exists)):
        return
    by = partition_by if not exists else None
    _save(_writer(df, "append", by, opts), ref)


def files_frame(spark: SparkSession, files: Files) -> DataFrame:
    """The rows of ``files``, read by Spark from their Parquet files."""
    from pyspark.sql.pandas.types import from_arrow_schema

    struct = from_arrow_schema(files.schema)
    paths = files.paths
    if not paths:
        return spark.createDataFrame([], struct)
    return spark.read.schema(struct).parquet(*paths)


def append_files(spark: SparkSession, files: Files, ref: str, app_id: str, version: int) -> None:
    """Append ``files`` to ``ref`` once per (app_id, version): one deltalake commit that names them
    (nothing is copied); where deltalake cannot commit, Spark appends their rows."""
    faults.check_rows(files.n)
    try:
        delta_files.commit_files(files.root, files.schema, list(files.rows), app_id=app_id, version=int(version))
    except delta_files.Unsupported as e:
        log.info("delta: the files for %s are appended by Spark: %s", ref, e)
        append_idempotent(files_frame(spark, files), ref, app_id, version)
        return
    faults.after_commit(ref)


def _by_task_files(ref: str, what: str, write: Any) -> bool:
    """Run ``write(local_dir)`` (``delta_tasks.write``) for a table at a local path; True once it
    committed (counted for ``SIMJOIN_FAULTS``). False when ``ref`` is not local, task writes are
    off, or the write is ``Unsupported`` (nothing was committed): the caller then uses Spark. A
    failure of the frame itself (its tasks) is raised, not retried with Spark."""
    local = local_dir(ref)
    if local is None or not delta_files.ENABLED:
        return False
    try:
        write(local)
    except delta_files.Unsupported as e:
        log.info("delta: %s on %s runs on Spark's writer: %s", what, ref, e)
        return False
    faults.after_commit(ref)
    return True


def merge(df: DataFrame, ref: str, keys: Sequence[str], delete_missing_in: str | None = None) -> None:
    """Upsert ``df`` into a state table on ``keys`` (creates the table on first use).
    ``delete_missing_in``: a condition on the target ``t``; its rows absent from ``df`` are deleted."""
    spark = df.sparkSession
    if not table_exists(spark, ref):
        overwrite(df, ref)
        return
    view = f"simjoin_merge_{uuid.uuid4().hex}"
    faults.wrap_rows(df).createOrReplaceTempView(view)
    cond = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys)
    sql = (f"MERGE INTO {_sql_ref(ref)} t USING {view} s ON {cond} "
           "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    if delete_missing_in:
        sql += f" WHEN NOT MATCHED BY SOURCE AND ({delete_missing_in}) THEN DELETE"
    try:
        spark.sql(sql).collect()
    except Exception as e:
        faults.reraise_injected(e)
        raise
    finally:
        spark.catalog.dropTempView(view)
    faults.after_commit(ref)


#: the most ids or ranges one DELETE condition names (:func:`id_conditions`)
MAX_ID_TERMS = 1000


def id_conditions(column: str, ids: Any) -> list[str]:
    """Conditions that together match ``column`` IN ``ids`` (integers): runs of consecutive ids
    as ranges, at most :data:`MAX_ID_TERMS` ids or ranges per condition, one DELETE each.
    delta-rs crashes the process (SIGSEGV, a stack overflow) on a condition naming about 20,000
    ids: a year of flights' backlog expired 27,457 inequality-join batches at once."""
    import numpy as np

    from simjoin.core.unique import unique

    v = unique(np.fromiter((int(i) for i in ids), dtype=np.int64))
    if not v.size:
        return []
    starts = np.flatnonzero(np.r_[True, np.diff(v) != 1])
    ends = np.r_[starts[1:], v.size] - 1
    pairs = list(zip(v[starts].tolist(), v[ends].tolist(), strict=True))
    singles = [a for a, b in pairs if a == b]
    ranges = [f"({column} >= {a} AND {column} <= {b})" for a, b in pairs if a != b]
    out = [f"{column} IN ({', '.join(map(str, singles[i:i + MAX_ID_TERMS]))})"
           for i in range(0, len(singles), MAX_ID_TERMS)]
    out += [" OR ".join(ranges[i:i + MAX_ID_TERMS]) for i in range(0, len(ranges), MAX_ID_TERMS)]
    return out


def delete(spark: SparkSession, ref: str, cond: str) -> None:
    """Delete the rows matching the SQL condition ``cond`` (nothing if there is no table).

    ``cond`` stays within what Spark SQL and delta-rs (DataFusion) read alike: column names,
    integer and quoted string literals (a timestamp as an ISO string with its offset, which both
    cast to the column's type), comparisons, ``IN``, ``AND``/``OR``/``NOT``. A local table is
    rewritten with ``deltalake`` (tens of milliseconds where Spark's DELETE takes a second or
    more of jobs); elsewhere, or if deltalake cannot, Spark deletes."""
    if not table_exists(spark, ref):
        return

    def rewrite(local: str) -> None:

        delta_files.open_table(local).delete(cond)

    if by_deltalake(ref, "DELETE", rewrite):
        return
    spark.sql(f"DELETE FROM {_sql_ref(ref)} WHERE {cond}").collect()
    faults.after_commit(ref)


def history(spark: SparkSession, ref: str, limit: int | None = None) -> DataFrame:
    if not table_exists(spark, ref):
        raise FileNotFoundError(f"no Delta table at {ref!r}")
    return spark.sql(f"DESCRIBE HISTORY {_sql_ref(ref)}" + (f" LIMIT {int(limit)}" if limit else ""))


def history_rows(spark: Any, ref: str) -> list[dict[str, Any]]:
    """The table's commits, newest first: ``version``, ``timestamp_ms``, ``operation`` and
    ``operationParameters`` (string values). From a local table's log with deltalake (no Spark),
    else Spark's ``DESCRIBE HISTORY``."""
    local = local_dir(ref)
    if local is not None and table_exists(spark, ref):
        try:
            got = delta_files.open_table(local).history()
            return [{"version": int(h["version"]), "timestamp_ms": int(h["timestamp"]), "operation": h.get("operation"),
                     "operationParameters": {k: v if isinstance(v, str) else json.dumps(v)
                                             for k, v in (h.get("operationParameters") or {}).items()}}
                    for h in got]
        except Exception as e:  # a reader feature deltalake lacks: Spark reads it
            log.info("delta: deltalake cannot read the history of %s (%s); Spark reads it", ref, e)
    from pyspark.sql import functions as F

    rows = history(spark, ref).select("version", F.floor(F.unix_micros("timestamp") / 1000).alias("ms"), "operation",
                                      "operationParameters").collect()
    return [{"version": int(r["version"]), "timestamp_ms": int(r["ms"]), "operation": r["operation"],
             "operationParameters": dict(r["operationParameters"] or {})} for r in rows]


def count_partition(spark: Any, ref: str, partition: Mapping[str, Any]) -> int:
    """Rows of ``ref`` in ``partition`` (0 without a table): from a local table's file statistics
    with deltalake (no data read), else counted by Spark."""
    if not table_exists(spark, ref):
        return 0
    local = local_dir(ref)
    if local is not None:
        try:
            dt = delta_files.open_table(local)
            if not set(dt.protocol().reader_features or []) & {"deletionVectors"}:
                acts = dt.get_add_actions(flatten=True)
                keep = np.ones(acts.num_rows, bool)
                for k, v in partition.items():
                    keep &= np.array([x == str(v) for x in acts.column(f"partition.{k}").to_pylist()], bool)
                n = np.asarray(acts.column("num_records").to_pylist(), dtype=float)[keep]
                if not np.isnan(n).any():
                    return int(n.sum())
        except Exception as e:  # no statistics or a feature deltalake lacks: Spark counts
            log.info("delta: %s is counted with Spark: %s", ref, e)
    from pyspark.sql import functions as F

    df = read_table(spark, ref)
    for k, v in partition.items():
        df = df.filter(F.col(k) == F.lit(v))
    return int(df.count())


def latest_version(spark: SparkSession, ref: str) -> int:
    """The table's newest version: read from a local table's log by deltalake (milliseconds),
    else (or when deltalake cannot read the table) by Spark's ``DESCRIBE HISTORY`` (a job)."""
    local = local_dir(ref)
    if local is not None and table_exists(spark, ref):
        try:

            return int(delta_files.open_table(local).version())
        except Exception as e:  # a reader feature deltalake lacks: Spark reads it
            log.info("delta: deltalake cannot read the version of %s (%s); Spark reads it", ref, e)
    return int(history(spark, ref, 1).select("version").first()[0])  # type: ignore[index]


def append_rows(spark: SparkSession, rows: Any, schema: str, ref: str, app_id: str, version: int,
                partition_by: Sequence[str] | None = None, metadata: str | None = None,
                merge_schema: bool = False) -> None:
    """``append_idempotent`` of a few driver-side rows (tuples in ``schema``'s order, or an Arrow
    table): once per (``app_id``, ``version``), the same ``txn`` action Spark's
    ``txnAppId``/``txnVersion`` writes, so either engine skips what the other committed.
    ``metadata`` is the commit's ``userMetadata``. A local table is written with ``deltalake``
    (one commit in milliseconds); elsewhere, or if deltalake cannot write it, Spark writes it."""
    def write(local: str) -> None:
        data = rows_table(rows, schema)
        faults.check_rows(data.num_rows)  # a rows@N fault fails the write before its commit
        _append_rows_deltalake(data, local, app_id, int(version), partition_by, metadata, merge_schema,
                               table_exists(spark, ref))

    if by_deltalake(ref, "the append", write):
        return
    from simjoin.spark.session import arrow_frame, small_frame

    df = arrow_frame(spark, rows).coalesce(1) if not isinstance(rows, (list, tuple)) \
        else small_frame(spark, list(rows), schema)
    opts: dict[str, Any] = {"userMetadata": metadata} if metadata is not None else {}
    if merge_schema:
        opts["mergeSchema"] = "true"
    append_idempotent(df, ref, app_id, version, partition_by, opts)


def _append_rows_deltalake(data: Any, path: str, app_id: str, version: int, partition_by: Sequence[str] | None,
                           metadata: str | None, merge_schema: bool, exists: bool) -> None:
    from deltalake import CommitProperties, Transaction, write_deltalake

    table = delta_files.open_table(path) if exists else None
    if table is not None and delta_files.committed(table, app_id, version):
        return  # committed before (a rerun): skipped, as Spark skips a txn it has seen
    props = CommitProperties(app_transactions=[Transaction(app_id, version)],
                             custom_metadata={"userMetadata": metadata} if metadata is not None else None)
    write_deltalake(table if table is not None else path, data, mode="append",
                    partition_by=None if exists else (list(partition_by or []) or None),
                    schema_mode="merge" if merge_schema and exists else None, commit_properties=props,
                    description=None if exists else delta_files.owner_description(),
                    writer_properties=delta_files.writer_properties(data.schema))


def spark_schema(path: str, version: int) -> Any:
    """A stream's schema at ``version`` read from its Delta log (``delta_source.schema_json``) as a
    Spark ``StructType``. Raises ValueError when the table no longer qualifies."""
    from pyspark.sql import types as T

    from simjoin.io import delta_source

    return T.StructType.fromJson(json.loads(delta_source.schema_json(path, version)))
