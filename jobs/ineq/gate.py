"""Inequality join stage 4, quality gate (Great Expectations): the pair contract on the unit's
pairs - schema, no null, no pair twice, a self-join never pairs a tuple with itself. A pair of an
earlier unit cannot repeat here: every pair holds a tuple of this unit, and a live id is never
admitted twice (ingest). Nothing is published unless it passes."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.ineq.common import IneqRun
from simjoin.contracts import RowKind
from simjoin.quality.gates import Expect, pairs_expectations, run_suite

#: Up to this many pairs, a unit on the Spark executor brings its pairs to the driver (one job) and
#: validates them there as Arrow; above, the suite runs on Spark.
DRIVER_ROWS = int(os.environ.get("SIMJOIN_GATE_DRIVER_ROWS", str(10_000_000)))


def staged_pairs(u: Any) -> Any:
    """The unit's pairs as the output holds them: a DataFrame, or a pyarrow Table (in process)."""
    if u.in_process:
        t = u.work("probed")
        t = t.filter(pc.equal(t.column("kind"), int(RowKind.PAIR)))
        return pa.table({"left_id": t.column("left_id"), "right_id": t.column("right_id"),
                         "ts": t.column("ts").cast(pa.timestamp("us", tz="UTC"))})
    return (u.work("probed").where(F.col("kind") == int(RowKind.PAIR))
            .select("left_id", "right_id", F.timestamp_micros("ts").alias("ts")))


def run(spark: SparkSession, run_: IneqRun) -> dict[str, Any]:
    u = run_.open_unit(spark)
    if u is None:
        return {"unit": None}
    pairs = staged_pairs(u)
    on_driver = u.in_process
    if not on_driver:  # up to DRIVER_ROWS pairs: one Spark job, then the suite on Arrow (the gate server)
        t = pairs.limit(DRIVER_ROWS + 1).toArrow()
        if t.num_rows <= DRIVER_ROWS:
            pairs, on_driver = t, True
    ex = [*pairs_expectations(None, None, None, False), Expect.of("ExpectColumnValuesToNotBeNull", column="ts")]
    if run_.self_join and on_driver:
        pairs = pairs.append_column("_self", pc.equal(pairs.column("left_id"), pairs.column("right_id")))
        ex.append(Expect.of("ExpectColumnValuesToNotBeInSet", column="_self", value_set=[True]))
    elif run_.self_join:  # two streams may share ids; one stream never pairs a tuple with itself
        pairs = pairs.withColumn("_self", F.col("left_id") == F.col("right_id"))
        ex.append(Expect.of("ExpectColumnValuesToNotBeInSet", column="_self", value_set=[True]))
    res = run_suite(pairs, "ineq_pairs", ex)
    return {"unit": u.id, "expectations": res.evaluated, "success": res.success}
