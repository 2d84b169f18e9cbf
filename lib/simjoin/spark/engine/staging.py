"""Staging a micro-batch: the declared row rules (``simjoin.quality.rows``), quarantine,
duplicate ids against the live-id index, the staged unit - one Arrow function on both executors."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from simjoin.faults import maybe_fail
from simjoin.io.rows import arrow_schema
from simjoin.quality.rows import Checked, InputSpec, RowContext, check, measure, pick_meta
from simjoin.runtime.event_time import BatchInfo
from simjoin.spark import delta
from simjoin.spark.engine.base import EngineBase
from simjoin.spark.engine.units import QUARANTINE_SCHEMA, UTC, json_row, local_path, log, with_ts_raw

#: the live-id hook of a pipeline: (side, id) of its live state for a batch (a pyarrow Table, a
#: DataFrame, or None)
LiveIds = Callable[[BatchInfo], Any]


def quarantine_rows(t: pa.Table, payload: Sequence[str], unit: int, batch_key: str, schema: pa.Schema) -> pa.Table:
    """Rows with ``reason`` in ``QUARANTINE_SCHEMA`` (the payload as JSON in ``row``)."""
    t = with_ts_raw(t)
    n = t.num_rows
    rows = [json_row({c: t.column(c)[i].as_py() for c in payload}) if payload else None for i in range(n)]
    cols = {"side": t.column("side"), "id": t.column("id"), "ts": t.column("ts"), "ts_raw": t.column("ts_raw"),
            "row": pa.array(rows, pa.string()), "reason": t.column("reason"),
            "stage": pa.array(["ingest"] * n, pa.string()), "unit": pa.array(np.full(n, unit, np.int64)),
            "batch": pa.array([batch_key] * n, pa.string())}
    return pa.Table.from_arrays([cols[f.name].cast(f.type) for f in schema], schema=schema)


def unit_rows(got: Checked, payload: Sequence[str], unit: int, batch_id: int, batch_key: str, fingerprint: str,
              checkpoint_id: str, q_schema: pa.Schema) -> tuple[pa.Table, pa.Table]:
    """A checked batch as the rows the engine commits: the staged records (tagged with the unit,
    the batch, the meta and the state's identity) and the quarantined rows."""
    st, n = got.staged, got.staged.num_rows
    st = (st.append_column("unit", pa.array(np.full(n, unit, np.int64)))
          .append_column("batch_id", pa.array(np.full(n, batch_id, np.int64)))
          .append_column("meta", pa.array([json.dumps(got.meta, sort_keys=True)] * n, pa.string()))
          .append_column("fingerprint", pa.array([fingerprint] * n, pa.string()))
          .append_column("checkpoint_id", pa.array([checkpoint_id] * n, pa.string())))
    return st, quarantine_rows(got.bad, payload, unit, batch_key, q_schema)


def tagged_rows(parts: Iterator[pa.RecordBatch], schema: pa.Schema, spec: InputSpec, ctx: RowContext,
                meta: dict[str, Any], args: tuple[Any, ...]) -> Iterator[pa.RecordBatch]:
    """The Spark executor's staging task: one partition's rows (all of a (side, id) are in one)
    checked by :func:`check` as the in-process executor checks a whole batch, and answered as one
    table: ``_k`` 0 the staged records, 1 the quarantined rows, 2 the partition's row count."""
    batches = list(parts)
    t = pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()
    st, q = unit_rows(check(t, spec, ctx, meta), *args)
    n = pa.table({"_n": pa.array([t.num_rows], pa.int64())})
    pieces = [x.append_column("_k", pa.array(np.full(x.num_rows, k, np.int8))) for k, x in enumerate((st, q, n))]
    yield from pa.concat_tables(pieces, promote_options="default").to_batches()


class Staging(EngineBase):
    """Stages one micro-batch into the open unit by the pipeline's declared input; bad rows go
    to quarantine."""

    #: the pipeline's declared input and live-id hook (set by ``ingest``)
    _input: InputSpec | None = None
    _live: LiveIds | None = None
    #: the meta the run's earlier batches fixed (e.g. the vector dimension)
    _row_meta: dict[str, Any]

    def seen_keys(self, info: BatchInfo, live: Any) -> Any:
        """The live-id index: a pyarrow Table of the (side, id) a new row may not repeat, or
        None: ``live`` (a Table or a DataFrame of the pipeline's live state) and the unit's
        earlier rows, read with deltalake."""
        if live is not None and not isinstance(live, pa.Table):
            live = live.select("side", "id").toArrow()
        parts = [] if live is None else [live.select(["side", "id"])]
        try:
            earlier = delta.read_arrow(self.tables.records, [("unit", "=", int(info.unit)),
                                                             ("batch_id", "<", int(info.batch_id))], ["side", "id"])
        except delta.NotLocal:
            earlier = delta.read_table(self.spark, self.tables.records).where(
                (F.col("unit") == info.unit) & (F.col("batch_id") < info.batch_id)).select("side", "id").toArrow()
        if earlier is not None:
            parts.append(earlier)
        want = pa.schema([("side", pa.int8()), ("id", pa.int64())])
        parts = [t.cast(want) for t in parts if t.num_rows]
        if not parts:
            return None
        return pa.concat_tables(parts)  # repeats are harmless: the check only asks what it holds

    def _context(self, info: BatchInfo) -> RowContext:
        """What the batch's rules compare with (:class:`RowContext`), the live-id index included."""
        spec, p = self._input, info.progress
        assert spec is not None
        known = {k: p.meta.get(k) or getattr(self, "_row_meta", {}).get(k) for k in spec.meta_keys()}
        live = None if self._live is None else self._live(info)
        return RowContext(now=dt.datetime.now(UTC), max_future_s=self.max_future_s, ts_unit=self.ts_unit,
                          max_ts=dict(p.max_ts), lateness_s=p.lateness_s, watermark=p.watermark, meta=known,
                          seen=self.seen_keys(info, live))

    def _stage(self, batch: Any, batch_id: int, info: BatchInfo) -> dict[str, int]:
        """One micro-batch staged by the declared input: in this process when the tables are
        local (:meth:`_stage_arrow`), else by the Spark executor (:meth:`_stage_spark`)."""
        if self.local_tables():
            return self._stage_arrow(batch, batch_id, info)
        return self._stage_spark(batch, batch_id, info)

    def _payload(self, names: Sequence[str]) -> list[str]:
        return [c for c in names if c not in ("id", "ts", "ts_raw", "side")]

    def _stage_arrow(self, batch: Any, batch_id: int, info: BatchInfo) -> dict[str, int]:
        """The in-process executor: the batch as one pyarrow Table (read with pyarrow already, or
        by ONE Spark job, ``toArrow``), :func:`check`, and deltalake commits under the txn ids
        :meth:`_stage_spark` uses - no cache, count or write jobs (a second each on 2 cores)."""
        maybe_fail(f"{self.pipeline}.ingest.batch")
        t0 = time.perf_counter()
        raw = batch if isinstance(batch, pa.Table) else batch.toArrow()
        if isinstance(batch, pa.Table):  # a direct batch, read with pyarrow already: that read's time
            t_job = self._direct_read_s
            t0 -= t_job
        else:
            t_job = time.perf_counter() - t0
        assert self._input is not None
        got = check(raw, self._input, self._context(info))
        self._row_meta = got.meta
        batch_key = f"{info.checkpoint_id}-{batch_id}"
        st, q = unit_rows(got, self._payload(raw.schema.names), info.unit, batch_id, batch_key, self.fingerprint,
                          info.checkpoint_id, arrow_schema(QUARANTINE_SCHEMA))
        return self._commit_staged(st, q, raw.num_rows, batch_id, batch_key, info, t_job, t0)

    def _clear_quarantine(self, batch_key: str) -> None:
        """A batch without bad rows: its quarantine partition emptied (a replay's earlier rows
        go). The first batch creates the table, empty, so a monitoring query on a clean pipeline
        finds it (docs/operations.md); a local table that holds no row of the batch (its log's
        file statistics tell, no data read) needs no commit."""
        q = self.tables.quarantine
        if delta.table_exists(self.spark, q) and local_path(q) is not None \
                and delta.count_partition(self.spark, q, {"batch": batch_key}) == 0:
            return
        delta.overwrite_rows(self.spark, [], QUARANTINE_SCHEMA, q, {"batch": batch_key})

    def _commit_staged(self, st: Any, q: Any, n_rows: int, batch_id: int, batch_key: str, info: BatchInfo,
                       t_job: float, t0: float) -> dict[str, int]:
        """The staged rows and the quarantined ones of a batch checked in the driver: deltalake
        commits under the txn ids ``_stage_batch`` uses."""
        n_staged, n_bad = st.num_rows, q.num_rows
        if n_bad:
            delta.overwrite_rows(self.spark, q, QUARANTINE_SCHEMA, self.tables.quarantine, {"batch": batch_key})
        else:
            self._clear_quarantine(batch_key)
        # an empty (or all-quarantined) batch still creates the records table (see _stage_batch)
        if n_staged or not delta.table_exists(self.spark, self.tables.records):
            delta.append_rows(self.spark, st, "", self.tables.records, self.write_id("records", info.checkpoint_id),
                              batch_id)
        log.info("%s ingest micro-batch %d -> unit %d: %d rows, %d staged, %d quarantined (through the driver: "
                 "read %.2fs, checked and committed %.2fs)", self.pipeline, batch_id, info.unit, n_rows, n_staged,
                 n_bad, t_job, time.perf_counter() - t0 - t_job)
        return {"rows": n_rows, "staged": n_staged, "quarantined": n_bad}

    def _stage_spark(self, batch: DataFrame, batch_id: int, info: BatchInfo) -> dict[str, int]:
        """The Spark executor: the same :func:`check` in ``mapInArrow`` over the batch
        repartitioned by (side, id), after one small job for what the whole batch fixes (the
        vector dimension, when not known yet); the staged and quarantined rows are written by
        Spark under the txn ids :meth:`_stage_arrow` uses."""
        from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

        maybe_fail(f"{self.pipeline}.ingest.batch")
        spec = self._input
        assert spec is not None
        ctx = self._context(info)
        schema = to_arrow_schema(batch.schema, timezone="UTC")
        meta = dict(ctx.meta)
        if any(not meta.get(k) for k in spec.meta_keys()):
            def counts(it: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
                batches = list(it)
                t = pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()
                yield from measure(t, spec, ctx).to_batches()

            empty = measure(schema.empty_table(), spec, ctx)
            got = batch.mapInArrow(counts, from_arrow_schema(empty.schema, prefer_timestamp_ntz=False)).toArrow()
            meta = pick_meta(got, spec, meta)
        self._row_meta = meta
        batch_key = f"{info.checkpoint_id}-{batch_id}"
        args = (self._payload(batch.columns), info.unit, batch_id, batch_key, self.fingerprint, info.checkpoint_id,
                arrow_schema(QUARANTINE_SCHEMA))
        probe = pa.Table.from_batches(list(tagged_rows(iter([]), schema, spec, ctx, meta, args)))
        st_cols = unit_rows(check(schema.empty_table(), spec, ctx, meta), *args)[0].column_names
        q_cols = [f.name for f in args[-1]]
        tagged = (batch.repartition("side", "id")
                  .mapInArrow(lambda it: tagged_rows(it, schema, spec, ctx, meta, args),
                              from_arrow_schema(probe.schema, prefer_timestamp_ntz=False))
                  .cache())
        n = {r["_k"]: r["n"] for r in tagged.groupBy("_k").agg(F.sum(F.when(F.col("_k") == 2, F.col("_n"))
                                                                      .otherwise(F.lit(1))).alias("n")).collect()}
        n_staged, n_bad, n_rows = int(n.get(0, 0)), int(n.get(1, 0)), int(n.get(2, 0))
        qdf = tagged.where(F.col("_k") == 1).select(*q_cols)
        staged = tagged.where(F.col("_k") == 0).select(*st_cols)
        if n_bad:
            delta.overwrite_partition(qdf, self.tables.quarantine, {"batch": batch_key})
        else:
            self._clear_quarantine(batch_key)
        # an empty (or all-quarantined) batch still creates the records table: the checkpoint has
        # consumed it, and verify() must not take a missing table for lost input
        if n_staged or not delta.table_exists(self.spark, self.tables.records):
            delta.append_idempotent(staged, self.tables.records, self.write_id("records", info.checkpoint_id),
                                    batch_id)
        tagged.unpersist()
        log.info("%s ingest micro-batch %d -> unit %d: %d rows, %d staged, %d quarantined (Spark executor)",
                 self.pipeline, batch_id, info.unit, n_rows, n_staged, n_bad)
        return {"rows": n_rows, "staged": n_staged, "quarantined": n_bad}
