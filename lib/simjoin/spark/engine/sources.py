"""Ingest sources: the direct read of local Delta inputs, Structured Streaming where it is impossible."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from simjoin.faults import maybe_fail
from simjoin.io import delta_files, delta_source
from simjoin.quality.rows import InputSpec
from simjoin.runtime.event_time import BatchInfo, Progress
from simjoin.spark import delta
from simjoin.spark.engine.follow import Follow
from simjoin.spark.engine.rules import kind_checks, missing_stream, stream_schema_check, ts_expr
from simjoin.spark.engine.staging import LiveIds
from simjoin.spark.engine.units import local_path, log, with_ts_raw


class Sources(Follow):
    """Reads what arrived since the last unit and stages it (:meth:`ingest`)."""

    def _read(self, k: int, path: str, payload: dict[str, Callable[[T.DataType], bool]],
              payload_text: str, casts: dict[str, str]) -> DataFrame:
        if not delta.table_exists(self.spark, path):
            raise missing_stream(path, k)
        src = self.spark.readStream.format("delta").load(delta.abs_ref(path))
        return self._shape(k, path, src, src.schema, payload, payload_text, casts)

    def _shape(self, k: int, path: str, src: DataFrame, schema: T.StructType,
               payload: dict[str, Callable[[T.DataType], bool]], payload_text: str,
               casts: dict[str, str]) -> DataFrame:
        """A source's rows as the engine stages them (``id`` long, ``ts``, ``ts_raw``, the payload,
        ``side``), after checking its schema before any cast."""
        stream_schema_check(schema, path, self.ts_unit, payload, payload_text)
        ts_type = schema["ts"].dataType
        cols = [F.col("id").cast("long").alias("id"), ts_expr(ts_type, self.ts_unit, self.ts_zone).alias("ts"),
                F.col("ts").cast("string").alias("ts_raw")]
        cols += [F.col(c).cast(casts[c]).alias(c) if c in casts else F.col(c) for c in payload]
        return src.select(*cols, F.lit(k).cast("byte").alias("side"))

    def ingest(self, spec: InputSpec, live: LiveIds | None = None,
               max_files_per_trigger: int | None = None) -> dict[str, Any]:
        """Stage what arrived since the last run as one new unit (or resume the open one), by the
        pipeline's declared input ``spec`` (``simjoin.quality.rows``: payload, casts, row rules,
        windows). ``live``: the pipeline's live ids for a batch (the live-id index's state part)."""
        self._input, self._live, self._row_meta = spec, live, {}
        per_source = [kind_checks(k) for k in spec.payload]
        if len(per_source) == 1:
            per_source *= len(self.sources)
        payload_text, casts = spec.what, dict(spec.casts)
        prog = self.progress()
        if prog.checkpoint_id is None and self.checkpoint_id() is None:
            # a new output: a missing input or a wrong schema is refused before anything is written
            direct = self._direct_possible()
            for k, src in enumerate(self.sources):
                if direct:
                    loc = local_path(src)
                    assert loc is not None
                    stream_schema_check(delta.spark_schema(loc, delta_source.latest_version(loc)), src,
                                        self.ts_unit, per_source[k], payload_text)
                else:
                    self._read(k, src, per_source[k], payload_text, casts)
        ident = self.verify(prog)
        open_ = None
        if self.local_tables():  # read with deltalake: no Spark job
            try:
                open_ = self.open_unit_table(["side"])
            except delta.NotLocal:
                open_ = self.open_unit()
        else:
            open_ = self.open_unit()
        if open_ is not None:
            log.info("%s: unit %d is still open; finishing it before reading new input", self.pipeline,
                     open_.unit)
            res = {"unit": open_.unit, "resumed": True, "batches": [], "rows": 0, "staged": 0, "quarantined": 0}
            if getattr(open_, "records", None) is not None:  # the open unit's size, read with deltalake
                res["unit_rows"] = int(open_.records.num_rows)
            return res
        unit = prog.last_unit + 1
        self.check_inputs()  # an input deleted and written again, or its unread versions gone: refused
        if self.ingest_mode() == "direct":
            if max_files_per_trigger:
                raise ValueError("max_files_per_trigger: a direct ingest reads whole versions of its inputs")
            return self._ingest_direct(per_source, payload_text, casts, prog, ident)
        parts = [self._read(k, p, per_source[k], payload_text, casts) for k, p in enumerate(self.sources)]
        stream = parts[0]
        for p in parts[1:]:  # sources may carry different payload columns (each side's own)
            stream = stream.unionByName(p, allowMissingColumns=True)
        totals: dict[str, Any] = {"batches": [], "rows": 0, "staged": 0, "quarantined": 0}
        if self.follow is not None:
            return self._follow(stream, ident, max_files_per_trigger, totals)

        # foreach mode: a micro-batch the stream replays after a crash between staging it and its
        # checkpoint commit was staged by a committed unit already: it is not staged (or judged
        # late or duplicate against its own rows) again
        staged_before = int(prog.meta.get("staged_batch", -1)) if self.ingest_mode() == "foreach" else -1

        def stage(batch: DataFrame, batch_id: int) -> None:
            if int(batch_id) <= staged_before:
                log.info("%s: micro-batch %d was staged by a committed unit; skipped", self.pipeline, batch_id)
                return
            info = self._stage(batch, int(batch_id), BatchInfo(unit, int(batch_id), prog, ident))
            totals["batches"].append(int(batch_id))
            for k in ("rows", "staged", "quarantined"):
                totals[k] += info[k]

        if self.ingest_mode() == "landing":
            self._ingest_landing(stream, stage, prog, ident, max_files_per_trigger)
        else:
            self._ingest_foreach(stream, stage, ident, max_files_per_trigger)
        staged = totals["staged"]
        return {"unit": unit if staged else None, "resumed": False, **totals, "unit_rows": staged}

    def _ingest_foreach(self, stream: DataFrame, stage: Callable[[DataFrame, int], None], ident: str,
                        max_files_per_trigger: int | None) -> None:
        from simjoin.spark.session import is_remote

        if is_remote(self.spark):
            raise ValueError(
                f"{self.tables.output} was created with a local Spark, whose stream reader runs in the "
                "job's own process; on the warm Spark (SIMJOIN_SPARK_REMOTE) it cannot: allowed: run it with "
                f"SIMJOIN_SPARK_REMOTE=off, or {self._reset_hint()} on the warm Spark")
        errors: list[BaseException] = []

        def on_batch(batch: DataFrame, batch_id: int) -> None:
            try:
                stage(batch, batch_id)
            except BaseException as e:  # Spark reports only the Python side's last line: keep the cause
                log.exception("%s: micro-batch %d failed", self.pipeline, batch_id)
                errors.append(e)
                raise

        writer = stream.writeStream.foreachBatch(on_batch).option(
            "checkpointLocation", delta.abs_ref(self.tables.checkpoint)).trigger(availableNow=True)
        if max_files_per_trigger:
            writer = writer.option("maxFilesPerTrigger", int(max_files_per_trigger))
        q = writer.queryName(f"simjoin_{self.pipeline}_{ident[:8]}").start()
        try:
            q.awaitTermination()
        except Exception:
            if errors:
                raise errors[0] from None
            raise

    def _ingest_direct(self, per_source: Sequence[dict[str, Callable[[T.DataType], bool]]],
                       payload_text: str, casts: dict[str, str], prog: Progress, ident: str) -> dict[str, Any]:
        """``direct`` mode: no streaming query. A micro-batch is the inputs' versions since the last
        batch (the first takes each input's snapshot), read by their Delta logs
        (``simjoin.io.delta_source``) and staged as any micro-batch. Exactly once as a query's
        checkpoint: the batch's version ranges are written to ``<checkpoint>/offsets/<id>`` before it
        is staged and ``commits/<id>`` after; a batch planned but not committed is staged again with
        the same ranges (its writes are idempotent, and one a committed unit staged is skipped).
        A run takes what arrived before it started; follow mode polls every trigger."""
        totals: dict[str, Any] = {"batches": [], "rows": 0, "staged": 0, "quarantined": 0, "more": False}
        follow = self.follow
        args = (per_source, payload_text, casts, ident, totals)
        cap = self.max_records_per_unit
        if follow is None:
            if self._direct_step(*args, budget=cap) == "replayed" and not totals["more"]:
                room = None if cap is None else cap - totals["rows"]
                if room is None or room > 0:  # then what arrived since it was planned
                    self._direct_step(*args, budget=room)
                else:
                    totals["more"] = True
            return {"unit": prog.last_unit + 1 if totals["staged"] else None, "resumed": False, **totals,
                    "unit_rows": totals["staged"]}
        totals["units"] = []
        log.info("%s: following %s every %gs (Ctrl-C stops)", self.pipeline, ", ".join(self.sources),
                 follow.trigger_s)
        while not follow.stop.is_set():
            t0 = time.monotonic()
            if self._direct_step(*args, budget=cap) is None:  # nothing new: wait for the next trigger
                follow.stop.wait(max(0.0, follow.trigger_s - (time.monotonic() - t0)))
        log.info("%s: follow mode stopped after %d units", self.pipeline, len(totals["units"]))
        return {"unit": None, "resumed": False, "follow": True, **totals}

    def _direct_step(self, per_source: Sequence[dict[str, Callable[[T.DataType], bool]]],
                     payload_text: str, casts: dict[str, str], ident: str, totals: dict[str, Any],
                     budget: int | None = None) -> str | None:
        """One direct micro-batch: the one planned but not committed (``"replayed"``), else the
        inputs' new versions (``"new"``), as many whole versions as hold at most ``budget`` records
        (:func:`delta_source.bounded`; the rest waits for the next unit: ``totals["more"]``); None
        when nothing arrived. A replayed batch reads the versions it was planned with."""
        t_start = time.perf_counter()
        if self.follow is not None:  # an input replaced while following is refused before it is read
            self.check_inputs()
        done, planned = self._direct_last("commits"), self._direct_last("offsets")
        if planned > done:
            b, ranges, kind = planned, self._direct_ranges(planned), "replayed"
            files = [delta_source.files_between(local_path(src) or src, r) for src, r in zip(self.sources, ranges,
                                                                                          strict=True)]
        else:
            prev = self._direct_ranges(done) if done >= 0 else [delta_source.Range(-1, -1)] * len(self.sources)
            ranges = []
            for src, r in zip(self.sources, prev, strict=True):
                loc = local_path(src)
                assert loc is not None
                ranges.append(delta_source.Range(r.end, delta_source.latest_version(loc, after=r.end)))
            locs = [local_path(src) or src for src in self.sources]
            ranges, left = delta_source.bounded(locs, ranges, budget)
            files = [delta_source.files_between(loc, r) for loc, r in zip(locs, ranges, strict=True)]
            if not any(files):  # nothing appended (a compaction, or no input yet): nothing to record
                return None
            if left:
                totals["more"] = True
                log.info("%s: micro-batch %d reads up to versions %s; %d records wait for the next unit "
                         "(--max-records-per-unit %d)", self.pipeline, done + 1, [r.end for r in ranges], left, budget)
            b, kind = done + 1, "new"
            self._direct_write("offsets", b, {"sources": [{"path": src, "start": r.start, "end": r.end}
                                                          for src, r in zip(self.sources, ranges, strict=True)]})
        prog = self.progress(fresh=self.follow is not None)  # follow: the last unit was published since
        if b <= int(prog.meta.get("staged_batch", -1)):
            log.info("%s: micro-batch %d was staged by a committed unit; skipped", self.pipeline, b)
        else:
            maybe_fail(f"{self.pipeline}.ingest.planned")
            unit = prog.last_unit + 1
            t_plan = time.perf_counter()
            batch = self._direct_batch(ranges, files, per_source, payload_text, casts)
            t_read = time.perf_counter()
            info = self._stage(batch, b, BatchInfo(unit, b, prog, ident))
            totals["batches"].append(b)
            for k in ("rows", "staged", "quarantined"):
                totals[k] += info[k]
            if self.follow is not None and info["staged"]:
                t_staged = time.perf_counter()
                self.follow.after_unit(unit)
                totals["units"].append(unit)
                # where a follower's unit time goes (a soak's latency climbing is found here)
                log.info("%s: unit %d took %.3fs: plan %.3fs, read %.3fs, check and stage %.3fs, later stages %.3fs",
                         self.pipeline, unit, time.perf_counter() - t_start, t_plan - t_start, t_read - t_plan,
                         t_staged - t_read, time.perf_counter() - t_staged)
            maybe_fail(f"{self.pipeline}.ingest.staged")
        self._direct_write("commits", b, {})
        return kind

    def _direct_batch(self, ranges: Sequence[delta_source.Range], files_of: Sequence[Sequence[str]],
                      per_source: Sequence[dict[str, Callable[[T.DataType], bool]]], payload_text: str,
                      casts: dict[str, str]) -> DataFrame:
        """The rows the versions of ``ranges`` appended (``files_of``: their files, per source),
        shaped as the streaming query shapes them."""
        t0 = time.perf_counter()
        parts = []
        for k, (src, r) in enumerate(zip(self.sources, ranges, strict=True)):
            loc = local_path(src)
            assert loc is not None
            schema = delta.spark_schema(loc, max(r.end, 0))
            files = files_of[k]
            got = self._shape_arrow(k, src, files, schema, per_source[k], payload_text, casts)
            if got is not None:
                parts.append(got)
                continue
            df = (self.spark.read.schema(schema).parquet(*files) if files
                  else self.spark.createDataFrame([], schema))
            parts.append(self._shape(k, src, df, schema, per_source[k], payload_text, casts))
        if all(isinstance(p, pa.Table) for p in parts):
            self._direct_read_s = time.perf_counter() - t0
            return pa.concat_tables(parts, promote_options="default")  # type: ignore[return-value]
        from simjoin.spark.session import arrow_frame

        parts = [arrow_frame(self.spark, with_ts_raw(p)) if isinstance(p, pa.Table) else p for p in parts]
        out = parts[0]
        for p in parts[1:]:
            out = out.unionByName(p, allowMissingColumns=True)
        return out

    #: payload casts that Arrow makes as Spark does (``_shape_arrow``)
    _ARROW_CASTS: ClassVar[dict[str, Any]] = {
        "array<double>": pa.list_(pa.float64()), "double": pa.float64(), "bigint": pa.int64(), "long": pa.int64()}

    def _shape_arrow(self, k: int, path: str, files: Sequence[str], schema: T.StructType,
                     payload: dict[str, Callable[[T.DataType], bool]], payload_text: str,
                     casts: dict[str, str]) -> Any:
        """:meth:`_shape` on the files read with pyarrow in this process (no Spark job), as a
        pyarrow Table in the schema Spark's ``toArrow`` gives; None when Spark must shape them:
        the tables are not staged through the driver, ``ts`` is not a timestamp (a string or a
        number is parsed by Spark's rules), or a payload cast is not one Arrow makes the same way."""
        stream_schema_check(schema, path, self.ts_unit, payload, payload_text)
        if not self.local_tables() or not isinstance(schema["ts"].dataType, (T.TimestampType, T.TimestampNTZType)):
            return None
        if isinstance(schema["ts"].dataType, T.TimestampNTZType) and self.ts_zone.upper() not in ("UTC", "Z", "GMT",
                                                                                                   "ETC/UTC"):
            return None  # wall time in another zone: Spark's rules for DST gaps and overlaps decide
        want: dict[str, Any] = {"id": pa.int64(), "ts": pa.timestamp("us", tz="UTC")}
        for c in payload:
            if c in casts:
                if casts[c] not in self._ARROW_CASTS:
                    return None
                want[c] = self._ARROW_CASTS[casts[c]]
            else:
                return None
        pieces = []
        for f in files:
            t = delta_files.read_parquet(f, columns=list(want))
            ts = t.column("ts")
            if pa.types.is_timestamp(ts.type) and ts.type.tz is None:  # NTZ or INT96: UTC wall time
                t = t.set_column(t.schema.get_field_index("ts"), "ts", ts.cast(pa.timestamp("us")).cast(
                    pa.timestamp("us", tz="UTC")))
            pieces.append(pa.Table.from_arrays([t.column(c).cast(typ) for c, typ in want.items()],
                                               names=list(want)))
        t = (pa.concat_tables(pieces) if pieces
             else pa.Table.from_pylist([], schema=pa.schema(list(want.items()))))
        # no ``ts_raw``: a typed ts's raw text is its string form, made for the quarantined rows only
        cols = {"id": t.column("id"), "ts": t.column("ts")}
        cols.update({c: t.column(c) for c in payload})
        cols["side"] = pa.array(np.full(t.num_rows, k, np.int8))
        return pa.Table.from_arrays(list(cols.values()), names=list(cols))

    def _direct_write(self, kind: str, b: int, content: dict[str, Any]) -> None:
        d = self._direct_dir(kind)
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, f".{b}.tmp")
        with open(tmp, "w") as fh:
            fh.write(json.dumps(content))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, os.path.join(d, str(b)))

    def _ingest_landing(self, stream: DataFrame, stage: Callable[[DataFrame, int], None], prog: Progress,
                        ident: str, max_files_per_trigger: int | None) -> None:
        """The query appends what arrived to ``<output>_work/landing`` (Delta's exactly-once sink,
        no Python in the query); then every landing commit not staged yet is staged as one
        micro-batch whose id is its commit version, read back through the change data feed.
        ``landed`` in the progress meta is the last commit a committed unit staged."""
        landing = self.tables.work("landing")
        self.spark.conf.set("spark.databricks.delta.properties.defaults.enableChangeDataFeed", "true")
        writer = stream.writeStream.format("delta").option(
            "checkpointLocation", delta.abs_ref(self.tables.checkpoint)).trigger(availableNow=True)
        if max_files_per_trigger:
            writer = writer.option("maxFilesPerTrigger", int(max_files_per_trigger))
        q = writer.queryName(f"simjoin_{self.pipeline}_{ident[:8]}").start(delta.abs_ref(landing))
        q.awaitTermination()
        maybe_fail(f"{self.pipeline}.ingest.landed")
        if not delta.table_exists(self.spark, landing):
            return
        last = delta.latest_version(self.spark, landing)
        for version in range(int(prog.meta.get("landed", -1)) + 1, last + 1):
            batch = (self.spark.read.format("delta").option("readChangeFeed", "true")
                     .option("startingVersion", version).option("endingVersion", version).load(delta.abs_ref(landing))
                     .where(F.col("_change_type") == "insert")
                     .drop("_change_type", "_commit_version", "_commit_timestamp"))
            stage(batch, version)
