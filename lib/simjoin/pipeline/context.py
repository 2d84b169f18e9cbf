"""What a stage function receives: ``run(ctx) -> dict`` (docs/architecture.md, "The runtime calls
the operator").

The runtime, not the stage, opens a stream's unit: a per-unit stage (every stream stage but
ingest) is called only when a unit is open, with that unit (``ctx.unit``, a
:class:`simjoin.pipeline.stream.OpenUnit`: its records, state and work tables as pyarrow Tables,
its executor, its publish and expiry). Ingest asks the runtime to stage a unit
(:meth:`StageContext.stage_unit`). No stage sees the Spark session or the engine; a batch
pipeline's bookkeeping reaches tables through :attr:`StageContext.session`, which Spark starts
only if a table is not local (``simjoin.spark.session.lazy_spark``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["StageContext"]


@dataclass(frozen=True)
class StageContext:
    """One call of one stage: its run (config, tables, params), the unit it works on (None for a
    batch stage and a stream's ingest) and where its tasks run (``executor``)."""

    run: Any
    #: the run's Spark session, lazy (started only when a table needs Spark); for batch pipelines'
    #: bookkeeping helpers (``simjoin.spark.pins``, ``simjoin.spark.delta``), never a stream stage
    session: Any
    unit: Any = None

    @property
    def params(self) -> Any:
        """The run's kernel parameters (``run.params()``)."""
        return self.run.params()

    @property
    def executor(self) -> Any:
        """The unit's executor (``simjoin.runtime.executor``); None outside a unit."""
        return None if self.unit is None else self.unit.executor

    def stage_unit(self, spec: Any, live_ids: Any) -> dict[str, Any]:
        """A stream's ingest: the runtime stages what arrived since the last run as one unit (or
        resumes the open one), validated by ``spec`` (``simjoin.quality.rows.InputSpec``);
        ``live_ids(info)`` gives the (side, id) a new row may not repeat."""
        return self.run.engine(self.session).ingest(spec, live_ids)  # type: ignore[no-any-return]

    def read(self, path: str, where: Any = None, columns: Sequence[str] | None = None) -> Any:
        """A table's rows as a pyarrow Table (None: no table), read with deltalake, or by Spark when
        it is not local; in a unit, through its executor."""
        if self.unit is not None:
            return self.unit.read_state(path, where, columns)
        from simjoin.spark import delta

        return delta.read_arrow_any(self.session, path, where, columns)

    def input_types(self, columns: Sequence[Any], compared: Any) -> Any:
        """The staged types of the inputs' predicate columns (``simjoin.spark.exact_types``): the
        ``k``-th source holds ``columns[k]``; ``compared``: the column pairs a predicate compares."""
        from simjoin.spark.exact_types import exact_types

        return exact_types(self.session, self.run.sources, columns, compared)
