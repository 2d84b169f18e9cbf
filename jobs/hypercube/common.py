"""What every Streaming HyperCube stage needs: the run (streams, key columns, window, p) and the
unit's dispatcher.

State tables under ``<output>_state/``: ``progress`` (the engine's; its ``meta`` holds the
dispatcher - grids and task -> worker - committed atomically with the unit), ``tuples`` (side, id,
ts, k of every held tuple, stored once: a micro-batch routes them under the current grids),
``sketch`` (the Misra-Gries summary: whole history, the running summary; with a window, one per
unit, merged over the live units) and ``grids`` (each heavy key's grid per unit, with its
estimates, desired sides, tasks, workers and migration; what ``simjoin report`` draws). A unit
reads only state of earlier units, so a replay sees what the first attempt saw.
"""

from __future__ import annotations

from typing import Any, ClassVar

from simjoin.config import parse_duration
from simjoin.pipeline.stream import StreamRun

__all__ = ["HyperCubeRun", "held", "held_of", "live_mask", "dispatcher_of"]


#: Whole history: older running summaries are dropped every this many units (a few hundred rows each).
SKETCH_COMPACT_EVERY = 16


class HyperCubeRun(StreamRun):
    #: a unit of at most ``SIMJOIN_LOCAL_UNIT_ROWS`` records runs on the in-process executor
    IN_PROCESS: ClassVar[bool] = True
    STATE: ClassVar[dict[str, str]] = {"tuples": "tuples", "sketch": "sketch", "grids": "grids"}
    #: the grids of each unit are a record for reports; no stage reads them back
    STATE_RETENTION: ClassVar[dict[str, str]] = {"grids": "history"}

    def output_columns(self) -> dict[str, tuple[str, ...]]:
        return {"output": ("k", "pairs", "batch_id")} if self.cfg.count_only else super().output_columns()

    @property
    def right_key(self) -> str:
        return str(self.cfg.right_key or self.cfg.key)

    @property
    def window_s(self) -> float:
        return parse_duration(self.cfg.window) if self.cfg.window else 0.0

    @property
    def window_us(self) -> int:
        return round(self.window_s * 1e6)

    @property
    def p(self) -> int:
        return int(self.cfg.workers)

    def expiry(self) -> dict[str, Any]:
        """With a window: the held tuples no future tuple can meet (the event time's expiry bound
        of their side) and the units' summaries older than W; whole history: the running summaries
        of units before the newest (readers take the newest), every :data:`SKETCH_COMPACT_EVERY` units."""
        from simjoin.runtime.expiry import ByAge, ByMark, ByUnit

        if self.window_us <= 0:
            return {self.state("sketch"): ByUnit(every=SKETCH_COMPACT_EVERY)}
        return {self.state("tuples"): ByMark(window_us=self.window_us, column="ts", instant=True),
                self.state("sketch"): ByAge(window_us=self.window_us)}

    def fresh_dispatcher(self) -> Any:
        from simjoin.core.hypercube.dispatch import Dispatcher

        return Dispatcher(self.p, self.cfg.eps, assign=self.cfg.assign)


def dispatcher_of(run: HyperCubeRun, meta: dict[str, Any]) -> Any:
    """The dispatcher the last committed unit left (a fresh one for a new output, or when p or
    eps changed: every held tuple is routed again under the new grids, so nothing is lost)."""
    import dataclasses

    from simjoin.core.hypercube.dispatch import Dispatcher

    d = meta.get("dispatcher")
    if d and int(d["p"]) == run.p and float(d["eps"]) == run.cfg.eps:
        return dataclasses.replace(Dispatcher.from_json(d), assign=run.cfg.assign)
    return run.fresh_dispatcher()


def _marks(run: HyperCubeRun, time: Any) -> dict[int, int]:
    """Per side, the expiry bound of held tuples (``EventTime.expiry_bounds_us``; two streams)."""
    if run.window_us <= 0:
        return {}
    return time.expiry_bounds_us(run.window_us, self_join=False)  # type: ignore[no-any-return]


def live_mask(run: HyperCubeRun, time: Any, t: Any) -> Any:
    """Which rows of a pyarrow Table (``side``, ``ts``) a future tuple can still meet (not
    :func:`expired_condition`): a boolean numpy mask."""
    import numpy as np
    import pyarrow as pa

    keep = np.ones(t.num_rows, bool)
    marks = _marks(run, time)
    if not marks or not t.num_rows:
        return keep
    side = np.asarray(t.column("side").to_numpy(zero_copy_only=False), np.int64)
    ts = np.asarray(t.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_numpy(zero_copy_only=False),
                    np.int64)
    for s, mk in marks.items():
        keep &= ~((side == s) & (ts <= mk))
    return keep


def held(read: Any, run: HyperCubeRun, unit: int, time: Any) -> Any:
    """The tuples (side, id, ts, k) held before ``unit`` that a future tuple can still meet, as a
    pyarrow Table, or None. ``read``: the state reader (``OpenUnit.read_state``, or
    ``delta.read_arrow_any`` bound to a session)."""
    import pyarrow as pa

    t = read(run.state("tuples"), [("unit", "<", int(unit))], ["side", "id", "ts", "k"])
    if t is None:
        return None
    return t.filter(pa.array(live_mask(run, time, t)))


def held_of(run: HyperCubeRun, u: Any) -> Any:
    """:func:`held` for the open unit, read once and kept for its later stages in this process."""
    key = f"hypercube_held_{u.id}"
    if key not in run.frames:
        run.keep(key, held(u.read_state, run, u.id, u.time))
    return run.frames[key]
