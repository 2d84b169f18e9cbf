"""S3J stage 8, publish (after the gate): the unit's pairs -> the output, its stats -> the stats
table (with the rebalance stage's rows), its workset centroids and members (plus, for S3J, its
physical outer copies as the buffer) -> the state; then the engine commits the unit and windows
the watermark less ``--allowed-lateness`` has passed are dropped from the join state (centroids
persist; ``common.expire_state``). Every append is idempotent per (checkpoint, unit), so a
publish rerun after a crash neither repeats nor loses a row."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.s3j.common import S3JRun, expire_state, open_unit
from jobs.s3j.gate import staged_files, staged_pairs
from simjoin.contracts import Role, RowKind


def run(spark: SparkSession, run_: S3JRun) -> dict[str, Any]:
    u = open_unit(spark, run_)
    if u is None:
        return {"unit": None}
    b = u.id
    unit_col = F.lit(b).cast("long").alias("unit")
    members = u.work("members")
    cols: list[Any] = [F.timestamp_micros("w").alias("window_start"), F.timestamp_micros("we").alias("window_end"),
                       F.col("partition").cast("int"), F.col("workset_id").cast("long"), F.col("worker").cast("int"),
                       "side", "id", "vector", F.col("role").cast("byte"), unit_col]
    state = members.where(F.col("kind") == int(RowKind.MEMBER)).select(*cols)
    stats = u.work("stats", keep_unit=True)
    if run_.cfg.algorithm == "s3j" and run_.cfg.rebalance != "off":
        stats = stats.unionByName(u.work("rebalance", keep_unit=True))
    files = staged_files(run_, u)
    pairs = files if files is not None and files.rows else staged_pairs(run_, u)
    pieces = [("pairs", pairs, run_.output), ("stats", stats, run_.tables.stats)]
    if run_.cfg.algorithm == "s3j":
        buf = u.work("copies").where("is_outer").select(
            "w", "we", "partition", F.lit(0).cast("long").alias("workset_id"), F.lit(-1).alias("worker"),
            "side", "id", "vector", F.lit(int(Role.BUFFER)).alias("role"))
        state = state.unionByName(buf.select(*cols))
        centroids = members.where(F.col("kind") == int(RowKind.CENTROID)).select(
            "partition", "workset_id", "vector", "worker", F.timestamp_micros("w").alias("window_start"), unit_col)
        pieces.append(("centroids", centroids, run_.centroids))
    pieces.append(("join_state", state, run_.join_state))
    # the stats table gained columns (workset and rebalance rows): older tables take them on
    res = u.engine.publish(u.unit, pieces, meta={"dim": u.dim}, options={"stats": {"mergeSchema": "true"}},
                           small=("stats", "centroids"))
    expire_state(u.engine, run_, res)
    return res  # type: ignore[no-any-return]
