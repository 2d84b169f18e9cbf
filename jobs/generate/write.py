"""Stage: write a synthetic input table (sets, vectors, ineq, keys, aqi) to Delta."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

from simjoin.config import parse_duration
from simjoin.pipeline.spec import Run
from simjoin.spark import delta
from simjoin.spark import generate as gen


def run(spark: SparkSession, run: Run) -> dict[str, Any]:
    cfg = run.cfg
    if cfg.kind == "sets":
        df = gen.sets_df(spark, cfg.rows, cfg.seed)
    elif cfg.kind == "vectors":
        df = gen.vectors_df(spark, cfg.rows, cfg.dim, cfg.dist, cfg.rate, cfg.seed, drift=cfg.drift,
                            drift_period=parse_duration(cfg.drift_period), drift_after=cfg.drift_after)
    elif cfg.kind == "ineq":
        df = gen.ineq_df(spark, cfg.rows, cfg.dist, cfg.seed, cfg.rate)
    elif cfg.kind == "aqi":
        df = gen.aqi_df(spark, cfg.rows, cfg.domain, cfg.seed, cfg.rate)
    else:
        df = gen.keys_df(spark, cfg.rows, cfg.alpha, cfg.domain, cfg.seed, cfg.rate)
    delta.overwrite(df, cfg.out)
    return {"kind": cfg.kind, "path": cfg.out, "rows": cfg.rows, "version": delta.latest_version(spark, cfg.out)}
