"""Inequality join stage 3, merge (SPO-Join Section 4.2): the unit's new tuples enter each side's
mutable part; every delta tuples (default: a slide) the mutable part becomes an immutable PO-Join
batch - sorted arrays, permutation array, offsets - dealt round-robin to the workers' batch lists.
The new state rows go to ``<output>_work/state``; ``publish`` appends them."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.ineq.common import IneqRun, new_tuples
from jobs.ineq.probe import live_state
from simjoin.core.inequality.spo import MUTABLE, merge_state, read_mutable
from simjoin.spark.inequality import state_frame
from simjoin.spark.session import small_frame


def run(spark: SparkSession, run_: IneqRun) -> dict[str, Any]:
    u = run_.open_unit(spark)
    if u is None:
        return {"unit": None}
    p = run_.params()
    new = new_tuples(spark, run_, u)
    st = live_state(spark, run_, u.id)
    prev = read_mutable(st.where(F.col("kind") == MUTABLE).collect()) if st is not None else {}
    next_batch = int(u.engine.progress().meta.get("next_batch", 0))
    rows, nxt, secs = merge_state(prev, new, p, next_batch)
    u.write_work(state_frame(spark, rows), "state")
    made = nxt - next_batch
    sizes = {int(r["side"]): int(r["n"]) for r in rows if r["kind"] == MUTABLE}
    u.write_work(small_frame(spark, [(secs["merge_seconds"], secs["build_seconds"], made, nxt,
                                      sum(sizes.values()))],
                             "merge_seconds double, build_seconds double, new_batches long, next_batch long, "
                             "mutable long"), "merge")
    return {"unit": u.id, "new_batches": made, "next_batch": nxt, "mutable": sizes, **secs}
