"""S3J stage 5, quality gate (Great Expectations): the pair contract on every window this unit
touched - schema, 0 <= distance <= t, left_id < right_id for a self-join, no pair twice in a
window, including pairs published by earlier units. Nothing is published unless it passes."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.s3j.common import S3JRun, open_unit
from simjoin.contracts import RowKind
from simjoin.quality.gates import pairs_expectations, run_suite
from simjoin.spark import delta

PAIR_COLS = ("left_id", "right_id", "distance", "window_start")
#: The output's columns, as the join tasks write them into its directory.
PAIR_ARROW = pa.schema([("left_id", pa.int64()), ("right_id", pa.int64()), ("distance", pa.float64()),
                        ("window_start", pa.timestamp("us", tz="UTC"))])


def staged_files(run_: S3JRun, u: Any) -> delta.Files | None:
    """The pair files the join tasks wrote into the output's directory, or None when the join
    handed its pairs over as rows (an output that is not a local Delta table)."""
    target = delta.file_target(run_.output, PAIR_ARROW)
    if target is None:
        return None
    rows = u.work("joined").where(F.col("kind") == int(RowKind.FILE)).select("file").collect()
    return delta.Files(target[0], target[1], tuple(json.loads(r["file"]) for r in rows))


def staged_pairs(run_: S3JRun, u: Any) -> Any:
    """The unit's pairs in the output's columns: read from the join tasks' files, or the rows."""
    files = staged_files(run_, u)
    if files is not None and files.rows:
        return delta.files_frame(u.engine.spark, files)
    return (u.work("joined").where(F.col("kind") == int(RowKind.PAIR))
            .select("left_id", "right_id", "distance", F.timestamp_micros("w").alias("window_start")))


def run(spark: SparkSession, run_: S3JRun) -> dict[str, Any]:
    u = open_unit(spark, run_)
    if u is None:
        return {"unit": None}
    pairs = staged_pairs(run_, u)
    # Once publishing began, the output may already hold this unit's pairs: check them alone.
    if delta.table_exists(spark, run_.output) and not u.engine.publishing(u.id):
        touched = pairs.select("window_start").distinct()
        pairs = pairs.unionByName(delta.read_small_or_table(spark, run_.output).select(*PAIR_COLS)
                                  .join(touched, "window_start", "left_semi"))
    hi = float(run_.cfg.threshold)
    res = run_suite(pairs, "s3j_pairs", pairs_expectations("distance", 0.0, hi, run_.self_join, "window_start"))
    return {"unit": u.id, "expectations": res.evaluated, "success": res.success}
