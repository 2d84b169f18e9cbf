"""Inequality join stage 2, probe (SPO-Join Section 5): the unit's new tuples probe every live
immutable PO-Join batch (IEJoin bit-array scan) and the mutable part (per-attribute bitsets,
ANDed) of the other role, in parallel - one Spark task per worker's batch list - and are joined
among themselves. Every probe ends with the exact window test, so a coarse expiry never shows.
Pairs and per-batch counters go to ``<output>_work/probed``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from jobs.ineq.common import IneqRun, new_tuples
from simjoin.core.inequality.spo import MUTABLE
from simjoin.spark import delta
from simjoin.spark.engine import read_state
from simjoin.spark.inequality import probe_df, probe_table


def live_state(spark: SparkSession, run: IneqRun, unit: int) -> DataFrame | None:
    """The state a unit probes: every batch committed before it, and each side's latest mutable part."""
    st = read_state(spark, run.batches, unit)
    if st is None:
        return None
    latest = F.max(F.when(F.col("kind") == MUTABLE, F.col("unit"))).over(Window.partitionBy("side"))
    return (st.withColumn("_latest", latest)
            .where((F.col("kind") != MUTABLE) | (F.col("unit") == F.col("_latest"))).drop("_latest"))


def live_state_arrow(run: IneqRun, unit: int) -> pa.Table | None:
    """:func:`live_state` read with deltalake (a unit on the in-process executor)."""
    st = delta.read_arrow(run.batches, [("unit", "<", int(unit))])
    if st is None or not st.num_rows:
        return None
    side = np.asarray(st.column("side").to_numpy(zero_copy_only=False), np.int64)
    units = np.asarray(st.column("unit").to_numpy(zero_copy_only=False), np.int64)
    mutable = np.asarray(pc.equal(st.column("kind").cast(pa.string()), MUTABLE).to_numpy(zero_copy_only=False), bool)
    keep = ~mutable
    for s in np.unique(side[mutable]).tolist():
        mine = mutable & (side == s)
        keep |= mine & (units == units[mine].max())
    return st.filter(pa.array(keep))


def run(spark: SparkSession, run_: IneqRun) -> dict[str, Any]:
    u = run_.open_unit(spark)
    if u is None:
        return {"unit": None}
    new = new_tuples(spark, run_, u)
    if u.in_process:
        out = probe_table(live_state_arrow(run_, u.id), new, run_.params())
    else:
        out = probe_df(spark, live_state(spark, run_, u.id), new, run_.params())
    return {"unit": u.id, "probed": u.write_work(out, "probed"), "new": {s: len(t) for s, t in new.items()}}
