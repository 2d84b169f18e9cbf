"""S3J stage 1, ingest: the engine reads what arrived in the stream(s) since the last run and
applies S3J's declared input (:func:`spec`, ``simjoin.quality.rows``) to each micro-batch.

The engine quarantines null or unreadable ``id``/``ts`` and future rows. By the declared rules,
bad rows go to ``<output>_quarantine`` with a reason too: a null vector or element, NaN or inf, a wrong
dimension, a zero vector under angular or cosine, a duplicate (side, id) - inside the batch,
earlier in this unit, or already in a still-open window - and records of a window that ended
at or before the watermark less ``--allowed-lateness`` (``Progress.closed_watermark``): late.
A record of a window still open is staged whatever its ts order (docs/operations.md,
"Lateness"). Good rows become one row per window they fall in (tumbling: one; sliding: size /
slide) and are staged as the new unit.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.s3j.common import S3JRun
from simjoin.contracts import Role
from simjoin.pipeline.context import StageContext
from simjoin.quality.rows import InputSpec, UniqueIds, Vectors, Windows
from simjoin.runtime.event_time import BatchInfo, aware

US = pa.timestamp("us", tz="UTC")


def spec(run: S3JRun) -> InputSpec:
    """S3J's input: a vector per record, its rules, one staged copy per window holding it."""
    metric = run.cfg.metric
    zero = f"{metric} distance is undefined" if metric in ("angular", "cosine") else None
    return InputSpec(payload=({"vector": "vector"},), what="vector array<double>",
                     rules=(Vectors("vector", nonzero=zero), UniqueIds(("ts", "vector"), seen="seen earlier")),
                     staged=("id", "ts", "vector", "side"), casts={"vector": "array<double>"},
                     windows=Windows(round(run.window_s * 1e6), round((run.slide_s or run.window_s) * 1e6)))


def live_ids(ctx: StageContext) -> Any:
    """(side, id) of the join state's records in still-open windows (rows of windows the
    watermark closed may linger until a window ends): read with deltalake (no Spark job, no
    vectors), or by Spark when the state is not local."""
    run: S3JRun = ctx.run

    def live(info: BatchInfo) -> Any:
        wm = info.progress.closed_watermark
        js = ctx.read(run.join_state, [("unit", "<", int(info.unit))],
                      ["side", "id", "role", "window_end"])
        if js is None:
            return None
        keep = pc.not_equal(js.column("role"), int(Role.BUFFER))
        if wm is not None:
            keep = pc.and_(keep, pc.greater(js.column("window_end").cast(US), pa.scalar(aware(wm), US)))
        return js.filter(keep).select(["side", "id"])

    return live


def run(ctx: StageContext) -> dict[str, Any]:
    """Stage everything that arrived since the last run as one unit (or resume the open one)."""
    return ctx.stage_unit(spec(ctx.run), live_ids(ctx))
