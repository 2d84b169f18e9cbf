"""Delta writes by Spark's tasks with deltalake's commit: a DataFrame written as Parquet files by
its own tasks (``mapInArrow``) and committed in one ``deltalake`` transaction
(``simjoin.io.delta_files``: the commit, the files' statistics, the owner mark)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame

from simjoin import faults
from simjoin.io.delta_files import (
    _FILE_SCHEME,
    FILES_SCHEMA,
    Unsupported,
    _commit,
    _delta_fields,
    _part_value,
    _write_task,
    committed,
    log,
    open_table,
)

__all__ = ["write", "file_key_col"]


def file_key_col(uri: Any) -> Any:
    """:func:`file_key` of a percent-encoded URI column (``_metadata.file_path``): decoded once, in
    Spark SQL. ``url_decode`` is form decoding (``+`` reads as a space), so a ``+`` is escaped first."""
    from pyspark.sql import functions as F

    decoded = F.url_decode(F.replace(uri, F.lit("+"), F.lit("%2B")))
    return F.regexp_replace(decoded, _FILE_SCHEME, "")



_PART_TYPES = ('"string"', '"long"', '"integer"', '"short"', '"byte"', '"boolean"')


def write(df: DataFrame, local: str, *, app_id: str | None = None, version: int | None = None,
          partition: Mapping[str, Any] | None = None, partition_by: list[str] | None = None,
          replace: bool = False, metadata: str | None = None, exists: bool, packed: Any = None,
          transform: Any = None) -> None:
    """Write ``df`` to the Delta table at the local directory ``local``: an append once per
    (``app_id``, ``version``), or - with ``partition`` - the replacement of that partition, or -
    with ``replace`` - of every row (the same columns and partitioning). A new table is created,
    partitioned by ``partition_by`` (or the partition's columns). Raises ``Unsupported`` (nothing
    written) when the table's columns differ from the frame's, or its partitioning from the
    write's: the caller uses Spark. ``packed``: the Arrow schema of the rows when ``df`` holds them
    packed (``simjoin.spark.executor.Packed``), the partition's columns added by the tasks, each
    packed partition's rows first through ``transform(rows, part)`` when given."""
    import pyarrow as pa
    from deltalake import Schema
    from pyspark.sql.pandas.types import to_arrow_schema

    if packed is not None:
        have = set(packed.names)
        arrow = pa.schema([*packed, *(pa.field(c, pa.scalar(v).type) for c, v in (partition or {}).items()
                                      if c not in have)])
    else:
        arrow = to_arrow_schema(df.schema, timezone="UTC")
    want = Schema.from_arrow(arrow)
    table = open_table(local) if exists else None
    if table is not None:
        if _delta_fields(table.schema()) != _delta_fields(want):
            raise Unsupported("the frame's columns differ from the table's")
        part_cols = list(table.metadata().partition_columns)
        if replace and sorted(part_cols) != sorted(partition_by or []):
            raise Unsupported(f"the table is partitioned by {part_cols}, the overwrite by {partition_by or []}")
        if app_id is not None and version is not None and committed(table, app_id, version):
            return  # committed before (a rerun): skipped, as Spark skips a txn it has seen
        full = pa.schema(table.schema().to_arrow())
    else:
        part_cols = list(partition_by or list(partition or {}))
        full = pa.schema(want.to_arrow())
    if partition is not None and sorted(partition) != sorted(part_cols):
        raise Unsupported(f"the table is partitioned by {part_cols}, not by {sorted(partition)}")
    types = _delta_fields(want)
    if any(types[c] not in _PART_TYPES for c in part_cols):
        raise Unsupported(f"partition columns {part_cols} of a type the task writer does not write")
    expect = {c: _part_value(partition[c]) for c in part_cols} if partition is not None else None
    task = _write_task(local, full.serialize().to_pybytes(), part_cols, expect,
                       dict(partition or {}) if packed is not None else None, transform)
    try:
        got = faults.wrap_rows(df).mapInArrow(task, FILES_SCHEMA).collect()
    except Exception as e:
        faults.reraise_injected(e)
        raise
    _commit(local, want, got, table=table, part_cols=part_cols, app_id=app_id, version=version,
            metadata=metadata, overwrite=partition is not None or replace,
            filters=[(c, "=", expect[c]) for c in part_cols] if expect else None)
    log.info("delta: %d rows in %d files written by the tasks, committed to %s", sum(int(r["n"]) for r in got),
             sum(1 for r in got if int(r["n"]) > 0), local)
