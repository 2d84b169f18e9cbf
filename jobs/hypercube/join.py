"""Streaming HyperCube stage 3, join: the unit's new tuples, and the held tuples of their keys on
the other side, are routed under the unit's dispatcher - a light key's tuple to its task, a heavy
key's R tuple to its grid row, S tuple to its grid column - to the workers (one Spark partition
each, ``simjoin.spark.routing``), where every task hash-joins its copies: new x held and new x new,
never held x held again. With a window each pair also needs |ts_l - ts_r| < W. Pairs (or per-key
counts) and per-worker counters go to ``<output>_work/joined``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.hypercube.common import HyperCubeRun, held, held_arrow
from jobs.hypercube.dispatch import dispatcher
from simjoin.spark.hypercube import TUPLE_COLUMNS, join, join_arrow


def _tuples(df: DataFrame, new: int) -> DataFrame:
    return df.select(F.col("side").cast("long").alias("side"), "id", F.unix_micros("ts").alias("ts_us"), "k",
                     F.lit(new).cast("long").alias("new"))


def _tuples_arrow(t: pa.Table, new: int) -> pa.Table:
    n = t.num_rows
    return pa.table({"side": t.column("side").cast(pa.int64()), "id": t.column("id").cast(pa.int64()),
                     "ts_us": t.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()),
                     "k": t.column("k").cast(pa.int64()), "new": pa.array(np.full(n, new, np.int64))})


def _join_arrow(run_: HyperCubeRun, u: Any, disp: Any) -> pa.Table:
    """The in-process executor's join: the same tuples, copies and per-worker task."""
    new = _tuples_arrow(u.records, 1)
    h = held_arrow(run_, u.id, u.engine.progress().max_ts)
    parts = [new]
    if h is not None and h.num_rows:
        # a held tuple of side s matters only if a new tuple of the other side has its key
        side, k = np.asarray(new.column("side")), np.asarray(new.column("k"))
        hs = np.asarray(h.column("side").to_numpy(zero_copy_only=False), np.int64)
        hk = np.asarray(h.column("k").to_numpy(zero_copy_only=False), np.int64)
        want = np.zeros(h.num_rows, bool)
        for s in (0, 1):
            want |= (hs == s) & np.isin(hk, k[side == 1 - s])
        parts.append(_tuples_arrow(h.filter(pa.array(want)), 0))
    return join_arrow(pa.concat_tables(parts), disp, run_.window_us, bool(run_.cfg.count_only))


def run(spark: SparkSession, run_: HyperCubeRun) -> dict[str, Any]:
    u = run_.open_unit(spark)
    if u is None:
        return {"unit": None}
    disp = dispatcher(spark, run_, u)
    if u.in_process:
        return {"unit": u.id, "joined": u.write_work(_join_arrow(run_, u, disp), "joined")}
    new = _tuples(u.records, 1)
    tuples = new
    h = held(spark, run_, u.id, u.engine.progress().max_ts)
    if h is not None:
        # a held tuple of side s matters only if a new tuple of the other side has its key
        wanted = new.select((1 - F.col("side")).alias("side"), "k").distinct()
        tuples = new.unionByName(_tuples(h.join(F.broadcast(wanted), ["side", "k"], "left_semi"), 0))
    out = join(tuples.select(*TUPLE_COLUMNS), disp, run_.window_us, bool(run_.cfg.count_only))
    return {"unit": u.id, "joined": u.write_work(out, "joined")}
