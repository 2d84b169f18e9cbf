"""S3J stage 4, similarity computation (Section 7.7): rows routed by worker, joined in tasks.

New members are joined with each other and with the earlier members of the same worksets
kept in the join state (so a window spanning units reports each pair exactly once). Worksets
run where the rebalance stage's latest assignment puts them; a split workset's rows are
replicated per part (``route_by_assignment``). Pairs go to
the output table's directory as Parquet files no commit names yet (one per task, listed in
``<output>_work/joined``; the pairs themselves in ``joined`` when the output is not a local
table), the per-(window, worker) and per-workset counters to ``counters``; ``publish`` commits
the files to the output once the gate has passed.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.s3j.common import S3JRun, micros, open_unit, read_assignment, read_state
from jobs.s3j.gate import PAIR_ARROW
from simjoin.contracts import Role, RowKind
from simjoin.spark import delta
from simjoin.spark.metric import join_counters, join_worksets_df, route_by_assignment

MEMBER_COLS = ["w", "we", "partition", "workset_id", "worker", "side", "id", "vector", "role", "is_new"]


def run(spark: SparkSession, run_: S3JRun) -> dict[str, Any]:
    u = open_unit(spark, run_)
    if u is None:
        return {"unit": None}
    new = u.work("members").where(F.col("kind") == int(RowKind.MEMBER)).select(*MEMBER_COLS)
    members = new
    js = read_state(spark, run_.join_state, u.id)
    if js is not None:
        # each workset's earlier rows go where its new rows go (its worker now)
        keys = new.where("is_new").select("w", "partition", "workset_id", "worker").distinct()
        old = (js.where(F.col("role") != int(Role.BUFFER))
               .select(micros("window_start").alias("w"), micros("window_end").alias("we"), "partition",
                       "workset_id", "side", "id", "vector", "role", F.lit(False).alias("is_new"))
               .join(keys, ["w", "partition", "workset_id"], "inner").select(*MEMBER_COLS))
        members = new.unionByName(old)
    # the rebalance stage's assignment in force (split worksets replicated per part)
    members = route_by_assignment(members, read_assignment(spark, run_, u.id))
    # the tasks write the pairs as Parquet files into the output's directory (publish commits them)
    files = delta.file_target(run_.output, PAIR_ARROW)
    path = u.write_work(join_worksets_df(members, run_.params(u.dim), files), "joined")
    # the counters (a few rows) apart, so later stages do not scan the unit's pairs for them
    u.write_work(join_counters(u.work("joined")), "counters")
    n = u.work("counters").where(F.col("kind") == int(RowKind.STATS)).agg(F.sum("results")).first()[0]  # type: ignore
    return {"unit": u.id, "joined": path, "pairs": int(n or 0)}
