"""Inequality join stage 2, probe (SPO-Join Section 5): the unit's new tuples probe every live
immutable PO-Join batch (IEJoin bit-array scan) and the mutable part (per-attribute bitsets,
ANDed) of the other role, in parallel - one Spark task per worker's batch list - and are joined
among themselves. Every probe ends with the exact window test, so a coarse expiry never shows.
Pairs and per-batch counters go to ``<output>_work/probed``."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from jobs.ineq.common import IneqRun, new_tuples
from simjoin.core.inequality.spo import MUTABLE
from simjoin.spark.engine import read_state
from simjoin.spark.inequality import probe_df


def live_state(spark: SparkSession, run: IneqRun, unit: int) -> DataFrame | None:
    """The state a unit probes: every batch committed before it, and each side's latest mutable part."""
    st = read_state(spark, run.batches, unit)
    if st is None:
        return None
    latest = F.max(F.when(F.col("kind") == MUTABLE, F.col("unit"))).over(Window.partitionBy("side"))
    return (st.withColumn("_latest", latest)
            .where((F.col("kind") != MUTABLE) | (F.col("unit") == F.col("_latest"))).drop("_latest"))


def run(spark: SparkSession, run_: IneqRun) -> dict[str, Any]:
    u = run_.open_unit(spark)
    if u is None:
        return {"unit": None}
    new = new_tuples(spark, run_, u)
    out = probe_df(spark, live_state(spark, run_, u.id), new, run_.params())
    return {"unit": u.id, "probed": u.write_work(out, "probed"), "new": {s: len(t) for s, t in new.items()}}
