"""What every stream pipeline's run has (docs/architecture.md, "Streams: the operator contract"): its
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
    #: state tables written one part per file, so that expiry drops whole files: maintenance
    #: never compacts them (``simjoin.runtime.maintenance``)
    STATE_BY_PART: ClassVar[tuple[str, ...]] = ()
    #: retention rules of state (or side) tables by name, applied by maintenance (``simjoin.pipeline.maintain``):
    #: ``"latest"`` - only the newest unit's rows are ever read (older ones go); ``"history"`` -
    #: rows only reports read (those older than the last ``SIMJOIN_HISTORY_UNITS`` units go).
    #: Every other state table expires by its own rule at publish (windows, watermarks).
    STATE_RETENTION: ClassVar[dict[str, str]] = {}

    @property
    def left(self) -> str:
        return str(self.cfg.left)

    @property
    def tables(self) -> Any:
        return self.tables_at(self.output)

    @classmethod
    def tables_at(cls, output: str) -> Any:
        from simjoin.runtime.tables import StreamTables

        return StreamTables(output)

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
                               ts_zone=self.cfg.ts_zone, max_records_per_unit=self.cfg.max_records_per_unit,
                               idle_timeout_s=self.cfg.idle_timeout_s)
        eng.owned = list(self.table_paths().values())  # what --reset removes of an output made before
        return eng

    def expiry(self) -> dict[str, Any]:
        """Each state table (path) with its expiry rule (``simjoin.runtime.expiry``), applied by
        the runtime after every publish; none by default."""
        return {}

    def reset_tables(self, spark: Any) -> list[str]:
        return self.engine(spark).reset()  # type: ignore[no-any-return]

    #: whether a unit may run on the in-process executor (:func:`in_process_rows`); otherwise the
    #: tasks of every unit's stages run on Spark
    IN_PROCESS: ClassVar[bool] = False

    #: the unit class the pipeline's stages see (a subclass of :class:`OpenUnit` adds what the
    #: pipeline keeps with its units and checks them in ``check``)
    UNIT: ClassVar[type | None] = None

    def context(self, spark: Any, stage: Any) -> Any:
        """Ingest (the first stage) is called to stage a unit; every later stage only with the
        unit open, as ``ctx.unit``."""
        from simjoin.pipeline.context import StageContext

        if stage.name == self.spec.stages[0].name:
            return StageContext(self, spark)
        u = self.open_unit(spark)
        return None if u is None else StageContext(self, spark, u)

    def open_unit(self, spark: Any) -> Any:
        """The engine's open unit (:class:`OpenUnit`), or None when nothing is staged. Stages of one
        process share it (``frames``; cleared when the run's stages are done). Its records are a
        pyarrow Table whichever executor runs it: the one ``--executor`` asks for, or (``auto``)
        the in-process executor for a unit of at most :func:`in_process_rows` records on local
        tables of a pipeline with ``IN_PROCESS``, else Spark (``simjoin.runtime.placement.choose_unit``);
        every task of the unit decides alike."""
        if "open_unit" in self.frames:
            return self.frames["open_unit"]
        requested = str(getattr(self.cfg, "executor", "auto") or "auto")
        u = OpenUnit.of(self.engine(spark), self, requested=requested if self.IN_PROCESS else "spark")
        if u is not None:
            if self.UNIT is not None:
                u = u.like(self.UNIT)
            u.check()
            from simjoin.log import get_logger

            where = "in-process executor" if u.in_process else "Spark executor (its stages' tasks in Spark jobs)"
            get_logger("simjoin.pipeline").info("%s: unit %d runs on the %s (%d records): %s", self.pipeline, u.id,
                                                where, u.records.num_rows, u.executor.reason)
            self.keep("open_unit", u)
        return u


@dataclass(frozen=True)
class OpenUnit:
    """The open unit as its stages see it: the engine, the staged records (a pyarrow Table) and
    the metadata ingest kept with them; the stage's work tables are tagged with it.

    Every stage is a function of Arrow data on either executor: the unit's records, its state
    (:meth:`read_state`) and its work tables (:meth:`work`, :meth:`write_work`) are pyarrow
    Tables, and the executor decides only where the tasks of a stage that fans out run
    (:meth:`map_tasks`: the unit's ``executor``, ``simjoin.runtime.executor``). When every stage of the
    run runs in this process (``run.in_process``: the CLI, follow mode), work tables stay in
    memory; an Airflow task writes and reads them as Delta tables with deltalake, so any stage can
    run alone or again."""

    engine: Any
    unit: Any  # simjoin.spark.engine.Unit
    meta: dict[str, Any]
    run: Any = field(default=None, compare=False, repr=False)
    #: where the unit's tasks run and its tables are read and written (``simjoin.runtime.executor``)
    executor: Any = field(default=None, compare=False)

    @classmethod
    def of(cls, engine: Any, run: Any = None, requested: str = "spark") -> OpenUnit | None:
        """The engine's open unit on the executor ``requested`` (``auto``: chosen for the unit)."""
        unit, executor = _open(engine, requested)
        if unit is None:
            return None
        meta = {**engine.progress().meta, **(json.loads(unit.meta) if unit.meta else {})}
        return cls(engine, unit, meta, run, executor)

    def like(self, cls: type[OpenUnit]) -> Any:
        """This unit as a pipeline's subclass of OpenUnit (same engine, unit, run and executor)."""
        return cls(self.engine, self.unit, self.meta, self.run, self.executor)

    @property
    def id(self) -> int:
        return int(self.unit.unit)

    def check(self) -> None:
        """Refuse a unit the pipeline's stages cannot work on (a subclass's rule; none here)."""

    def table_exists(self, path: str) -> bool:
        """Whether a Delta table is at ``path`` (deltalake for a local path, else Spark)."""
        from simjoin.spark import delta

        return bool(delta.table_exists(self.engine.spark, path))

    def append_once(self, piece: str, rows: Any, schema: str, path: str) -> None:
        """Append ``rows`` (tuples in the DDL ``schema``'s order, or a pyarrow Table) to the side
        table at ``path`` exactly once for this unit (its ``write_id(piece)``, the unit as version):
        a rerun skips what a first attempt committed."""
        from simjoin.spark import delta

        delta.append_rows(self.engine.spark, rows, schema, path, self.write_id(piece), self.id)

    @property
    def records(self) -> Any:
        return self.unit.records

    @property
    def time(self) -> Any:
        """The event time the committed units give (``simjoin.runtime.event_time.EventTime``): the
        streams' marks, the allowed lateness, the watermark, the late and expiry bounds. The one
        place a stage reads event time from."""
        return self.engine.progress().time()

    @property
    def in_memory(self) -> bool:
        return bool(self.run is not None and self.run.in_process)

    @property
    def in_process(self) -> bool:
        """Whether the unit runs on the in-process executor: its tasks on a thread pool of this
        process (no Spark job)."""
        return bool(self.executor.name == "in_process")

    def map_tasks(self, t: Any, task: Any, fn: Any, schema: Any, name: str = "task") -> Any:
        """A stage's fan-out on the unit's executor: ``fn`` (a task's rows -> its output batches)
        per task id of ``task`` (one per row of ``t``), on a thread pool in process, else in one
        Spark job (``mapInArrow``, each task alone in its partition). The same pyarrow Table of
        ``schema`` either way, in ascending task order."""
        return self.executor.map_tasks(t, task, fn, schema, name)

    def read_state(self, path: str, where: Any = None, columns: Any = None) -> Any:
        """A state table's rows (``where``: ``(column, op, value)`` filters, e.g. ``unit < u``) as a
        pyarrow Table, or None when there is no table, through the unit's executor."""
        return self.executor.read(path, where, columns)

    def progress(self) -> Any:
        """What the committed units say (``simjoin.runtime.event_time.Progress``: the last unit, the marks,
        the ``meta`` the pipeline published with them)."""
        return self.engine.progress()

    def closing_watermark(self) -> Any:
        """The watermark this unit's publish closes windows by (``EventTime.closed_watermark`` with
        the unit's own marks)."""
        return self.engine.closing_watermark(self.unit)

    def write_id(self, piece: str) -> str:
        """The ``txnAppId`` a piece of this output is written under (per checkpoint; its
        ``txnVersion`` is the unit): a side table the stage appends exactly once."""
        return str(self.engine.write_id(piece, self.unit.checkpoint_id))

    def own(self, paths: Any) -> None:
        """Record in the output's manifest the tables this unit is about to create (``--reset``
        removes them)."""
        self.engine.own(paths)

    def expire(self, path: str, any_of: Any) -> None:
        """Drop the state rows of ``path`` that match any of the conjunctions ``any_of`` (each a
        list of ``(column, op, value)``; ``simjoin.io.tables.predicate``): the pipeline says which
        rows no future tuple can meet, as data; the runtime writes and runs the DELETE."""
        from simjoin.io.tables import predicate

        cond = predicate(any_of)
        if cond is not None:
            self.engine.delete(path, cond)

    def expire_ids(self, path: str, column: str, ids: Any, also: Any = ()) -> None:
        """Drop the rows of ``path`` whose integer ``column`` is one of ``ids``, or that match
        ``also`` (as :meth:`expire`), in bounded DELETEs (a backlog expires thousands at once)."""
        from simjoin.io.tables import predicate

        self.engine.delete_ids(path, column, ids, also=predicate(also))

    def expire_closed_windows(self, path: str, published: dict[str, Any], windows: tuple[float, float]) -> None:
        """After this unit's publish (``published``: its result), drop the rows of ``path`` in the
        windows (``(size, slide)`` in seconds) that ended at or before the watermark less the
        allowed lateness (``EventTime.closed_watermark``): the runtime's event time decides, once."""
        lag = self.time.lateness
        wm, prev = published["watermark_ts"], published["previous_watermark_ts"]
        self.engine.expire(path, None if wm is None else wm - lag, previous=None if prev is None else prev - lag,
                           windows=windows)

    def publish(self, pieces: Any, meta: dict[str, Any] | None = None, **kw: Any) -> Any:
        """Publish the unit's ``pieces`` exactly once (the engine's ``publish``), recording in its
        progress ``meta`` the executor that ran it and why. Then the runtime applies the run's
        declared state expiry (``StreamRun.expiry``, ``simjoin.runtime.expiry``)."""
        rec = {"executor": self.executor.name, "executor_reason": self.executor.reason}
        res = self.engine.publish(self.unit, pieces, meta={**(meta or {}), **rec}, **kw)
        rules = self.run.expiry() if self.run is not None else {}
        if rules:  # the state tables' declared expiry, by the event time this publish committed
            from simjoin.runtime import expiry

            res = {**res, "expired": expiry.apply(self, rules, res)}
        return res

    def work(self, name: str, keep_unit: bool = False) -> Any:
        """The work table ``name`` an earlier stage handed over for this unit (without its
        ``unit`` tag unless ``keep_unit``); refuses one left by another unit."""
        from simjoin.runtime.event_time import StaleUnit

        t = self.run.frames.get(self._key(name)) if self.in_memory else None
        if t is None:
            path = self.engine.tables.work(name)
            t = self.executor.read(path)
            if t is None:
                raise StaleUnit(f"no {name} table at {path}: run the previous stage first")
            units = set(t.column("unit").unique().to_pylist())
            if units and units != {self.id}:
                raise StaleUnit(f"{path} holds unit {sorted(units)}, expected {self.id}: rerun the previous stage")
        if keep_unit:
            return _with_unit(t, self.id)
        return t.drop_columns(["unit"]) if "unit" in t.column_names else t

    def rows(self, name: str, kind: int, columns: list[str] | None = None) -> Any:
        """The rows of the work table ``name`` whose ``kind`` (:class:`~simjoin.contracts.RowKind`)
        is ``kind``, with ``columns`` (default all but ``kind``), in one chunk:
        :func:`rows_where`."""
        return rows_where(self.work(name), "kind", kind, columns).combine_chunks()

    def write_work(self, t: Any, name: str) -> str:
        """Hand the pyarrow Table ``t`` to the unit's later stages as ``name``; returns where it
        went: kept in memory by a run of every stage in this process, else written with
        deltalake (Spark only for a table that is not local)."""
        if self.in_memory:
            self.run.keep(self._key(name), t)
            return f"memory:{self.engine.tables.work(name)}"
        path = self.engine.tables.work(name)
        self.executor.overwrite(_with_unit(t, self.id), path)
        return path

    def write_parts(self, path: str, parts: Any) -> Any:
        """The pyarrow Tables ``parts`` as one file each beside the table at ``path``, for
        ``publish`` to commit in one transaction (``simjoin.io.tables.write_parts``: a DELETE of a
        part's rows then drops its file whole); None when the table takes rows only (append them
        instead)."""
        from simjoin.io import tables

        return tables.write_parts(path, parts)

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


def rows_where(t: Any, column: str, value: int, columns: list[str] | None = None) -> Any:
    """The rows of the pyarrow Table ``t`` whose ``column`` equals ``value``, with ``columns``
    (default all but ``column``). Tasks write one kind of row (and one join task's pairs) per
    batch, so a batch holding only ``value`` is kept as it is (no copy) and one without it is
    dropped; only a mixed batch is filtered."""
    import pyarrow as pa

    columns = [c for c in t.column_names if c != column] if columns is None else list(columns)
    keep = []
    for b in t.select([column, *columns]).to_batches():
        k = b.column(0).to_numpy(zero_copy_only=False)
        hit = k == value
        if hit.all():
            keep.append(b)
        elif hit.any():
            keep.append(b.filter(pa.array(hit)))
    schema = t.select(columns).schema
    return pa.Table.from_batches([b.select(columns) for b in keep], schema=schema) if keep else schema.empty_table()


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


def _open(engine: Any, requested: str) -> tuple[Any, Any]:
    """The open unit (None if there is none) with its records as a pyarrow Table, and its executor
    (``simjoin.runtime.placement.choose_unit``): ``requested``, or for ``auto`` the in-process
    executor for a unit of at most :func:`in_process_rows` records on local tables, else Spark.
    Records deltalake cannot read are read with Spark into the driver (a unit is bounded by
    ``--max-records-per-unit``)."""
    from simjoin.io.tables import NotLocal
    from simjoin.log import get_logger
    from simjoin.pipeline.executors import executor
    from simjoin.runtime.placement import choose_unit

    log = get_logger("simjoin.pipeline")
    why_not = ""
    if engine.local_tables():
        try:
            u = engine.open_unit_table()
        except NotLocal as e:
            log.info("%s: the unit is read with Spark: %s", engine.pipeline, e)
            why_not = str(e)
        else:
            if u is None:
                return None, None
            limit = in_process_rows() if requested == "auto" else 0
            c = choose_unit(requested, u.records.num_rows, limit, True)
            return u, executor(c.executor, engine.spark, c.reason)
    else:
        why_not = "a stream, the output or its state is not a local table deltalake reads"
    c = choose_unit(requested, 0, 0, False, why_not)  # refuses --executor in_process here
    u = engine.open_unit()
    if u is None:
        return None, None
    import dataclasses

    return dataclasses.replace(u, records=u.records.toArrow()), executor("spark", engine.spark, c.reason)
