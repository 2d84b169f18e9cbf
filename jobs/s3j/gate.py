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

from jobs.s3j.common import S3JRun, open_unit
from simjoin.contracts import RowKind
from simjoin.quality.gates import Expect, pairs_expectations, run_suite
from simjoin.spark import delta

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
    j = u.work("joined")
    j = j.filter(pc.equal(j.column("kind"), int(RowKind.PAIR)))
    return pa.table({"left_id": j.column("left_id"), "right_id": j.column("right_id"),
                     "distance": j.column("distance"), "window_start": j.column("w").cast(PAIR_ARROW.field(
                         "window_start").type)}, schema=PAIR_ARROW)


def new_record_column(pairs: Any, records: Any, self_join: bool) -> Any:
    """The ``new_record`` column of ``pairs``: True when the pair's left or right record was staged
    by this unit in the pair's window (``records``: the unit's staged rows, one per window of a
    record). Each
    (window, side)'s staged ids become a bitmap over their range when it is compact (a stream's
    ids usually are: one lookup per pair end), else are sorted once and every pair end is looked
    up by binary search (``np.isin`` hashes millions of pair ids per call)."""
    import numpy as np

    def us(t: Any) -> Any:
        return np.asarray(t.column("window_start").cast(pa.int64()).to_numpy(zero_copy_only=False), np.int64)

    ws, rws, rside = us(pairs), us(records), np.asarray(records.column("side").to_numpy(zero_copy_only=False))
    rid = np.asarray(records.column("id").to_numpy(zero_copy_only=False), np.int64)
    out = np.zeros(pairs.num_rows, bool)
    windows = np.unique(ws)
    one = windows.size == 1
    for end, side in (("left_id", 0), ("right_id", 0 if self_join else 1)):
        ids = np.asarray(pairs.column(end).to_numpy(zero_copy_only=False), np.int64)
        for w in windows:
            m = slice(None) if one else ws == w
            staged = np.sort(rid[(rside == side) & (rws == w)])
            if staged.size == 0:
                continue
            x = ids[m]
            lo, hi = int(staged[0]), int(staged[-1])
            if hi - lo < 8 * (x.size + staged.size) + (1 << 16):  # a bitmap of at most a few bytes per row
                bitmap = np.zeros(hi - lo + 1, bool)
                bitmap[staged - lo] = True
                inside = (x >= lo) & (x <= hi)
                hit = np.zeros(x.size, bool)
                hit[inside] = bitmap[x[inside] - lo]
                out[m] |= hit
            else:
                pos = np.minimum(np.searchsorted(staged, x), staged.size - 1)
                out[m] |= staged[pos] == x
    return pa.array(out)


def check(pairs: Any, records: Any, threshold: float, self_join: bool) -> Any:
    """The gate's suite on a unit's ``pairs`` and its staged ``records`` (``window_start, side,
    id``), pyarrow Tables (raises ``GateFailed``)."""
    ex = pairs_expectations("distance", 0.0, float(threshold), self_join, "window_start")
    ex.append(Expect.of("ExpectColumnValuesToBeInSet", column="new_record", value_set=[True]))
    return run_suite(pairs.append_column("new_record", new_record_column(pairs, records, self_join)),
                     "s3j_pairs", ex)


def run(spark: Any, run_: S3JRun) -> dict[str, Any]:
    u = open_unit(spark, run_)
    if u is None:
        return {"unit": None}
    res = check(staged_pairs(run_, u), u.records.select(["window_start", "side", "id"]), run_.cfg.threshold,
                run_.self_join)
    return {"unit": u.id, "expectations": res.evaluated, "success": res.success}
