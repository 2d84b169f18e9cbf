"""The whole set-similarity join for the CLI: tokenize -> gate -> optimize -> join -> gate -> publish.
The DAG runs the same stages as separate, retryable tasks."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pyspark.sql import SparkSession

from jobs import ssj_gates, ssj_join, ssj_optimize, ssj_publish, ssj_tokenize
from jobs.ssj_common import SSJRun
from simjoin.spark import delta


@dataclass(frozen=True)
class SSJResult:
    pairs: int
    units: int
    n: int
    m: int
    records: int
    quarantined: int
    seconds: float
    slowest_unit_s: float
    fastest_unit_s: float


def run(spark: SparkSession, job: SSJRun) -> SSJResult:
    from simjoin.quality.gates import preload

    t0 = time.perf_counter()
    preload()
    # One process runs every stage: hand DataFrames from stage to stage instead of reading the
    # stage tables back (they are still written), and gate the pairs before the one output write.
    # The stage tables are written by concurrent background jobs while the next stage runs.
    # The token gate runs beside the optimizer and the join (its jobs are small and mostly wait on
    # Great Expectations); nothing is published unless it passed.
    try:
        with delta.background_writes(), ThreadPoolExecutor(1, thread_name_prefix="gate") as gates:
            tok, records, length_rows = ssj_tokenize.tokenize(spark, job, keep=True)
            assert records is not None
            token_gate = gates.submit(ssj_gates.tokens, spark, job, records)
            plan = ssj_optimize.run(spark, job, length_rows)
            j, pairs = ssj_join.join(spark, job, plan, records, staging=False)
            assert pairs is not None
            token_gate.result()
            ssj_gates.pairs(spark, job, pairs)
            n = ssj_publish.run(spark, job, pairs)
    finally:
        spark.catalog.clearCache()
    return SSJResult(n, plan.n_units, plan.n, plan.m, tok["records"], tok["quarantined"],
                     time.perf_counter() - t0, j["slowest_unit_s"], j["fastest_unit_s"])


def task(stage: str, params: dict, run_id: str) -> dict:
    """Airflow entry point: one stage of one run, from validated DAG params."""
    from simjoin.config import SSJConfig, load_config
    from simjoin.spark.session import get_spark

    keys = {"threshold", "similarity", "tokenizer", "id_col", "text_col", "workers", "mod", "total_units", "memory_gb"}
    cfg = load_config(SSJConfig, "ssj", {k: v for k, v in params.items() if k in keys})
    job = SSJRun(input=params["input"], output=params["output"], cfg=cfg, right=params.get("right") or None,
                 run_id=sanitize_run_id(run_id))
    spark = get_spark()
    if stage == "tokenize":
        return ssj_tokenize.run(spark, job)
    if stage == "gate_tokens":
        ssj_gates.tokens(spark, job)
        return {"table": job.tables.tokens}
    if stage == "optimize":
        p = ssj_optimize.run(spark, job)
        return {"units": p.n_units, "n": p.n, "m": p.m}
    if stage == "join":
        return ssj_join.run(spark, job)
    if stage == "gate_pairs":
        ssj_gates.pairs(spark, job)
        return {"table": job.tables.staging}
    if stage == "publish":
        return {"pairs": ssj_publish.run(spark, job), "table": job.output, "run_id": job.run_id}
    raise ValueError(f"invalid stage {stage!r}: allowed tokenize, gate_tokens, optimize, join, gate_pairs, publish")


def sanitize_run_id(run_id: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_.:+\-]", "_", run_id)
