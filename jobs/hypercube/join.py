"""Streaming HyperCube stage 3, join: the unit's new tuples, and the held tuples of their keys on
the other side, are routed under the unit's dispatcher - a light key's tuple to its task, a heavy
key's R tuple to its grid row, S tuple to its grid column - to the workers (one Spark partition
each, ``simjoin.spark.routing``), where every task hash-joins its copies: new x held and new x new,
never held x held again. With a window each pair also needs |ts_l - ts_r| < W. Pairs (or per-key
counts) and per-worker counters go to ``<output>_work/joined``."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.hypercube.common import HyperCubeRun, held
from jobs.hypercube.dispatch import dispatcher
from simjoin.spark.hypercube import TUPLE_COLUMNS, join


def _tuples(df: DataFrame, new: int) -> DataFrame:
    return df.select(F.col("side").cast("long").alias("side"), "id", F.unix_micros("ts").alias("ts_us"), "k",
                     F.lit(new).cast("long").alias("new"))


def run(spark: SparkSession, run_: HyperCubeRun) -> dict[str, Any]:
    u = run_.open_unit(spark)
    if u is None:
        return {"unit": None}
    disp = dispatcher(spark, run_, u)
    new = _tuples(u.records, 1)
    tuples = new
    h = held(spark, run_, u.id, u.engine.progress().max_ts)
    if h is not None:
        # a held tuple of side s matters only if a new tuple of the other side has its key
        wanted = new.select((1 - F.col("side")).alias("side"), "k").distinct()
        tuples = new.unionByName(_tuples(h.join(F.broadcast(wanted), ["side", "k"], "left_semi"), 0))
    out = join(tuples.select(*TUPLE_COLUMNS), disp, run_.window_us, bool(run_.cfg.count_only))
    return {"unit": u.id, "joined": u.write_work(out, "joined")}
