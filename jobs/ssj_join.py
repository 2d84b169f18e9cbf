"""Stage 3: the distributed join. Each plan unit runs as its own Spark task with a local PPJoin;
pairs go to the staging table, one stats row per unit to the stats table."""

from __future__ import annotations

from pyspark import StorageLevel
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.ssj_common import SSJRun
from jobs.ssj_optimize import load_plan
from simjoin.log import get_logger, stage
from simjoin.spark import delta
from simjoin.spark import setsim as S

log = get_logger("simjoin.ssj")


def run(spark: SparkSession, job: SSJRun) -> dict[str, float]:
    with stage("ssj join", log):
        plan = load_plan(spark, job)
        records = delta.read_table(spark, job.tables.tokens).filter(F.col("run_id") == job.run_id)
        # one partition per unit: no coalescing of the shuffle by AQE
        prev = spark.conf.get("spark.sql.adaptive.coalescePartitions.enabled")
        spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
        try:
            res = S.join_units(S.route_to_units(records, plan), plan, job.rs).persist(StorageLevel.MEMORY_AND_DISK)
            pairs = res.filter("row_type = 'pair'").select("left_id", "right_id", "similarity")
            delta.overwrite_partition(pairs.withColumn("run_id", F.lit(job.run_id)), job.tables.staging, job.part)
            units = spark.createDataFrame(
                [(u.unit, u.node, u.modgroup, float(u.est_cost), int(u.est_ram_bytes)) for u in plan.units],
                "unit int, node int, modgroup int, est_cost double, est_ram_bytes long")
            stats = (res.filter("row_type = 'stats'")
                     .select("unit", "records_indexed", "records_probed", "candidates", "verified", "results",
                             "wall_seconds", "task_partition")
                     .join(units, "unit", "right")
                     .fillna(0, ["records_indexed", "records_probed", "candidates", "verified", "results"])
                     .fillna(0.0, ["wall_seconds"])
                     .withColumn("actual_cost", F.col("candidates").cast("double"))
                     .withColumn("run_id", F.lit(job.run_id)))
            delta.overwrite_partition(stats, job.tables.stats, job.part)
            res.unpersist()
        finally:
            spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", prev)
        st = delta.read_table(spark, job.tables.stats).filter(F.col("run_id") == job.run_id)
        agg = st.agg(F.sum("results").alias("pairs"), F.max("wall_seconds").alias("slowest"),
                     F.min("wall_seconds").alias("fastest"), F.count("*").alias("units"),
                     F.sum("candidates").alias("candidates")).first()
        for r in st.orderBy("unit").collect():
            log.info("ssj unit %d (node %d, modgroup %d): indexed %d probed %d candidates %d results %d in %.2fs",
                     r["unit"], r["node"], r["modgroup"], r["records_indexed"], r["records_probed"],
                     r["candidates"], r["results"], r["wall_seconds"])
        return {"pairs": int(agg["pairs"] or 0), "units": int(agg["units"]), "candidates": int(agg["candidates"] or 0),
                "slowest_unit_s": float(agg["slowest"] or 0.0), "fastest_unit_s": float(agg["fastest"] or 0.0)}
