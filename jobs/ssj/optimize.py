"""Stage 2: the optimizer (Fier & Freytag Sec. 2.1-2.5): length statistics -> plan table, one
row per unit (node, modgroup) with index lengths, probe lengths, estimated cost and RAM."""

from __future__ import annotations

from typing import Any

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.ssj.common import SSJRun
from simjoin.core.setsim import Plan, choose_parameters, make_plan
from simjoin.log import get_logger
from simjoin.spark import delta
from simjoin.spark import setsim as S

log = get_logger("simjoin.ssj")


def run(spark: SparkSession, job: SSJRun) -> dict[str, Any]:
    plan = make(spark, job)
    return {"units": plan.n_units, "n": plan.n, "m": plan.m, "deviation": float(plan.deviation)}


def make(spark: SparkSession, job: SSJRun) -> Plan:
    cfg = job.cfg
    rows = job.frame("length_rows", lambda: delta.read_table(spark, job.tables.lengths)
                     .filter(F.col("run_id") == job.run_id).collect())
    rows = sorted(rows, key=lambda r: r["length"])
    lengths = np.array([r["length"] for r in rows], dtype=np.int64)
    counts = np.array([r["count"] for r in rows], dtype=np.int64)
    if cfg.workers is not None or cfg.mod is not None:
        plan = make_plan(lengths, counts, cfg.threshold, cfg.similarity, n=cfg.workers or 1, m=cfg.mod or 1)
    else:
        t = cfg.total_units
        plan = choose_parameters(lengths, counts, cfg.threshold, cfg.similarity, total_units=t,
                                 memory_bytes=int(cfg.memory_gb * 2**30), min_nodes=min(4, t))
    out = S.plan_to_df(spark, plan).withColumn("run_id", F.lit(job.run_id))
    delta.overwrite_partition(out, job.tables.plan, job.part)
    log.info("ssj optimize: n=%d m=%d -> %d units, cost deviation %.2f", plan.n, plan.m, plan.n_units,
             plan.deviation)
    return job.keep("plan", plan)  # type: ignore[no-any-return]


def load_plan(spark: SparkSession, job: SSJRun) -> Plan:
    """The plan kept by this process's optimizer, else this run's plan table."""
    if "plan" in job.frames:
        return job.frames["plan"]  # type: ignore[no-any-return]
    rows = delta.read_table(spark, job.tables.plan).filter(F.col("run_id") == job.run_id).collect()
    return S.plan_from_rows(rows)
