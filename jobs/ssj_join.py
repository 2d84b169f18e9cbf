"""Stage 3: the distributed join. Each plan unit runs as its own Spark task with a local PPJoin;
pairs go to the staging table, one stats row per unit to the stats table."""

from __future__ import annotations

from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.ssj_common import SSJRun
from jobs.ssj_optimize import load_plan
from simjoin.core.setsim import Plan
from simjoin.log import get_logger, stage
from simjoin.spark import delta
from simjoin.spark import setsim as S
from simjoin.spark.session import small_frame

log = get_logger("simjoin.ssj")
STATS_SCHEMA = ("unit int, records_indexed long, records_probed long, candidates long, verified long, results long, "
                "wall_seconds double, task_partition int, node int, modgroup int, est_cost double, "
                "est_ram_bytes long, actual_cost double, run_id string")
STAT_COLS = [c.split()[0] for c in STATS_SCHEMA.split(", ")]


def run(spark: SparkSession, job: SSJRun) -> dict[str, float]:
    return join(spark, job)[0]


def join(spark: SparkSession, job: SSJRun, plan: Plan | None = None, records: DataFrame | None = None,
         staging: bool = True) -> tuple[dict[str, float], DataFrame | None]:
    """Run every unit; write the stats table and (with ``staging``) the staging pairs table.
    Without ``staging`` the pairs come back as a persisted DataFrame for an in-process gate."""
    with stage("ssj join", log):
        plan = plan or load_plan(spark, job)
        if records is None:
            records = delta.read_table(spark, job.tables.tokens).filter(F.col("run_id") == job.run_id)
        # one partition per unit: no coalescing of the shuffle by AQE
        prev = spark.conf.get("spark.sql.adaptive.coalescePartitions.enabled") or "true"
        spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
        try:
            res = S.join_units(S.route_to_units(records, plan), plan, job.rs).persist(StorageLevel.MEMORY_AND_DISK)
            pairs = (res.filter("row_type = 'pair'").select("left_id", "right_id", "similarity")
                     .withColumn("run_id", F.lit(job.run_id)))
            # one stats row per unit, completed on the driver with the plan's estimates
            got = {r["unit"]: r for r in res.filter("row_type = 'stats'").select(*STAT_COLS[:8]).collect()}
            stat_rows = []
            for u in plan.units:
                r = got.get(u.unit)
                vals = [int(r[c]) if r else 0 for c in STAT_COLS[1:6]]
                stat_rows.append((u.unit, *vals, float(r["wall_seconds"]) if r else 0.0,
                             int(r["task_partition"]) if r else None, u.node, u.modgroup, float(u.est_cost),
                             int(u.est_ram_bytes), float(vals[2]), job.run_id))
            delta.overwrite_partition(small_frame(spark, stat_rows, STATS_SCHEMA), job.tables.stats, job.part)
            if staging:
                delta.overwrite_partition(pairs, job.tables.staging, job.part)
                res.unpersist()
        finally:
            spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", prev)
        rows: list[dict[str, Any]] = [dict(zip(STAT_COLS, r)) for r in stat_rows]
        for row in rows:
            log.info("ssj unit %d (node %d, modgroup %d): indexed %d probed %d candidates %d results %d in %.2fs",
                     row["unit"], row["node"], row["modgroup"], row["records_indexed"], row["records_probed"],
                     row["candidates"], row["results"], row["wall_seconds"])
        walls = [row["wall_seconds"] for row in rows]
        out = {"pairs": int(sum(row["results"] for row in rows)), "units": len(rows),
               "candidates": int(sum(row["candidates"] for row in rows)),
               "slowest_unit_s": float(max(walls, default=0.0)), "fastest_unit_s": float(min(walls, default=0.0))}
        return out, (None if staging else pairs)
