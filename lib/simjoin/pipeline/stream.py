"""What every stream pipeline's run has (DESIGN.md, "How streams become micro-batches"): its
streams, its tables beside the output, its micro-batch engine and the unit that engine has open.

Pure Python: Spark is imported only when a stage asks for the engine, so reading a spec (the CLI,
the DAG processor) never starts it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from simjoin.config import parse_duration
from simjoin.pipeline.spec import Run

__all__ = ["StreamRun", "OpenUnit"]


class StreamRun(Run):
    """A stream pipeline's run. Subclasses name their state tables (``STATE``: table key ->
    name under ``<output>_state/``) and what the state fingerprint adds."""

    STATE: ClassVar[dict[str, str]] = {}

    @property
    def left(self) -> str:
        return str(self.cfg.left)

    @property
    def tables(self) -> Any:
        from simjoin.spark.tables import StreamTables

        return StreamTables(self.output)

    def state(self, key: str) -> str:
        return self.tables.state(self.STATE[key])  # type: ignore[no-any-return]

    def table_paths(self) -> dict[str, str]:
        t = self.tables
        return {**t.paths(), **{k: self.state(k) for k in self.STATE}, "progress": t.progress}

    @property
    def self_join(self) -> bool:
        return self.right is None

    @property
    def sources(self) -> list[str]:
        return [self.left] if self.right is None else [self.left, str(self.right)]

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

        eng = MicroBatchEngine(spark, self.pipeline, self.tables, self.sources, self.state_fingerprint(),
                               ts_unit=self.cfg.ts_unit, max_future_s=self.cfg.max_future_s,
                               follow=self.follow, allowed_lateness_s=self.cfg.allowed_lateness_s,
                               ts_zone=self.cfg.ts_zone, max_records_per_unit=self.cfg.max_records_per_unit)
        eng.owned = list(self.table_paths().values())  # what --reset removes of an output made before
        return eng

    def reset_tables(self, spark: Any) -> list[str]:
        return self.engine(spark).reset()  # type: ignore[no-any-return]

    #: whether the pipeline's stages run a unit on Arrow tables in this process (the in-process
    #: executor, :func:`in_process_rows`); otherwise every unit runs on Spark
    IN_PROCESS: ClassVar[bool] = False
    #: whether the pipeline's stages are functions of Arrow data on both executors: a unit's
    #: records, state and work tables are pyarrow Tables whichever executor runs it, and the
    #: executor decides only where the tasks of a stage that fans out run
    #: (:meth:`OpenUnit.map_tasks`: a thread pool, or one ``mapInArrow`` Spark job)
    ARROW_STAGES: ClassVar[bool] = False

    def open_unit(self, spark: Any) -> Any:
        """The engine's open unit (``simjoin.spark.engine.OpenUnit``), or None when nothing is
        staged. Stages of one process share it (``frames``; cleared when the run's stages are done).
        A pipeline with ``IN_PROCESS`` gets a unit of at most :func:`in_process_rows` records on
        local tables as a pyarrow Table (``OpenUnit.in_process``), read with deltalake: its stages
        then run without a Spark job, and every task of the unit decides alike."""
        if "open_unit" in self.frames:
            return self.frames["open_unit"]
        u = OpenUnit.of(self.engine(spark), self, in_process=self.IN_PROCESS, arrow_stages=self.ARROW_STAGES)
        if u is not None:
            from simjoin.log import get_logger

            where = (f"in-process executor ({u.records.num_rows} records)" if u.in_process else
                     f"Spark executor ({u.records.num_rows} records; its stages' tasks in Spark jobs)" if u.arrow
                     else "Spark executor")
            get_logger("simjoin.pipeline").info("%s: unit %d runs on the %s", self.pipeline, u.id, where)
            self.keep("open_unit", u)
        return u


@dataclass(frozen=True)
class OpenUnit:
    """The open unit as its stages see it: the engine, the staged records and the metadata ingest
    kept with them; the stage's work tables are tagged with it.

    When every stage of the run runs in this process (``run.in_process``: the CLI, follow mode),
    a work table is not written to Delta: :meth:`write_work` materializes the DataFrame as a
    local checkpoint (one Spark job, the same rows a Delta write would have computed; the
    executors keep the blocks) and the later stages read it from there. An Airflow task writes
    and reads Delta work tables, so any stage can run alone or again."""

    engine: Any
    unit: Any  # simjoin.spark.engine.Unit
    meta: dict[str, Any]
    run: Any = field(default=None, compare=False, repr=False)
    #: work tables already checked to hold this unit (one Spark job per table, not per read)
    _checked: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    #: the records are a pyarrow Table, but the unit runs on the Spark executor: its stages' tasks
    #: run in Spark jobs (``ARROW_STAGES``)
    spark_tasks: bool = False

    @classmethod
    def of(cls, engine: Any, run: Any = None, in_process: bool = False,
           arrow_stages: bool = False) -> OpenUnit | None:
        spark_tasks = False
        if arrow_stages:
            unit, spark_tasks = _arrow_unit(engine)
        else:
            unit = _in_process_unit(engine) if in_process else False
            if unit is False:
                unit = engine.open_unit()
        if unit is None:
            return None
        meta = {**engine.progress().meta, **(json.loads(unit.meta) if unit.meta else {})}
        return cls(engine, unit, meta, run, spark_tasks=spark_tasks)

    def like(self, cls: type[OpenUnit]) -> Any:
        """This unit as a pipeline's subclass of OpenUnit (same engine, unit, run and frames)."""
        return cls(self.engine, self.unit, self.meta, self.run, self._checked, self.spark_tasks)

    @property
    def id(self) -> int:
        return int(self.unit.unit)

    @property
    def records(self) -> Any:
        return self.unit.records

    @property
    def in_memory(self) -> bool:
        return bool(self.run is not None and self.run.in_process)

    @property
    def arrow(self) -> bool:
        """Whether the unit's records and work tables are pyarrow Tables (read and written with
        deltalake when local)."""
        import pyarrow as pa

        return isinstance(self.unit.records, pa.Table)

    @property
    def in_process(self) -> bool:
        """Whether the unit runs on the in-process executor: Arrow data, and its tasks on a
        thread pool of this process (no Spark job)."""
        return self.arrow and not self.spark_tasks

    def map_tasks(self, t: Any, task: Any, fn: Any, schema: Any, name: str = "task") -> Any:
        """A stage's fan-out on the unit's executor: ``fn`` (a task's rows -> its output batches)
        per task id of ``task`` (one per row of ``t``), on a thread pool in process, else in one
        Spark job (``mapInArrow``, each task alone in its partition). The same pyarrow Table of
        ``schema`` either way, in ascending task order."""
        from simjoin.spark import routing

        if self.in_process:
            return routing.task_table(t, task, fn, schema, name)
        return routing.spark_task_table(self.engine.spark, t, task, fn, schema, name)

    def read_state(self, path: str, where: Any = None, columns: Any = None) -> Any:
        """A state table's rows (``where``: ``(column, op, value)`` filters, e.g. ``unit < u``) as a
        pyarrow Table, or None when there is no table: read with deltalake, or with Spark when
        deltalake cannot (not local)."""
        from simjoin.spark import delta

        return delta.read_arrow_any(lambda: self.engine.spark, path, where, columns)

    def work(self, name: str, keep_unit: bool = False) -> Any:
        kept = self.run.frames.get(self._key(name)) if self.in_memory else None
        if self.arrow:
            return self._work_arrow(name, kept, keep_unit)
        if kept is not None:
            if keep_unit:
                from pyspark.sql import functions as F

                return kept.withColumn("unit", F.lit(self.id).cast("long"))
            return kept
        if name not in self._checked:
            self._checked[name] = self.engine.work(name, self.id, True)
        df = self._checked[name]
        return df if keep_unit else df.drop("unit")

    def _work_arrow(self, name: str, kept: Any, keep_unit: bool) -> Any:
        from simjoin.spark import delta
        from simjoin.spark.engine import StaleUnit

        t = kept
        if t is None:
            path = self.engine.tables.work(name)
            t = delta.read_arrow_any(lambda: self.engine.spark, path)
            if t is None:
                raise StaleUnit(f"no {name} table at {path}: run the previous stage first")
            units = set(t.column("unit").unique().to_pylist())
            if units and units != {self.id}:
                raise StaleUnit(f"{path} holds unit {sorted(units)}, expected {self.id}: rerun the previous stage")
        if keep_unit:
            return _with_unit(t, self.id)
        return t.drop_columns(["unit"]) if "unit" in t.column_names else t

    def write_work(self, df: Any, name: str) -> str:
        """Hand ``df`` to the unit's later stages as ``name``; returns where it went. A pyarrow
        Table (a unit on the in-process executor) is kept in memory by a run of every stage in
        this process, else written with deltalake: no Spark job either way."""
        import pyarrow as pa

        if isinstance(df, pa.Table):
            if self.in_memory:
                self.run.keep(self._key(name), df)
                return f"memory:{self.engine.tables.work(name)}"
            from simjoin.spark import delta

            path = self.engine.tables.work(name)
            delta.overwrite_arrow(self.engine.spark, _with_unit(df, self.id), path)
            return path
        if self.in_memory:
            # computed now, once, and cut from its lineage: a later commit to a table it was read
            # from (publish appends to the state) must not re-plan or recompute it
            kept = df if df.isLocal() else df.localCheckpoint(eager=True)
            self.run.keep(self._key(name), kept)
            return f"memory:{self.engine.tables.work(name)}"
        self._checked.pop(name, None)
        return self.engine.write_work(df, name, self.id)  # type: ignore[no-any-return]

    def _key(self, name: str) -> str:
        return f"work:{name}:{self.id}"


def _with_unit(t: Any, unit: int) -> Any:
    """``t`` with its ``unit`` column (replaced in place, or appended) set to ``unit``."""
    import numpy as np
    import pyarrow as pa

    col = pa.array(np.full(t.num_rows, unit, np.int64))
    if "unit" in t.column_names:
        return t.set_column(t.column_names.index("unit"), "unit", col)
    return t.append_column("unit", col)


def in_process_rows() -> int:
    """Units of up to this many staged records run on the in-process executor
    (``SIMJOIN_LOCAL_UNIT_ROWS``, default 200,000; 0: every unit on Spark)."""
    import os

    raw = os.environ.get("SIMJOIN_LOCAL_UNIT_ROWS", "200000")
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"SIMJOIN_LOCAL_UNIT_ROWS={raw!r}: allowed an integer >= 0") from None
    if n < 0:
        raise ValueError(f"SIMJOIN_LOCAL_UNIT_ROWS={n}: allowed an integer >= 0 (0: every unit on Spark)")
    return n


