"""What every inequality-join stage needs: the run (streams, output, query, window) and the
unit's new tuples.

State tables under ``<output>_state/``: ``progress`` (the engine's), ``batches`` (the immutable
PO-Join batches and, per side, the mutable part, each with its index and its tuples;
``simjoin.operators.inequality``: every live tuple is in one of them, so duplicate ids are caught
against them too). State rows carry the ``unit`` that wrote them and a unit reads only state of
earlier units, so a replay sees exactly what the first attempt saw. The mutable part is rewritten
by every unit; readers take each side's latest.
"""

from __future__ import annotations

from typing import Any, ClassVar

from simjoin.config import parse_duration
from simjoin.pipeline.stream import StreamRun

__all__ = ["IneqRun", "counts", "new_tuples", "tuple_live"]


class IneqRun(StreamRun):
    STATE: ClassVar[dict[str, str]] = {"batches": "batches"}
    STATE_BY_PART: ClassVar[tuple[str, ...]] = ("batches",)
    IN_PROCESS: ClassVar[bool] = True

    def expiry(self) -> dict[str, Any]:
        """The PO-Join batches no future tuple can meet, with the mutable parts they superseded
        (:class:`ExpiredBatches`)."""
        return {self.batches: ExpiredBatches(self)}

    @property
    def batches(self) -> str:
        return self.state("batches")

    @property
    def window_s(self) -> float:
        return parse_duration(self.cfg.window) if self.cfg.window else 0.0

    def params(self) -> Any:
        from simjoin.core.inequality.spo import IneqParams, Window

        c = self.cfg
        if c.window_count is not None:
            window = Window(count=int(c.window_count))
            delta = c.merge_every or c.slide_count or max(1, int(c.window_count) // 10)
            slide_us = None
        else:
            w_us = round(parse_duration(c.window) * 1e6)
            window = Window(time_us=w_us)
            delta = c.merge_every
            slide_us = round(parse_duration(c.slide) * 1e6) if c.slide else max(1, w_us // 10)
        lateness_us = round(c.allowed_lateness_s * 1e6) if c.window_count is None else 0
        return IneqParams(str(c.where), self.self_join, window, int(c.workers), delta, slide_us, lateness_us)


def counts(meta: dict[str, Any]) -> dict[int, int]:
    """Tuples per side committed by earlier units (their next ``seq``)."""
    return {int(k): int(v) for k, v in (meta.get("count") or {}).items()}


def new_tuples(run: IneqRun, u: Any) -> Any:
    """The open unit's new tuples per side (``simjoin.core.inequality.spo.Tuples``), kept for
    the later stages of the same process."""
    from simjoin.operators.inequality import new_tuples

    key = f"ineq_new_{u.id}"
    if key not in run.frames:
        run.keep(key, new_tuples(u.records, run.params(), counts(u.progress().meta)))
    return run.frames[key]


def _bound(p: Any, prog: Any, side: int) -> int | None:
    """The live bound of stored tuples: a stored tuple of ``side`` is live iff its ts (time window) is above
    it, or its seq (count window) at or above it; None: every tuple is live."""
    if p.window.time_us is not None:  # the event time's expiry bound (the partner's mark less W + L)
        return prog.time().expiry_bound_us(side, int(p.window.time_us), p.self_join)  # type: ignore[no-any-return]
    return counts(prog.meta).get(side, 0) - int(p.window.count)


def batch_expired(p: Any, prog: Any, side: int, ts_max: int, seq_max: int) -> bool:
    """Whether stored tuples of ``side`` with these maxima can meet no future tuple: at or before
    the event time's expiry bound (time window), or below the live count (count window)."""
    bound = _bound(p, prog, side)
    if bound is None:
        return False
    return ts_max <= bound if p.window.time_us is not None else seq_max < bound


def tuple_live(p: Any, prog: Any, side: int, t: Any) -> Any:
    """Whether each stored tuple is still reachable, on a pyarrow Table of stored tuples (``side``, ``ts``, ``seq``): a
    boolean numpy mask of the rows of ``side`` still reachable."""
    import numpy as np
    import pyarrow as pa

    mine = np.asarray(t.column("side").to_numpy(zero_copy_only=False), np.int64) == side
    bound = _bound(p, prog, side)
    if bound is None:
        return mine
    if p.window.time_us is not None:
        ts = np.asarray(t.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
                        .to_numpy(zero_copy_only=False), np.int64)
        return mine & (ts > bound)
    return mine & (np.asarray(t.column("seq").to_numpy(zero_copy_only=False), np.int64) >= bound)


class ExpiredBatches:
    """ineq's expiry rule (``simjoin.runtime.expiry.Rule``): drop the batches no future tuple can
    meet (:func:`batch_expired`: the event time's expiry bound, or the live count, read from the
    batches' maxima), and with them the mutable parts superseded before the unit. Nothing is
    deleted until a batch expires (about once a slide): readers take each side's latest mutable
    part, and ingest's duplicate check applies the exact bound itself. Each batch and mutable part
    is a file of its own (``OpenUnit.write_parts``), so the DELETE drops files and rewrites none.
    Returns the expired batch ids."""

    def __init__(self, run: IneqRun) -> None:
        self.run = run

    def apply(self, u: Any, path: str, published: dict[str, Any]) -> list[int]:
        import pyarrow as pa
        import pyarrow.compute as pc

        from jobs.ineq.probe import probed_state
        from simjoin.core.inequality.spo import BATCH, MUTABLE

        run, p, prog = self.run, self.run.params(), u.progress()
        cols = ["kind", "batch_id", "side", "ts_max", "seq_max"]
        probed = probed_state(run, u)
        if probed is not None:  # every batch committed before this unit, as the probe read them, and the unit's own
            t = pa.concat_tables([probed.select(cols), u.work("state").select(cols).cast(probed.select(cols).schema)])
        else:
            t = u.read_state(path, None, cols)
        meta = [] if t is None else t.filter(pc.equal(t.column("kind").cast(pa.string()), BATCH)).to_pylist()
        gone = [int(r["batch_id"]) for r in meta
                if batch_expired(p, prog, int(r["side"]), int(r["ts_max"]), int(r["seq_max"]))]
        if gone:
            u.expire_ids(path, "batch_id", gone, also=[[("kind", "=", MUTABLE), ("unit", "<", u.id)]])
        return gone
