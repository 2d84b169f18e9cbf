"""Micro-batch runner: the engine under every streaming pipeline (DESIGN.md, "How streams
become micro-batches").

A stream is an append-only Delta table. One run processes what arrived since the last run with
Structured Streaming (``trigger(availableNow=True)``, one checkpoint per pipeline). The
``foreachBatch`` handler receives the batch and a :class:`BatchContext` giving the pipeline's
state (loaded from Delta state tables) and idempotent writers:

- ``ctx.write_output(df, path, piece)`` appends with ``txnAppId = <pipeline>/<piece>`` and
  ``txnVersion = batch_id``, so a batch replayed after a crash never writes a piece twice;
- ``ctx.save_state(df, path, keys)`` MERGEs into a state table (idempotent by construction).

If the handler raises, the batch is not committed to the checkpoint; the next run replays it
with the same ``batch_id`` and the pieces already written are skipped by Delta.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from simjoin.log import get_logger
from simjoin.spark import delta

__all__ = ["BatchContext", "RunSummary", "run_microbatches", "assign_windows", "assign_count_windows"]

log = get_logger("simjoin.runner")


@dataclass
class BatchContext:
    spark: SparkSession
    pipeline: str
    batch_id: int
    state_paths: dict[str, str]
    written: dict[str, int] = field(default_factory=dict)

    def state(self, name: str) -> DataFrame | None:
        """The named state table as of now, or None before the first commit."""
        path = self.state_paths[name]
        return delta.read_table(self.spark, path) if delta.table_exists(self.spark, path) else None

    def save_state(self, name: str, df: DataFrame, keys: Sequence[str], delete_missing: bool = False) -> None:
        delta.merge(df, self.state_paths[name], keys, delete_missing_in="true" if delete_missing else None)

    def write_output(self, df: DataFrame, path: str, piece: str = "out",
                     partition_by: Sequence[str] | None = None) -> None:
        delta.append_idempotent(df, path, f"{self.pipeline}/{piece}", self.batch_id, partition_by)
        self.written[piece] = self.written.get(piece, 0) + 1


@dataclass
class RunSummary:
    pipeline: str
    batches: list[int]
    rows: int


Handler = Callable[[DataFrame, BatchContext], None]


def run_microbatches(
    spark: SparkSession,
    source: str | Sequence[str],
    checkpoint: str,
    pipeline: str,
    handler: Handler,
    state_paths: dict[str, str] | None = None,
    max_files_per_trigger: int | None = None,
    side_col: str = "side",
) -> RunSummary:
    """Process every row that arrived in ``source`` since the last run, batch by batch.

    ``source`` may be a list of Delta tables (e.g. the left and right stream of a join): each
    stream is tagged with its position in ``side_col`` (a byte: 0, 1, ...) and the streams are
    unioned by column name, so one ``foreachBatch`` sees the new rows of all of them. A single
    path is read as before (no side column).
    """
    batches: list[int] = []
    rows = [0]

    def on_batch(batch: DataFrame, batch_id: int) -> None:
        n = batch.count()
        log.info("%s: micro-batch %d with %d rows", pipeline, batch_id, n)
        ctx = BatchContext(batch.sparkSession, pipeline, int(batch_id), dict(state_paths or {}))
        handler(batch, ctx)
        batches.append(int(batch_id))
        rows[0] += n

    def read(path: str) -> DataFrame:
        reader = spark.readStream.format("delta")
        if max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", int(max_files_per_trigger))
        return reader.load(os.path.abspath(path))

    if isinstance(source, str):
        stream = read(source)
    else:
        if not source:
            raise ValueError("run_microbatches needs at least one source table")
        parts = [read(p).withColumn(side_col, F.lit(k).cast("byte")) for k, p in enumerate(source)]
        stream = parts[0]
        for p in parts[1:]:
            stream = stream.unionByName(p, allowMissingColumns=True)
    q = (
        stream
        .writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", os.path.abspath(checkpoint))
        .trigger(availableNow=True)
        .queryName(f"simjoin_{pipeline}".replace("-", "_").replace("/", "_"))
        .start()
    )
    q.awaitTermination()
    if q.exception() is not None:  # pragma: no cover - awaitTermination raises first
        raise RuntimeError(str(q.exception()))
    return RunSummary(pipeline, batches, rows[0])


def assign_windows(df: DataFrame, size_s: float, slide_s: float | None = None, ts_col: str = "ts") -> DataFrame:
    """Time-based tumbling (``slide`` None or equal to ``size``) or sliding windows on ``ts``.

    Adds ``window_start`` and ``window_end``; with sliding windows a row appears once per window
    that contains it (start <= ts < end).
    """
    if size_s <= 0:
        raise ValueError(f"invalid window size {size_s}s: allowed > 0")
    slide_s = slide_s or size_s
    if not 0 < slide_s <= size_s:
        raise ValueError(f"invalid slide {slide_s}s: allowed 0 < slide <= window ({size_s}s)")
    w = F.window(F.col(ts_col), f"{round(size_s * 1e6)} microseconds", f"{round(slide_s * 1e6)} microseconds")
    return df.withColumn("_w", w).select(
        "*", F.col("_w.start").alias("window_start"), F.col("_w.end").alias("window_end")).drop("_w")


def assign_count_windows(df: DataFrame, size: int, slide: int | None = None, order: Sequence[str] = ("ts", "id"),
                         offset: int = 0) -> DataFrame:
    """Count-based windows: the i-th row (by ``order``, counting from ``offset``) belongs to
    windows k with k*slide <= i < k*slide + size. Adds ``window_id`` (and ``row_index``)."""
    if size < 1:
        raise ValueError(f"invalid count window {size}: allowed >= 1")
    slide = slide or size
    if not 1 <= slide <= size:
        raise ValueError(f"invalid count slide {slide}: allowed 1 <= slide <= window ({size})")
    from pyspark.sql import Window

    idx = F.row_number().over(Window.orderBy(*order)) - 1 + F.lit(offset)
    d = df.withColumn("row_index", idx)
    first = F.greatest(F.lit(0), F.floor((F.col("row_index") - size) / slide) + 1)
    last = F.floor(F.col("row_index") / slide)
    return d.withColumn("window_id", F.explode(F.sequence(first.cast("long"), last.cast("long"))))
