"""What every S3J stage needs: the run (streams, output, config), its tables and its engine.

A *unit* is what one ingest staged (the micro-batch engine, ``simjoin.spark.engine``); the
stages after ingest work on the open unit and write ``<output>_work/<name>`` tables tagged with
it, so any of them can be rerun. State tables under ``<output>_state/``: ``progress`` (the
engine's: one row per side per committed unit), ``centroids`` (workset centroids, persist across
windows) and ``join`` (members of still-open windows and buffered physical outer copies; a
window's rows are dropped when the watermark passes its end). State rows carry the ``unit``
that wrote them and a unit reads only state of earlier units, so a replay sees exactly what the
first attempt saw.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from simjoin.config import parse_duration
from simjoin.pipeline.spec import Run

PIPELINE = "s3j"


class S3JRun(Run):
    @property
    def left(self) -> str:
        return str(self.cfg.left)

    @property
    def tables(self) -> Any:
        from simjoin.spark.tables import StreamTables

        return StreamTables(self.output)

    def table_paths(self) -> dict[str, str]:
        t = self.tables
        return {**t.paths(), "join_state": self.join_state, "centroids": self.centroids, "progress": t.progress}

    @property
    def join_state(self) -> str:
        return self.tables.state("join")  # type: ignore[no-any-return]

    @property
    def centroids(self) -> str:
        return self.tables.state("centroids")  # type: ignore[no-any-return]

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

    def state_fingerprint(self) -> str:
        """What the persisted state depends on; another value needs a new output or --reset."""
        return self.fingerprint("self" if self.self_join else "rs")

    def engine(self, spark: Any) -> Any:
        from simjoin.spark.engine import MicroBatchEngine

        return MicroBatchEngine(spark, PIPELINE, self.tables, self.sources, self.state_fingerprint(),
                                ts_unit=self.cfg.ts_unit, max_future_s=self.cfg.max_future_s)

    def reset_tables(self, spark: Any) -> list[str]:
        return self.engine(spark).reset()  # type: ignore[no-any-return]

    def params(self, dim: int) -> Any:
        from simjoin.spark.metric import JoinParams

        c = self.cfg
        return JoinParams(c.metric, float(c.threshold), bool(c.inclusive), int(c.workers), c.algorithm,
                          int(c.virtual_partitions), int(c.seed), bool(c.exact_distances), self.self_join, int(dim))


@dataclass(frozen=True)
class OpenUnit:
    engine: Any
    unit: Any  # simjoin.spark.engine.Unit
    dim: int

    @property
    def id(self) -> int:
        return int(self.unit.unit)

    @property
    def records(self) -> Any:
        return self.unit.records

    def work(self, name: str, keep_unit: bool = False) -> Any:
        return self.engine.work(name, self.id, keep_unit)

    def write_work(self, df: Any, name: str) -> str:
        return self.engine.write_work(df, name, self.id)  # type: ignore[no-any-return]


def open_unit(spark: Any, run: S3JRun) -> OpenUnit | None:
    """The engine's open unit with its vector dimension, or None when nothing is staged. Stages
    of one process share it (``run.frames``; cleared when the run's stages are done)."""
    if "open_unit" in run.frames:
        return run.frames["open_unit"]  # type: ignore[no-any-return]
    u = _open_unit(spark, run)
    if u is not None:
        run.keep("open_unit", u)
    return u


def _open_unit(spark: Any, run: S3JRun) -> OpenUnit | None:
    eng = run.engine(spark)
    unit = eng.open_unit()
    if unit is None:
        return None
    row = unit.records.select("meta").first()
    meta = json.loads(row["meta"]) if row and row["meta"] else {}
    dim = meta.get("dim") or eng.progress().meta.get("dim")
    if not dim:
        raise RuntimeError(f"unit {unit.unit} has no vector dimension: rerun ingest")
    return OpenUnit(eng, unit, int(dim))


def micros(col: str) -> Any:
    from pyspark.sql import functions as F

    return F.unix_micros(F.col(col))


def read_state(spark: Any, path: str, before_unit: int) -> Any:
    """A state table as written by units before ``before_unit``, or None."""
    from pyspark.sql import functions as F

    from simjoin.spark import delta

    if not delta.table_exists(spark, path):
        return None
    return delta.read_table(spark, path).where(F.col("unit") < before_unit)
