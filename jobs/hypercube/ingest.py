"""Streaming HyperCube stage 1, ingest: the engine reads what arrived in both streams since the
last run; ``prepare`` applies the join's rules to each micro-batch.

The engine quarantines null or unreadable ``id``/``ts`` and future rows. Here, rows go to
``<output>_quarantine`` with their reason when their key is null, when their (side, id) repeats
(inside the batch, earlier in this unit, or among the held tuples), and with a window when they
are late (dated more than ``--allowed-lateness`` before the largest ``ts`` their stream already
committed; a row within it is joined exactly, as if it had arrived in order). The key column of each
side (``--key`` / ``--right-key``, an integer type) becomes ``k``.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.hypercube.common import HyperCubeRun, held
from simjoin.quality.quarantine import Rule, late, split_quarantine, stream_duplicates
from simjoin.spark.engine import INTEGRAL, BatchInfo, Prepared


def _integral(t: T.DataType) -> bool:
    return isinstance(t, INTEGRAL)


def preparer(spark: SparkSession, run: HyperCubeRun) -> Any:
    lk, rk = str(run.cfg.key), run.right_key

    def prepare(df: DataFrame, info: BatchInfo) -> Prepared:
        k = F.col(lk) if lk == rk else F.when(F.col("side") == 0, F.col(lk)).otherwise(F.col(rk))
        df = df.withColumn("k", k.cast("long"))
        rules = [Rule(F.col("k").isNull(), F.concat(F.lit("null key "), F.when(F.col("side") == 0, F.lit(lk))
                                                     .otherwise(F.lit(rk))))]
        live = held(spark, run, info.unit, info.progress.max_ts)
        seen = run.engine(spark).seen(info, None if live is None else live.select("side", "id"))
        df, dups = stream_duplicates(df, seen, ["ts", "k"])
        rules += dups
        if run.window_us > 0:
            rules += late(info.progress.max_ts, info.progress.lateness)
        res = split_quarantine(df, rules, table=f"{run.output} micro-batch {info.batch_id}", lazy=info.local)
        bad = res.bad.select("id", "ts", "ts_raw", "side", *sorted({lk, rk}), "reason")
        return Prepared(res.good.select("id", "ts", "side", "k"), bad)

    return prepare


def run(spark: SparkSession, run_: HyperCubeRun) -> dict[str, Any]:
    """Stage everything that arrived since the last run as one unit (or resume the open one)."""
    lk, rk = str(run_.cfg.key), run_.right_key
    return run_.engine(spark).ingest(  # type: ignore[no-any-return]
        preparer(spark, run_), [{lk: _integral}, {rk: _integral}], "<key column> of an integer type",
        casts={lk: "long", rk: "long"})
