"""S3J stage 5, quality gate (Great Expectations): the pair contract on the unit's pairs - schema,
0 <= distance <= t, left_id < right_id for a self-join, no pair twice in a window - and every
pair names a record this unit staged in the pair's window. With ingest's rule that a (side, id)
is never admitted twice to an open window, that last expectation proves no pair of an earlier
unit repeats here, without reading the published output back (at 1 % selectivity a window holds
tens of millions of pairs). Nothing is published unless it passes."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.s3j.common import S3JRun
from simjoin.contracts import RowKind
from simjoin.io import tables as delta
from simjoin.pipeline.context import StageContext
from simjoin.quality.gates import Expect, pairs_expectations, run_suite

#: The output's columns, as the join tasks write them into its directory.
PAIR_ARROW = pa.schema([("left_id", pa.int64()), ("right_id", pa.int64()), ("distance", pa.float64()),
                        ("window_start", pa.timestamp("us", tz="UTC"))])


def staged_files(run_: S3JRun, u: Any) -> delta.Files | None:
    """The pair files the join tasks wrote into the output's directory, or None when the join
    handed its pairs over as rows (an output that is not a local Delta table)."""
    target = delta.file_target(run_.output, PAIR_ARROW)
    if target is None:
        return None
    j = u.work("joined")
    names = j.filter(pc.equal(j.column("kind"), int(RowKind.FILE))).column("file").to_pylist()
    return delta.Files(target[0], target[1], tuple(json.loads(f) for f in names))


def staged_pairs(run_: S3JRun, u: Any, files: delta.Files | None = None) -> Any:
    """The unit's pairs in the output's columns: read from the join tasks' files (``files`` when
    the caller has listed them already), or the rows; a pyarrow Table."""
    files = staged_files(run_, u) if files is None else files
    if files is not None and files.rows:
        return delta.files_table(files)
    j = u.rows("joined", RowKind.PAIR, ["left_id", "right_id", "distance", "w"])
    return pa.table({"left_id": j.column("left_id"), "right_id": j.column("right_id"),
                     "distance": j.column("distance"), "window_start": j.column("w").cast(PAIR_ARROW.field(
                         "window_start").type)}, schema=PAIR_ARROW)


def new_record_column(pairs: Any, records: Any, self_join: bool) -> Any:
    """The ``new_record`` column of ``pairs``: True when the pair's left or right record was staged
    by this unit in the pair's window (``records``: the unit's staged rows, one per window of a
    record). Each pair end is looked up among its (window, side)'s staged ids in one compiled pass
    (``simjoin.core.membership``), record batch by record batch over the pairs' own buffers (no
    concatenated copy of millions of ids)."""
    import numpy as np

    from simjoin.core.membership import member_of, staged_index

    def ints(a: Any) -> Any:  # an int64 or timestamp column (chunk) as int64 numpy, zero-copy when it can
        if isinstance(a, pa.ChunkedArray):
            a = a.combine_chunks()
        return np.asarray(a.view(pa.int64()).to_numpy(zero_copy_only=False) if a.type.bit_width == 64
                          else a.cast(pa.int64()).to_numpy(zero_copy_only=False), np.int64)

    # (window, side) as one key: window_us * 2 + side
    index = staged_index(ints(records.column("window_start")) * 2 + ints(records.column("side")),
                         ints(records.column("id")))
    out = np.zeros(pairs.num_rows, bool)
    at = 0
    for b in pairs.select(["window_start", "left_id", "right_id"]).to_batches():
        ws, part = ints(b.column(0)), out[at:at + b.num_rows]
        member_of(ws, ints(b.column(1)), index, part, scale=2)
        member_of(ws, ints(b.column(2)), index, part, scale=2, shift=0 if self_join else 1)
        at += b.num_rows
    return pa.array(out)


def check(pairs: Any, records: Any, threshold: float, self_join: bool) -> Any:
    """The gate's suite on a unit's ``pairs`` and its staged ``records`` (``window_start, side,
    id``), pyarrow Tables (raises ``GateFailed``)."""
    ex = pairs_expectations("distance", 0.0, float(threshold), self_join, "window_start")
    ex.append(Expect.of("ExpectColumnValuesToBeInSet", column="new_record", value_set=[True]))
    return run_suite(pairs.append_column("new_record", new_record_column(pairs, records, self_join)),
                     "s3j_pairs", ex)


def run(ctx: StageContext) -> dict[str, Any]:
    run_: S3JRun = ctx.run
    u = ctx.unit
    res = check(staged_pairs(run_, u), u.records.select(["window_start", "side", "id"]), run_.cfg.threshold,
                run_.self_join)
    return {"unit": u.id, "expectations": res.evaluated, "success": res.success}
