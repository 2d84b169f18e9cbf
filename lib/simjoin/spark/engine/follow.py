"""Follow mode: one processingTime query on a warm JVM, each micro-batch its own unit."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame

from simjoin.runtime.event_time import BatchInfo, Stopping
from simjoin.spark import delta
from simjoin.spark.engine.staging import Staging
from simjoin.spark.engine.units import log


class Follow(Staging):
    """Follow mode's streaming query (``--follow``)."""

    def _follow(self, stream: DataFrame, ident: str, max_files_per_trigger: int | None,
                totals: dict[str, Any]) -> dict[str, Any]:
        """Follow mode: one ``foreachBatch`` query with a ``processingTime`` trigger. Each
        micro-batch is staged as its own unit, then ``follow.after_unit(unit)`` runs the later
        stages and publishes it before the batch is committed to the checkpoint: a crash leaves
        an open unit (or an uncommitted batch) that the next start finishes first, as in batch
        mode. A stop request lets the batch in progress finish; a batch that starts after it
        raises at once, before staging anything, and is read again by the next start."""
        import threading
        import time as _time

        from simjoin.spark.session import is_remote

        follow = self.follow
        if self.ingest_mode() == "landing" or is_remote(self.spark):
            raise ValueError(f"--follow runs the stream's query in this process: {self.tables.output} needs a local "
                             "Spark (run it with SIMJOIN_SPARK_REMOTE=off)")
        busy = threading.Event()
        errors: list[BaseException] = []
        totals["units"] = []

        def on_batch(batch: DataFrame, batch_id: int) -> None:
            if follow.stop.is_set():
                errors.append(Stopping())
                raise Stopping()
            busy.set()
            try:
                prog = self.progress(fresh=True)  # the last unit was published by the stages' engine
                if int(batch_id) <= int(prog.meta.get("staged_batch", -1)):
                    log.info("%s: micro-batch %d was staged by a committed unit; skipped", self.pipeline, batch_id)
                    return
                unit = prog.last_unit + 1
                info = self._stage(batch, int(batch_id), BatchInfo(unit, int(batch_id), prog, ident))
                totals["batches"].append(int(batch_id))
                for k in ("rows", "staged", "quarantined"):
                    totals[k] += info[k]
                if info["staged"]:
                    follow.after_unit(unit)
                    totals["units"].append(unit)
            except BaseException as e:
                log.exception("%s: micro-batch %d failed", self.pipeline, batch_id)
                errors.append(e)
                raise
            finally:
                busy.clear()

        writer = (stream.writeStream.foreachBatch(on_batch)
                  .option("checkpointLocation", delta.abs_ref(self.tables.checkpoint))
                  .trigger(processingTime=f"{max(1, round(follow.trigger_s * 1000))} milliseconds"))
        if max_files_per_trigger:
            writer = writer.option("maxFilesPerTrigger", int(max_files_per_trigger))
        q = writer.queryName(f"simjoin_{self.pipeline}_follow_{ident[:8]}").start()
        log.info("%s: following %s every %gs (Ctrl-C stops)", self.pipeline, ", ".join(self.sources),
                 follow.trigger_s)
        try:
            while q.isActive and not follow.stop.is_set():
                q.awaitTermination(0.25)  # type: ignore[arg-type]  # seconds; a float works
            if q.isActive:
                while busy.is_set():
                    _time.sleep(0.05)
                q.stop()
        except Exception:
            if not errors or not isinstance(errors[0], Stopping):
                if errors:
                    raise errors[0] from None
                raise
        real = [e for e in errors if not isinstance(e, Stopping)]
        if real:
            raise real[0]
        log.info("%s: follow mode stopped after %d units", self.pipeline, len(totals["units"]))
        return {"unit": None, "resumed": False, "follow": True, **totals}
