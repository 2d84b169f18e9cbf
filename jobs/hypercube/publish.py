"""Streaming HyperCube stage 6, publish (after the gate): the unit's pairs (or per-key counts) ->
the output, its stats -> the stats table, its tuples -> ``<output>_state/tuples``, its summary
and grids -> ``_state/sketch`` and ``_state/grids``; then the engine commits the unit with the
dispatcher in its metadata. Every append is idempotent per (checkpoint, unit). Afterwards,
housekeeping drops what no reader needs: older running summaries, and with a window the tuples
and summaries no future tuple can meet."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from jobs.hypercube.common import HyperCubeRun, expired_condition
from jobs.hypercube.dispatch import dispatch_row
from jobs.hypercube.gate import staged_output
from jobs.hypercube.stats import held_meta

#: Whole history: older running summaries are dropped every this many units (a few hundred rows each).
SKETCH_COMPACT_EVERY = 16


def _housekeeping(u: Any, run: HyperCubeRun) -> None:
    time = u.time  # after publish: the marks it committed
    if run.window_us <= 0:
        if u.id % SKETCH_COMPACT_EVERY == SKETCH_COMPACT_EVERY - 1:  # readers take the last unit's summary
            u.expire(run.state("sketch"), [[("unit", "<", u.id)]])
        return
    drop = expired_condition(run, time)
    if drop:
        u.expire(run.state("tuples"), drop)
    if time.marks:
        now = max(time.marks_us.values())
        u.expire(run.state("sketch"), [[("ts_max", "<=", now - run.window_us)]])


def run(spark: Any, run_: HyperCubeRun) -> dict[str, Any]:
    u = run_.open_unit(spark)
    if u is None:
        return {"unit": None}
    r = u.records
    tuples = pa.table({"side": r.column("side").cast(pa.int8()), "id": r.column("id"), "ts": r.column("ts"),
                       "k": r.column("k"), "unit": pa.array(np.full(r.num_rows, u.id, np.int64))})
    disp = json.loads(dispatch_row(u)["dispatcher"])
    pieces = [("output", staged_output(run_, u), run_.output),
              ("stats", u.work("stats", keep_unit=True), run_.tables.stats),
              ("tuples", tuples, run_.state("tuples")),
              ("sketch", u.work("sketch", keep_unit=True), run_.state("sketch")),
              ("grids", u.work("grids", keep_unit=True), run_.state("grids"))]
    meta: dict[str, Any] = {"dispatcher": disp}
    if run_.window_us <= 0:  # what the next unit's stats carry on (nothing expires)
        meta["held"] = held_meta(u)
    res = u.publish(pieces, meta=meta)
    _housekeeping(u, run_)
    return {**res, "rows_out": res["published"].get("output")}  # type: ignore[no-any-return]
