"""S3J stage 1, ingest: validate a micro-batch of the stream(s), assign windows, stage it.

Bad rows go to ``<output>_quarantine`` with a reason: null id/ts/vector, wrong dimension,
NaN or inf, zero vector under angular or cosine, duplicate (side, id) - inside the batch or
already seen in a still-open window - and records of a window the watermark has closed
(late). Good rows become one row per window they fall in (tumbling: one; sliding: size /
slide) and are appended to the staging table ``<output>_work/records`` (idempotent per
batch id).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from jobs.s3j_common import PIPELINE, S3JRun, check_fingerprint, progress, read_or_none
from simjoin.log import get_logger
from simjoin.quality.quarantine import Rule, not_null, split_quarantine, vector_rules, zero_vector
from simjoin.spark import delta
from simjoin.spark.metric import BUFFER
from simjoin.spark.runner import assign_windows, run_microbatches

log = get_logger("simjoin.s3j")
REQUIRED = ("id", "ts", "vector")


def _seen(spark: SparkSession, run: S3JRun, last_done: int, batch_id: int) -> DataFrame | None:
    """(side, id) of records already accepted in still-open windows or staged but not joined."""
    parts = []
    js = read_or_none(spark, run.tables.join_state)
    if js is not None:
        parts.append(js.where(F.col("role") != BUFFER).where(F.col("batch_id") < batch_id).select("side", "id"))
    st = read_or_none(spark, run.tables.work("records"))
    if st is not None:
        parts.append(st.where((F.col("batch_id") > last_done) & (F.col("batch_id") < batch_id)).select("side", "id"))
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out.distinct().withColumn("_seen", F.lit(True))


def stage_batch(spark: SparkSession, run: S3JRun, batch: DataFrame, batch_id: int) -> dict[str, Any]:
    missing = [c for c in REQUIRED if c not in batch.columns]
    if missing:
        raise ValueError(f"input stream lacks columns {missing}: allowed schema id long, ts timestamp, "
                         f"vector array<double> (has {batch.columns})")
    prog = progress(spark, run)
    check_fingerprint(run, prog)
    side = F.col("side").cast("byte") if "side" in batch.columns else F.lit(0).cast("byte")
    df = batch.select(F.col("id").cast("long"), F.col("ts").cast("timestamp"),
                      F.col("vector").cast("array<double>"), side.alias("side"))
    dim = prog.dim
    if dim is None:
        top = (df.where(F.col("vector").isNotNull()).groupBy(F.size("vector").alias("d")).count()
               .orderBy(F.desc("count"), "d").first())
        dim = int(top["d"]) if top is not None and top["d"] > 0 else None
    rules = not_null("id", "ts", "vector") + vector_rules("vector", dim)
    if run.cfg.metric in ("angular", "cosine"):
        rules.append(zero_vector("vector", f"{run.cfg.metric} distance is undefined"))
    dup = F.row_number().over(Window.partitionBy("side", "id").orderBy("ts", "vector")) > 1
    rules.append(Rule(F.col("id").isNotNull() & dup, F.concat(F.lit("duplicate id "), F.col("id").cast("string"))))
    seen = _seen(spark, run, prog.last_done, batch_id)
    if seen is not None:
        df = df.join(seen, ["side", "id"], "left")
        rules.append(Rule(F.col("_seen").isNotNull(),
                          F.concat(F.lit("duplicate id "), F.col("id").cast("string"), F.lit(" (seen earlier)"))))
    res = split_quarantine(df, rules, table=f"{run.output} batch {batch_id}")
    good = res.good.drop("_seen") if seen is not None else res.good
    win = assign_windows(good, run.window_s, run.slide_s)
    late_c = F.lit(False) if prog.watermark is None else F.col("window_end") <= F.lit(prog.watermark)
    win = win.withColumn("_late", late_c).cache()
    late = win.where("_late").select(
        "id", "ts", "vector", "side",
        F.concat(F.lit("late: window starting "), F.col("window_start").cast("string"),
                 F.lit(f" closed at watermark {prog.watermark}")).alias("reason"))
    staged = win.where(~F.col("_late")).drop("_late").withColumn("batch_id", F.lit(batch_id).cast("long"))
    n_late = late.count()
    n_staged = staged.count()
    bad_cols = ["id", "ts", "vector", "side", "reason"]
    if res.n_bad or n_late:
        bad = res.bad.select(*bad_cols).unionByName(late)
        out = bad.withColumn("stage", F.lit("ingest")).withColumn("run_id", F.lit(f"batch-{batch_id}"))
        delta.overwrite_partition(out, run.tables.quarantine, {"run_id": f"batch-{batch_id}"})
    if n_staged:
        delta.append_idempotent(staged, run.tables.work("records"), f"{PIPELINE}/records", batch_id)
    win.unpersist()
    log.info("s3j ingest batch %d: %d rows, %d staged (record x window), %d quarantined, %d late",
             batch_id, res.n_in, n_staged, res.n_bad, n_late)
    return {"batch_id": batch_id, "rows": res.n_in, "staged": n_staged, "quarantined": res.n_bad + n_late,
            "dim": dim}


def run(spark: SparkSession, run_: S3JRun) -> dict[str, Any]:
    """Stage everything that arrived since the last run (DAG task; the CLI joins per batch)."""
    infos: list[dict[str, Any]] = []
    summary = run_microbatches(spark, run_.sources, run_.tables.checkpoint, PIPELINE,
                               lambda b, ctx: infos.append(stage_batch(spark, run_, b, ctx.batch_id)))
    return {"batches": summary.batches, "rows": summary.rows, "staged": sum(i["staged"] for i in infos),
            "quarantined": sum(i["quarantined"] for i in infos), "records": run_.tables.work("records")}