def _arrow_unit(engine: Any) -> tuple[Any, bool]:
    """The open unit (None if there is none) with its records as a pyarrow Table, and whether its
    tasks run on Spark: a unit of more than :func:`in_process_rows` records, or records deltalake
    cannot read (read with Spark into the driver: a unit is bounded by ``--max-records-per-unit``)."""
    got = _in_process_unit(engine, arrow=True)
    if got is None:
        return None, False
    if got[0] is not False:
        return got  # type: ignore[no-any-return]
    u = engine.open_unit()
    if u is None:
        return None, False
    import dataclasses

    return dataclasses.replace(u, records=u.records.toArrow()), True


def _in_process_unit(engine: Any, arrow: bool = False) -> Any:
    """The open unit with its records as a pyarrow Table when it may run in this process (local
    tables deltalake reads, at most :func:`in_process_rows` records), None when no unit is open,
    False when it runs on Spark. ``arrow``: (the unit read with deltalake whatever its size,
    whether its tasks run on Spark), or (False, True) when deltalake cannot read it."""
    from simjoin.log import get_logger
    from simjoin.spark import delta

    limit = in_process_rows()
    spark_only = (False, True) if arrow else False
    if not engine.local_tables() or (limit <= 0 and not arrow):
        return spark_only
    try:
        head = engine.open_unit_table(None if arrow else ["side"])
        if head is None:
            return None
        big = head.records.num_rows > limit
        if big:
            get_logger("simjoin.pipeline").info(
                "%s: unit %d has %d records (> SIMJOIN_LOCAL_UNIT_ROWS=%d): it runs on Spark", engine.pipeline,
                head.unit, head.records.num_rows, limit)
        if arrow:
            return head, big
        return False if big else engine.open_unit_table()
    except delta.NotLocal as e:
        get_logger("simjoin.pipeline").info("%s: the unit runs on Spark: %s", engine.pipeline, e)
        return spark_only
