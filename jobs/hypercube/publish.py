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

from jobs.hypercube.common import HyperCubeRun
from jobs.hypercube.dispatch import dispatch_row
from jobs.hypercube.gate import staged_output
from jobs.hypercube.stats import held_meta
from simjoin.pipeline.context import StageContext


def run(ctx: StageContext) -> dict[str, Any]:
    run_: HyperCubeRun = ctx.run
    u = ctx.unit
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
    return {**res, "rows_out": res["published"].get("output")}  # type: ignore[no-any-return]
