"""S3J stage 5, quality gate (Great Expectations): the pair contract on the unit's pairs - schema,
0 <= distance <= t, left_id < right_id for a self-join, no pair twice in a window - and every
pair names a record this unit staged in the pair's window. With ingest's rule that a (side, id)
is never admitted twice to an open window, that last expectation proves no pair of an earlier
unit repeats here, without reading the published output back (at 1 % selectivity a window holds
tens of millions of pairs). Nothing is published unless it passes."""

from __future__ import annotations

import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.s3j.common import S3JRun, open_unit
from simjoin.contracts import RowKind
from simjoin.quality.gates import Expect, pairs_expectations, run_suite
from simjoin.spark import delta

#: Up to this many pairs, the gate reads the unit's pair files in the driver and validates them
#: there (pandas); above, Spark reads them.
DRIVER_ROWS = int(os.environ.get("SIMJOIN_GATE_DRIVER_ROWS", str(10_000_000)))
#: The output's columns, as the join tasks write them into its directory.
PAIR_ARROW = pa.schema([("left_id", pa.int64()), ("right_id", pa.int64()), ("distance", pa.float64()),
                        ("window_start", pa.timestamp("us", tz="UTC"))])


def staged_files(run_: S3JRun, u: Any) -> delta.Files | None:
    """The pair files the join tasks wrote into the output's directory, or None when the join
    handed its pairs over as rows (an output that is not a local Delta table)."""
    target = delta.file_target(run_.output, PAIR_ARROW)
    if target is None:
        return None
    if u.in_process:
        j = u.work("joined")
        names = j.filter(pc.equal(j.column("kind"), int(RowKind.FILE))).column("file").to_pylist()
    else:
        names = [r["file"] for r in u.work("joined").where(F.col("kind") == int(RowKind.FILE)).select("file").collect()]
    return delta.Files(target[0], target[1], tuple(json.loads(f) for f in names))


def staged_pairs(run_: S3JRun, u: Any, files: delta.Files | None = None) -> Any:
    """The unit's pairs in the output's columns: read from the join tasks' files (``files`` when
    the caller has listed them already), or the rows; a pyarrow Table on the in-process executor."""
    files = staged_files(run_, u) if files is None else files
    if u.in_process:
        if files is not None and files.rows:
            return delta.files_table(files)
        j = u.work("joined")
        j = j.filter(pc.equal(j.column("kind"), int(RowKind.PAIR)))
        return pa.table({"left_id": j.column("left_id"), "right_id": j.column("right_id"),
                         "distance": j.column("distance"), "window_start": j.column("w").cast(PAIR_ARROW.field(
                             "window_start").type)}, schema=PAIR_ARROW)
    if files is not None and files.rows:
        return delta.files_frame(u.engine.spark, files)
    return (u.work("joined").where(F.col("kind") == int(RowKind.PAIR))
            .select("left_id", "right_id", "distance", F.timestamp_micros("w").alias("window_start")))


def with_new_record(pairs: Any, records: Any, self_join: bool) -> Any:
    """``pairs`` with ``new_record``: True when the pair's left or right record was staged by this
    unit in the pair's window (``records``: the unit's staged rows, one per window of a record)."""
    recs = records.select("window_start", "side", "id")
    marks = []
    for end, side in (("left_id", 0), ("right_id", 0 if self_join else 1)):
        mark = f"_{end}_new"
        staged = recs.where(F.col("side") == side).select(
            "window_start", F.col("id").alias(end), F.lit(True).alias(mark)).distinct()
        pairs = pairs.join(staged, ["window_start", end], "left")
        marks.append(F.col(mark))
    return pairs.withColumn("new_record", F.coalesce(*marks, F.lit(False))).drop(*marks)


def new_record_column(pairs: Any, records: Any, self_join: bool) -> Any:
    """``with_new_record`` for pyarrow tables in the driver: the ``new_record`` column. Each
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
    id``), both Spark DataFrames or both pyarrow Tables (raises ``GateFailed``)."""
    ex = pairs_expectations("distance", 0.0, float(threshold), self_join, "window_start")
    ex.append(Expect.of("ExpectColumnValuesToBeInSet", column="new_record", value_set=[True]))
    if isinstance(pairs, pa.Table):
        return run_suite(pairs.append_column("new_record", new_record_column(pairs, records, self_join)),
                         "s3j_pairs", ex)
    marked = with_new_record(pairs, records, self_join).persist()  # joined once, not once per expectation
    try:
        return run_suite(marked, "s3j_pairs", ex)
    finally:
        marked.unpersist()


def run(spark: SparkSession, run_: S3JRun) -> dict[str, Any]:
    u = open_unit(spark, run_)
    if u is None:
        return {"unit": None}
    files = staged_files(run_, u)
    if u.in_process:
        res = check(staged_pairs(run_, u, files), u.records.select(["window_start", "side", "id"]),
                    run_.cfg.threshold, run_.self_join)
        return {"unit": u.id, "expectations": res.evaluated, "success": res.success}
    recs = u.records.select("window_start", "side", "id")
    if files is not None and files.n <= DRIVER_ROWS:  # the pairs' files, read here: no Spark job
        res = check(delta.files_table(files), recs.toArrow(), run_.cfg.threshold, run_.self_join)
    else:
        res = check(staged_pairs(run_, u, files), recs, run_.cfg.threshold, run_.self_join)
    return {"unit": u.id, "expectations": res.evaluated, "success": res.success}
