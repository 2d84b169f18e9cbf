"""Stage: write a synthetic input table (sets, vectors, ineq, keys, aqi) to Delta.

A path that already holds a Delta table is refused unless ``--overwrite`` (DAG param
``overwrite``) is given; a retry of the same Airflow run replaces the table its first attempt
wrote. A path holding anything that is not a Delta table is never replaced.
"""

from __future__ import annotations

import os
from typing import Any

from pyspark.sql import SparkSession

from simjoin.config import parse_duration
from simjoin.pipeline.spec import Run
from simjoin.spark import delta
from simjoin.spark import generate as gen


def _marker(run: Run) -> str:
    return f"simjoin generate {run.run_id}"


def check_out(spark: SparkSession, run: Run) -> None:
    """Refuse an ``out`` that holds a table (without overwrite) or anything else (always)."""
    out = str(run.cfg.out)
    if delta.table_exists(spark, out):
        if run.cfg.overwrite:
            return
        if run.trigger != "cli":  # an Airflow retry of this very run may replace what it wrote
            last = delta.history(spark, out, 1).select("userMetadata").first()
            if last is not None and last[0] == _marker(run):
                return
        raise ValueError(f"--out {out} already holds a Delta table: allowed a new path, or --overwrite "
                         "(DAG param overwrite: true) to replace it")
    local = None if "://" in out and not out.startswith("file://") else os.path.abspath(out.removeprefix("file://"))
    if local is not None and os.path.isdir(os.path.join(local, "_delta_log")):
        return  # a Delta write that failed before its first commit (a retry replaces its files)
    if local is not None and os.path.exists(local) and (not os.path.isdir(local) or os.listdir(local)):
        what = "a file" if not os.path.isdir(local) else "a folder that is not a Delta table"
        raise ValueError(f"--out {out} is {what}: allowed a new path, an empty folder or a Delta table "
                         "(with --overwrite)")


def run(spark: SparkSession, run: Run) -> dict[str, Any]:
    cfg = run.cfg
    check_out(spark, run)
    if cfg.kind == "sets":
        df = gen.sets_df(spark, cfg.rows, cfg.seed, universe=cfg.universe, dup_frac=cfg.dup_frac, lengths=cfg.lengths,
                         dist=cfg.dist)
    elif cfg.kind == "vectors":
        df = gen.vectors_df(spark, cfg.rows, cfg.dim, cfg.dist, cfg.rate, cfg.seed, drift=cfg.drift,
                            drift_period=parse_duration(cfg.drift_period), drift_after=cfg.drift_after)
    elif cfg.kind == "ineq":
        df = gen.ineq_df(spark, cfg.rows, cfg.dist, cfg.seed, cfg.rate)
    elif cfg.kind == "aqi":
        df = gen.aqi_df(spark, cfg.rows, cfg.domain, cfg.seed, cfg.rate)
    else:
        df = gen.keys_df(spark, cfg.rows, cfg.alpha, cfg.domain, cfg.seed, cfg.rate)
    delta.overwrite(df, cfg.out, options={"userMetadata": _marker(run)})
    return {"kind": cfg.kind, "path": cfg.out, "rows": cfg.rows, "version": delta.latest_version(spark, cfg.out)}
