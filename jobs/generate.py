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
