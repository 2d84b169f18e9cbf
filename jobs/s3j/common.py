"""What every S3J stage needs: the run (streams, output, config), its tables and its engine.

A *unit* is what one ingest staged (the micro-batch engine, ``simjoin.spark.engine``); the
stages after ingest work on the open unit and write ``<output>_work/<name>`` tables tagged with
it, so any of them can be rerun. State tables under ``<output>_state/``: ``progress`` (the
engine's: one row per side per committed unit), ``centroids`` (workset centroids, persist across
windows), ``join`` (members of still-open windows and buffered physical outer copies; a window's
rows are dropped when the watermark less ``--allowed-lateness`` passes its end) and
``assignment`` (the rebalance stage's workset -> worker snapshots, one Delta commit each; the
latest before a unit routes it). State
rows carry the ``unit`` that wrote them and a unit reads only state of earlier units, so a
replay sees exactly what the first attempt saw.
"""

from __future__ import annotations

from typing import Any, ClassVar

from simjoin.pipeline.stream import OpenUnit, StreamRun

__all__ = ["S3JRun", "S3JUnit", "state_arrow", "assignment_arrow", "window_state_arrow",
           "us"]


class S3JUnit(OpenUnit):
    """An S3J unit: its vectors' dimension, which ingest staged with it."""

    @property
    def dim(self) -> int:
        return int(self.meta["dim"])

    def check(self) -> None:
        if not self.meta.get("dim"):
            raise RuntimeError(f"unit {self.id} has no vector dimension: rerun ingest")


class S3JRun(StreamRun):
    STATE: ClassVar[dict[str, str]] = {"join_state": "join", "centroids": "centroids", "assignment": "assignment"}
    #: a unit reads the latest assignment only (``assignment_arrow``)
    STATE_RETENTION: ClassVar[dict[str, str]] = {"assignment": "latest"}
    IN_PROCESS: ClassVar[bool] = True
    UNIT: ClassVar[type | None] = S3JUnit

    def expiry(self) -> dict[str, Any]:
        """The join state of the windows that ended at or before the watermark less the allowed
        lateness (``EventTime.closed_watermark``): ingest quarantines their rows as late from then
        on; a later window keeps its state, so a late row that comes for it meets every record it
        holds (docs/operations.md, "Lateness")."""
        from simjoin.runtime.expiry import ByWindowClose

        return {self.join_state: ByWindowClose(self.window_s, self.slide_s or self.window_s)}

    @property
    def join_state(self) -> str:
        return self.state("join_state")

    @property
    def centroids(self) -> str:
        return self.state("centroids")

    @property
    def assignment(self) -> str:
        return self.state("assignment")

    def params(self, dim: int) -> Any:
        from simjoin.operators.metric import JoinParams

        c = self.cfg
        return JoinParams(c.metric, float(c.threshold), bool(c.inclusive), int(c.workers), c.algorithm,
                          int(c.virtual_partitions), int(c.seed), bool(c.exact_distances), self.self_join, int(dim))


def us(col: Any) -> Any:
    """A timestamp column of a pyarrow Table as epoch microseconds (int64)."""
    import pyarrow as pa

    return col.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())


def state_arrow(u: Any, path: str, columns: list[str] | None = None) -> Any:
    """A state table as units before ``u`` left it (what a replay of the unit saw), or None
    (``OpenUnit.read_state``: deltalake, else Spark)."""
    t = u.read_state(path, [("unit", "<", int(u.id))], columns)
    return t if t is not None and t.num_rows else None


def assignment_arrow(run: S3JRun, u: Any) -> Any:
    """The rebalance stage's latest assignment made before ``u`` (the savepoint), or None."""
    import pyarrow.compute as pc

    a = state_arrow(u, run.assignment)
    if a is None:
        return None
    return a.filter(pc.equal(a.column("unit"), pc.max(a.column("unit")))).drop_columns(["unit"])


def window_state_arrow(run: S3JRun, u: Any, windows: Any) -> Any:
    """The join state of the windows starting at ``windows`` (epoch microseconds) that units
    before ``u`` left, with ``w`` and ``we`` (epoch microseconds), or None."""
    import pyarrow.compute as pc

    js = state_arrow(u, run.join_state)
    if js is None:
        return None
    js = js.append_column("w", us(js.column("window_start"))).append_column("we", us(js.column("window_end")))
    js = js.filter(pc.is_in(js.column("w"), windows))
    return js if js.num_rows else None
