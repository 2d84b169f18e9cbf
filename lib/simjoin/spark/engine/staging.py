"""Staging a micro-batch: row rules, quarantine, duplicate ids against the live-id index, the staged unit."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from simjoin.faults import maybe_fail
from simjoin.spark import delta
from simjoin.spark.engine.base import EngineBase
from simjoin.spark.engine.units import (
    QUARANTINE_SCHEMA,
    UTC,
    BatchInfo,
    Prepare,
    PrepareArrow,
    epoch_us,
    json_row,
    log,
    spark_ts_string,
)


class Staging(EngineBase):
    """Stages one micro-batch into the open unit; bad rows go to quarantine."""

    def seen(self, info: BatchInfo, live: DataFrame | None) -> DataFrame | None:
        """(side, id) a new row may not repeat, with a true ``_seen`` column: ``live`` (the
        pipeline's live state, as (side, id)) and the rows staged earlier in this unit; None if neither."""
        if info.local:
            return self._seen_local(info, live)
        parts = [] if live is None else [live.select("side", "id")]
        if delta.table_exists(self.spark, self.tables.records):
            staged = delta.read_table(self.spark, self.tables.records)
            parts.append(staged.where((F.col("unit") == info.unit) & (F.col("batch_id") < info.batch_id))
                         .select("side", "id"))
        if not parts:
            return None
        out = parts[0]
        for p in parts[1:]:
            out = out.unionByName(p)
        return out.distinct().withColumn("_seen", F.lit(True))

    def _seen_local(self, info: BatchInfo, live: Any) -> DataFrame | None:
        """``seen`` for a batch staged through the driver: :meth:`seen_keys` as one small local
        DataFrame (broadcast into the batch's job), or None when there is nothing to compare with."""
        from simjoin.spark.session import arrow_frame

        keys = self.seen_keys(info, live)
        return None if keys is None else arrow_frame(self.spark, keys).withColumn("_seen", F.lit(True))

    def seen_keys(self, info: BatchInfo, live: Any) -> Any:
        """``seen`` as a pyarrow Table of distinct (side, id), or None: ``live`` (a Table or a
        DataFrame of the pipeline's live state) and the unit's earlier rows, read with deltalake."""
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
        return pa.concat_tables(parts).group_by(["side", "id"]).aggregate([])

    def _stage(self, batch: DataFrame, batch_id: int, info: BatchInfo, prepare: Prepare,
               follow: bool = False) -> dict[str, int]:
        """One micro-batch staged. Through the driver when the tables are local: with the
        pipeline's Arrow hook entirely (:meth:`_stage_arrow`), else in follow mode with one Spark
        job (``_stage_batch(local=True)``); otherwise by Spark's jobs and writes."""
        if self.local_tables():
            pa_prep = getattr(self, "_prepare_arrow", None)
            if pa_prep is not None:
                return self._stage_arrow(batch, batch_id, info, pa_prep)
            if follow:
                return self._stage_batch(batch, batch_id, info, prepare, local=True)
        return self._stage_batch(batch, batch_id, info, prepare)

    def _stage_arrow(self, batch: DataFrame, batch_id: int, info: BatchInfo, prepare: PrepareArrow) -> dict[str, int]:
        """``_stage_batch`` through the driver: the batch is read in ONE Spark job (``toArrow``),
        the engine's rules and the pipeline's Arrow hook check it here (the twins of the Column
        rules: same rows, same reasons), and the staged and quarantined rows are committed with
        ``deltalake`` under the same txn ids - no cache, count or write jobs (a second each on 2 cores)."""
        maybe_fail(f"{self.pipeline}.ingest.batch")
        t0 = time.perf_counter()
        raw = batch if isinstance(batch, pa.Table) else batch.toArrow()
        if isinstance(batch, pa.Table):  # a direct batch, read with pyarrow already: that read's time
            t_job = self._direct_read_s
            t0 -= t_job
        else:
            t_job = time.perf_counter() - t0
        now = dt.datetime.now(UTC)
        reason = self._engine_reasons(raw, now)
        ok = np.array([r == "" for r in reason], bool)
        good = raw.filter(pa.array(ok))
        bad = raw.filter(pa.array(~ok)).append_column("reason", pa.array([r for r in reason if r], pa.string()))
        prep = prepare(good, BatchInfo(info.unit, info.batch_id, info.progress, info.checkpoint_id, local=True))
        batch_key = f"{info.checkpoint_id}-{batch_id}"
        payload = [c for c in raw.schema.names if c not in ("id", "ts", "ts_raw", "side")]
        q_parts = [bad] + ([prep.bad] if prep.bad is not None and prep.bad.num_rows else [])
        q = pa.concat_tables([self._to_quarantine(x, payload, info.unit, batch_key) for x in q_parts])
        st: Any = prep.staged
        n = int(st.num_rows)
        st = (st.append_column("unit", pa.array(np.full(n, info.unit, np.int64)))
              .append_column("batch_id", pa.array(np.full(n, batch_id, np.int64)))
              .append_column("meta", pa.array([json.dumps(prep.meta, sort_keys=True)] * n, pa.string()))
              .append_column("fingerprint", pa.array([self.fingerprint] * n, pa.string()))
              .append_column("checkpoint_id", pa.array([info.checkpoint_id] * n, pa.string())))
        return self._commit_staged(st, q, raw.num_rows, batch_id, batch_key, info, t_job, t0)

    def _engine_reasons(self, raw: Any, now: dt.datetime) -> list[str]:
        """The engine's row rules on Arrow (first match, as ``_stage_batch``'s ``when`` chain)."""
        n = raw.num_rows
        id_null = np.asarray(raw.column("id").is_null().to_numpy(zero_copy_only=False), bool)
        raw_null = np.asarray(raw.column("ts_raw").is_null().to_numpy(zero_copy_only=False), bool)
        ts = raw.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        ts_null = np.asarray(ts.is_null().to_numpy(zero_copy_only=False), bool)
        ts_us = np.asarray(ts.fill_null(0).to_numpy(), np.int64)
        bound = epoch_us(now) + round(self.max_future_s * 1e6)
        out = [""] * n
        unit = f" (ts unit {self.ts_unit})" if self.ts_unit else ""
        for i in np.flatnonzero(id_null | raw_null | ts_null | (~ts_null & (ts_us > bound))).tolist():
            if id_null[i]:
                out[i] = "null id"
            elif raw_null[i]:
                out[i] = "null ts"
            elif ts_null[i]:
                out[i] = f"unreadable ts {raw.column('ts_raw')[i].as_py()}{unit}"
            else:
                out[i] = (f"future: ts {spark_ts_string(int(ts_us[i]))} is more than {self.max_future_s:g}s past the "
                          f"current time {now.isoformat()}")
        return out

    def _to_quarantine(self, t: Any, payload: Sequence[str], unit: int, batch_key: str) -> Any:
        """Rows with ``reason`` in ``QUARANTINE_SCHEMA`` (the payload as JSON in ``row``)."""
        n = t.num_rows
        sch = delta.arrow_schema(QUARANTINE_SCHEMA)
        rows = [json_row({c: t.column(c)[i].as_py() for c in payload}) if payload else None for i in range(n)]
        cols = {"side": t.column("side"), "id": t.column("id"), "ts": t.column("ts"), "ts_raw": t.column("ts_raw"),
                "row": pa.array(rows, pa.string()), "reason": t.column("reason"),
                "stage": pa.array(["ingest"] * n, pa.string()), "unit": pa.array(np.full(n, unit, np.int64)),
                "batch": pa.array([batch_key] * n, pa.string())}
        return pa.Table.from_arrays([cols[f.name].cast(f.type) for f in sch], schema=sch)

    def _commit_staged(self, st: Any, q: Any, n_rows: int, batch_id: int, batch_key: str, info: BatchInfo,
                       t_job: float, t0: float) -> dict[str, int]:
        """The staged rows and the quarantined ones of a batch checked in the driver: deltalake
        commits under the txn ids ``_stage_batch`` uses."""
        n_staged, n_bad = st.num_rows, q.num_rows
        if n_bad:
            delta.overwrite_rows(self.spark, q, QUARANTINE_SCHEMA, self.tables.quarantine, {"batch": batch_key})
        elif delta.table_exists(self.spark, self.tables.quarantine):  # a replay's earlier rows go
            delta.overwrite_rows(self.spark, [], QUARANTINE_SCHEMA, self.tables.quarantine, {"batch": batch_key})
        # an empty (or all-quarantined) batch still creates the records table (see _stage_batch)
        if n_staged or not delta.table_exists(self.spark, self.tables.records):
            delta.append_rows(self.spark, st, "", self.tables.records, self.write_id("records", info.checkpoint_id),
                              batch_id)
        log.info("%s ingest micro-batch %d -> unit %d: %d rows, %d staged, %d quarantined (through the driver: "
                 "read %.2fs, checked and committed %.2fs)", self.pipeline, batch_id, info.unit, n_rows, n_staged,
                 n_bad, t_job, time.perf_counter() - t0 - t_job)
        return {"rows": n_rows, "staged": n_staged, "quarantined": n_bad}

    def _stage_batch(self, batch: DataFrame, batch_id: int, info: BatchInfo, prepare: Prepare,
                     local: bool = False) -> dict[str, int]:
        """Stage one micro-batch: rules, quarantine, the staged rows. ``local`` (follow mode): the
        batch is computed in ONE Spark job into the driver, and its staged and quarantined rows
        are committed with ``deltalake`` - the same rules, tables and txn ids, without the
        count and write jobs (a second each on 2 cores)."""
        maybe_fail(f"{self.pipeline}.ingest.batch")
        now = dt.datetime.now(UTC)
        bound = now + dt.timedelta(seconds=self.max_future_s)
        reason = (
            F.when(F.col("id").isNull(), F.lit("null id"))
            .when(F.col("ts_raw").isNull(), F.lit("null ts"))
            .when(F.col("ts").isNull(), F.concat(F.lit("unreadable ts "), F.col("ts_raw"),
                                                   F.lit(f" (ts unit {self.ts_unit})" if self.ts_unit else "")))
            .when(F.col("ts") > F.lit(bound), F.concat(
                F.lit("future: ts "), F.col("ts").cast("string"),
                F.lit(f" is more than {self.max_future_s:g}s past the current time {now.isoformat()}")))
            .otherwise(F.lit("")))
        tagged = batch.withColumn("reason", reason)
        if not local:
            tagged = tagged.cache()
            n_rows = tagged.count()
        good = tagged.where(F.col("reason") == "").drop("reason")
        bad = tagged.where(F.col("reason") != "")
        if local:
            info = BatchInfo(info.unit, info.batch_id, info.progress, info.checkpoint_id, local=True)
        prep = prepare(good, info)
        quarantine = [bad]
        if prep.bad is not None:
            quarantine.append(prep.bad)
        batch_key = f"{info.checkpoint_id}-{batch_id}"
        payload = [c for c in batch.columns if c not in ("id", "ts", "ts_raw", "side")]

        def to_q(df: DataFrame) -> DataFrame:
            return df.select(F.col("side").cast("byte"), F.col("id").cast("long"), F.col("ts").cast("timestamp"),
                             F.col("ts_raw").cast("string"),
                             F.to_json(F.struct(*[F.col(c) for c in payload])).alias("row") if payload
                             else F.lit(None).cast("string").alias("row"),
                             "reason", F.lit("ingest").alias("stage"), F.lit(info.unit).cast("long").alias("unit"),
                             F.lit(batch_key).alias("batch"))

        qdf = to_q(quarantine[0])
        for extra in quarantine[1:]:
            qdf = qdf.unionByName(to_q(extra))
        staged = (prep.staged.withColumn("unit", F.lit(info.unit).cast("long"))
                  .withColumn("batch_id", F.lit(batch_id).cast("long"))
                  .withColumn("meta", F.lit(json.dumps(prep.meta, sort_keys=True)))
                  .withColumn("fingerprint", F.lit(self.fingerprint))
                  .withColumn("checkpoint_id", F.lit(info.checkpoint_id)))
        if local:
            return self._stage_local(tagged, staged, qdf, batch_id, batch_key, info)
        qdf = qdf.cache()
        staged = staged.cache()
        # one job counts both (and fills both caches)
        n = {r["k"]: r["count"] for r in qdf.select(F.lit(0).alias("k")).unionByName(
            staged.select(F.lit(1).alias("k"))).groupBy("k").count().collect()}
        n_bad, n_staged = int(n.get(0, 0)), int(n.get(1, 0))
        if n_bad:
            delta.overwrite_partition(qdf, self.tables.quarantine, {"batch": batch_key})
        elif delta.table_exists(self.spark, self.tables.quarantine):  # a replay's earlier rows go
            delta.overwrite_rows(self.spark, [], QUARANTINE_SCHEMA, self.tables.quarantine, {"batch": batch_key})
        # an empty (or all-quarantined) batch still creates the records table: the checkpoint has
        # consumed it, and verify() must not take a missing table for lost input
        if n_staged or not delta.table_exists(self.spark, self.tables.records):
            delta.append_idempotent(staged, self.tables.records, self.write_id("records", info.checkpoint_id),
                                    batch_id)
        staged.unpersist()
        qdf.unpersist()
        tagged.unpersist()
        log.info("%s ingest micro-batch %d -> unit %d: %d rows, %d staged, %d quarantined", self.pipeline,
                 batch_id, info.unit, n_rows, n_staged, n_bad)
        return {"rows": n_rows, "staged": n_staged, "quarantined": n_bad}

    def _stage_local(self, tagged: DataFrame, staged: DataFrame, qdf: DataFrame, batch_id: int, batch_key: str,
                     info: BatchInfo) -> dict[str, int]:
        """``_stage_batch`` through the driver for a pipeline without an Arrow hook: staged rows,
        quarantined rows and the batch's row count in one job (``toArrow``), then the commits."""
        s_cols, q_cols = staged.columns, qdf.columns
        both = (staged.select(F.lit(0).cast("byte").alias("_k"), *s_cols)
                .unionByName(qdf.select(F.lit(1).cast("byte").alias("_k"), *q_cols), allowMissingColumns=True)
                .unionByName(tagged.groupBy().count().select(F.lit(2).cast("byte").alias("_k"),
                                                              F.col("count").alias("_n")), allowMissingColumns=True))
        t0 = time.perf_counter()
        t = both.toArrow()
        t_job = time.perf_counter() - t0
        k = t.column("_k").to_numpy()
        st = t.filter(pa.array(k == 0)).select(s_cols)
        q = t.filter(pa.array(k == 1)).select(q_cols)
        n_rows = int(t.filter(pa.array(k == 2)).column("_n")[0].as_py())
        return self._commit_staged(st, q, n_rows, batch_id, batch_key, info, t_job, t0)
