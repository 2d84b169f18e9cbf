"""Stage: write a synthetic input table (sets, vectors, ineq, keys) to Delta."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from simjoin.config import GenerateConfig
from simjoin.spark import delta
from simjoin.spark import generate as gen

KINDS = ("sets", "vectors", "ineq", "keys")


@dataclass(frozen=True)
class GenerateResult:
    kind: str
    path: str
    rows: int
    version: int


def run(spark: SparkSession, kind: str, out: str, cfg: GenerateConfig) -> GenerateResult:
    if kind not in KINDS:
        raise ValueError(f"invalid kind {kind!r}: allowed {', '.join(KINDS)}")
    if kind == "sets":
        df = gen.sets_df(spark, cfg.rows, cfg.seed)
    elif kind == "vectors":
        df = gen.vectors_df(spark, cfg.rows, cfg.dim, cfg.dist, cfg.rate, cfg.seed)
    elif kind == "ineq":
        df = gen.ineq_df(spark, cfg.rows, cfg.dist, cfg.seed, cfg.rate)
    else:
        df = gen.keys_df(spark, cfg.rows, cfg.alpha, cfg.domain, cfg.seed, cfg.rate)
    delta.overwrite(df, out)
    return GenerateResult(kind, out, cfg.rows, delta.latest_version(spark, out))


def run_task(params: dict) -> dict:
    """Airflow entry point: validated DAG params -> one generated Delta table; returns its path/version."""
    from simjoin.config import load_config
    from simjoin.spark.session import get_spark

    keys = {"rows", "seed", "dim", "dist", "rate", "alpha", "domain"}
    cfg = load_config(GenerateConfig, "generate", {k: v for k, v in params.items() if k in keys})
    res = run(get_spark(), params["kind"], params["out"], cfg)
    return {"path": res.path, "rows": res.rows, "version": res.version}
