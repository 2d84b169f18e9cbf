"""What every S3J stage needs: the run (inputs, output, config), its tables and its progress.

One *unit* of work is every staged micro-batch not yet joined (normally exactly one: the
CLI joins each micro-batch inside ``foreachBatch``; a DAG run joins all micro-batches its
ingest task staged). The unit is named by its largest batch id, which is also the
``txnVersion`` of its idempotent writes, so a retried stage never writes twice.

State tables (under ``<output>_state/``): ``progress`` (one row per side per unit: the
event-time high-water mark, the vector dimension and the config fingerprint), ``centroids``
(workset centroids, persist across windows) and ``join`` (members of still-open windows
and buffered physical outer copies; a window's rows are deleted when the watermark passes
its end). Rows carry the ``batch_id`` that wrote them and a unit only reads state written
by earlier units, so a replay after a crash sees exactly what the first attempt saw.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from simjoin.config import S3JConfig, parse_duration
from simjoin.spark import delta
from simjoin.spark.metric import JoinParams, S3JTables
from simjoin.spark.runner import BatchContext

PIPELINE = "s3j"


@dataclass(frozen=True)
class S3JRun:
    left: str
    output: str
    cfg: S3JConfig
    right: str | None = None

    def __post_init__(self) -> None:
        for name, v in (("left", self.left), ("output", self.output)):
            if not v:
                raise ValueError(f"invalid {name} {v!r}: allowed a Delta table path")
        if self.right is not None and self.right == self.left:
            raise ValueError(f"--right {self.right!r} is the left stream; omit --right for a self-join")

    @property
    def tables(self) -> S3JTables:
        return S3JTables(self.output)

    @property
    def self_join(self) -> bool:
        return self.right is None

    @property
    def sources(self) -> list[str]:
        return [self.left] if self.right is None else [self.left, self.right]

    @property
    def window_s(self) -> float:
        return parse_duration(self.cfg.window)

    @property
    def slide_s(self) -> float | None:
        return parse_duration(self.cfg.slide) if self.cfg.slide else None

    def fingerprint(self) -> str:
        """What the persisted state depends on; a run with another value must use a new output."""
        c = self.cfg
        return (f"{c.algorithm}|{c.metric}|{c.threshold!r}|{c.inclusive}|{self.window_s!r}|{self.slide_s!r}|"
                f"{c.workers}|{c.virtual_partitions}|{c.seed}|{'self' if self.self_join else 'rs'}")

    def params(self, dim: int) -> JoinParams:
        c = self.cfg
        return JoinParams(c.metric, float(c.threshold), bool(c.inclusive), int(c.workers), c.algorithm,
                          int(c.virtual_partitions), int(c.seed), bool(c.exact_distances), self.self_join, int(dim))

    def context(self, spark: SparkSession, batch_id: int) -> BatchContext:
        t = self.tables
        return BatchContext(spark, PIPELINE, int(batch_id),
                            {"join": t.join_state, "centroids": t.centroids, "progress": t.progress})


def read_or_none(spark: SparkSession, path: str) -> DataFrame | None:
    return delta.read_table(spark, path) if delta.table_exists(spark, path) else None


@dataclass(frozen=True)
class Progress:
    last_done: int
    watermark: dt.datetime | None
    dim: int | None
    fingerprint: str | None


def progress(spark: SparkSession, run: S3JRun) -> Progress:
    """Last joined unit, event-time watermark (min over sides of the max ts seen), dimension."""
    df = read_or_none(spark, run.tables.progress)
    if df is None:
        return Progress(-1, None, None, None)
    rows = df.groupBy("side").agg(F.max("batch_id").alias("b"), F.max("max_ts").alias("m"),
                                  F.first("dim", ignorenulls=True).alias("dim"),
                                  F.first("fingerprint", ignorenulls=True).alias("fp")).collect()
    if not rows:
        return Progress(-1, None, None, None)
    n_sides = len(run.sources)
    marks = [r["m"] for r in rows if r["m"] is not None]
    wm = min(marks) if len(marks) == n_sides else None
    dim = next((int(r["dim"]) for r in rows if r["dim"] is not None), None)
    fp = next((r["fp"] for r in rows if r["fp"]), None)
    return Progress(max(int(r["b"]) for r in rows), wm, dim, fp)


def check_fingerprint(run: S3JRun, prog: Progress) -> None:
    if prog.fingerprint is not None and prog.fingerprint != run.fingerprint():
        raise ValueError(
            f"output {run.output!r} holds state of another configuration ({prog.fingerprint}); "
            f"this run is ({run.fingerprint()}): allowed the same algorithm, metric, threshold, "
            f"window, workers and seed, or a new --output")


@dataclass(frozen=True)
class Unit:
    batch_id: int
    records: DataFrame
    dim: int


def pending(spark: SparkSession, run: S3JRun) -> Unit | None:
    """The staged records not yet joined, or None."""
    recs = read_or_none(spark, run.tables.work("records"))
    if recs is None:
        return None
    prog = progress(spark, run)
    recs = recs.where(F.col("batch_id") > prog.last_done)
    row = recs.agg(F.max("batch_id").alias("b"), F.max(F.size("vector")).alias("d")).first()
    if row is None or row["b"] is None:
        return None
    return Unit(int(row["b"]), recs, int(prog.dim or row["d"]))


def work(spark: SparkSession, run: S3JRun, name: str, unit: int) -> DataFrame:
    """An intermediate table of the current unit; refuses a stale one (from another unit)."""
    df = read_or_none(spark, run.tables.work(name))
    if df is None:
        raise FileNotFoundError(f"no {name} table at {run.tables.work(name)}: run the previous stage first")
    got = df.select(F.max("unit")).first()[0]  # type: ignore[index]
    if got is not None and int(got) != unit:
        raise RuntimeError(f"{run.tables.work(name)} holds unit {got}, expected {unit}: rerun the previous stage")
    return df.drop("unit")


def micros(col: str) -> F.Column:
    return F.unix_micros(F.col(col))
