"""S3J stage 6, statistics and state commit.

Writes one stats row per window and one per (window, worker) for the unit to
``<output>_stats`` (Section 9.1: records by role, duplication ratio, distance computations,
comparisons ratio, pairs emitted without computation, per-worker load by Definition 5, and
the processing latency p50/p99/max of the window's worker tasks), then commits the state:
the unit's members (and buffered physical outer copies) join the join state, windows the
watermark has passed are cleared from it (centroids persist), and the progress row marks the
unit done.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.s3j_common import PIPELINE, S3JRun, micros, pending, read_or_none, work
from simjoin.core.metric import comparisons_ratio, imbalance
from simjoin.spark import delta
from simjoin.spark.metric import BUFFER
from simjoin.spark.session import small_frame

STATS_SCHEMA = (
    "level string, algorithm string, batch_id long, window_start timestamp, worker int, records long, "
    "space_copies long, inner long, outlier long, outer long, copies long, state_rows long, duplication_ratio double, "
    "worksets long, new_worksets long, distance_computations long, centroid_distance_computations long, "
    "shortcut_pairs long, result_pairs long, comparisons_ratio double, load double, load_imbalance double, "
    "max_worker_load double, latency_p50_s double, latency_p99_s double, latency_max_s double, seconds double"
)
UTC = dt.UTC


def _ts(us: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=int(us))


def _delete(spark: SparkSession, path: str, cond: str) -> None:
    from delta.tables import DeltaTable

    if delta.table_exists(spark, path):
        DeltaTable.forPath(spark, delta._abs(path)).delete(cond)


def run(spark: SparkSession, run_: S3JRun) -> dict[str, Any]:
    unit = pending(spark, run_)
    if unit is None:
        return {"unit": None}
    b = unit.batch_id
    cfg = run_.cfg
    P = int(cfg.workers)
    t = run_.tables
    joined = work(spark, run_, "joined", b).where(F.col("kind") == 1).collect()
    members = work(spark, run_, "members", b)
    copies = work(spark, run_, "copies", b)
    form = {(r["w"], r["kind"]): r["n"] for r in members.where(F.col("kind") > 0).groupBy("w", "kind").agg(
        F.when(F.first("kind") == 1, F.count("*")).otherwise(F.sum("n")).alias("n")).collect()}
    cp = {r["w"]: (r["n"], r["o"]) for r in copies.groupBy("w").agg(
        F.count("*").alias("n"), F.sum(F.col("is_outer").cast("long")).alias("o")).collect()}
    recs = {r["w"]: r["n"] for r in unit.records.groupBy(micros("window_start").alias("w")).count()
            .withColumnRenamed("count", "n").collect()}
    by_w: dict[int, list[Any]] = {}
    for r in joined:
        by_w.setdefault(int(r["w"]), []).append(r)
    rows: list[tuple[Any, ...]] = []
    tot = {"pairs": 0, "records": 0, "copies": 0, "computations": 0}
    for w in sorted(set(recs) | set(by_w)):
        ws = by_w.get(w, [])
        per = {int(r["worker"]): r for r in ws}
        load = np.array([float(per[k]["load"]) if k in per else 0.0 for k in range(P)])
        secs = np.array([float(r["seconds"]) for r in ws]) if ws else np.zeros(1)
        s = {k: int(sum(int(r[k]) for r in ws)) for k in (
            "n_inner", "n_outlier", "n_outer", "s_inner", "s_outlier", "s_outer", "worksets", "computations",
            "shortcut", "results")}
        n_rec = int(recs.get(w, 0))
        copies_n = s["n_inner"] + s["n_outlier"] + s["n_outer"]
        rows.append((
            "window", cfg.algorithm, b, _ts(w), None, n_rec, int(cp.get(w, (0, 0))[0]), s["n_inner"],
            s["n_outlier"], s["n_outer"], copies_n, s["s_inner"] + s["s_outlier"] + s["s_outer"],
            copies_n / n_rec if n_rec else 0.0, s["worksets"], int(form.get((w, 1), 0) or 0), s["computations"],
            int(form.get((w, 2), 0) or 0), s["shortcut"], s["results"],
            comparisons_ratio(s["computations"], s["results"]), float(load.sum()), imbalance(load),
            float(load.max()), float(np.percentile(secs, 50)), float(np.percentile(secs, 99)), float(secs.max()),
            float(secs.sum())))
        for k in range(P):
            wr: Any = per.get(k)

            def g(c: str, r: Any = wr) -> int:
                return int(r[c]) if r is not None else 0

            n_k = g("n_inner") + g("n_outlier") + g("n_outer")
            sec = float(wr["seconds"]) if wr is not None else 0.0
            rows.append((
                "worker", cfg.algorithm, b, _ts(w), k, None, None, g("n_inner"), g("n_outlier"), g("n_outer"), n_k,
                g("s_inner") + g("s_outlier") + g("s_outer"), None, g("worksets"), None, g("computations"), None,
                g("shortcut"), g("results"), comparisons_ratio(g("computations"), g("results")), float(load[k]),
                None, None, sec, sec, sec, sec))
        tot["pairs"] += s["results"]
        tot["records"] += n_rec
        tot["copies"] += copies_n
        tot["computations"] += s["computations"]
    ctx = run_.context(spark, b)
    ctx.write_output(small_frame(spark, rows, STATS_SCHEMA), t.stats, piece="stats")

    # Join state: this unit's members, and (S3J) its physical outer copies as the buffer.
    cols: list[Any] = [F.timestamp_micros("w").alias("window_start"), F.timestamp_micros("we").alias("window_end"),
            F.col("partition").cast("int"), F.col("workset_id").cast("long"), F.col("worker").cast("int"),
            "side", "id", "vector", F.col("role").cast("byte"), F.lit(b).cast("long").alias("batch_id")]
    state = members.where(F.col("kind") == 0).select(*cols)
    if cfg.algorithm == "s3j":
        buf = copies.where("is_outer").select(
            "w", "we", "partition", F.lit(0).cast("long").alias("workset_id"), F.lit(-1).alias("worker"),
            "side", "id", "vector", F.lit(BUFFER).alias("role"))
        state = state.unionByName(buf.select(*cols))
    delta.append_idempotent(state, t.join_state, f"{PIPELINE}/join_state", b)

    # Watermark: min over sides of the largest ts seen; windows ending at or before it are closed.
    marks = {int(r["side"]): r["m"] for r in unit.records.groupBy("side").agg(F.max("ts").alias("m")).collect()}
    old = read_or_none(spark, t.progress)
    if old is not None:
        for r in old.groupBy("side").agg(F.max("max_ts").alias("m")).collect():
            s_ = int(r["side"])
            marks[s_] = max(marks[s_], r["m"]) if s_ in marks else r["m"]
    wm = min(marks.values()) if len(marks) == len(run_.sources) else None
    if wm is not None:
        _delete(spark, t.join_state, f"window_end <= timestamp'{wm.astimezone(UTC).isoformat()}'")
    prow = [(b, s_, m, int(unit.dim), run_.fingerprint()) for s_, m in sorted(marks.items())]
    ctx.write_output(small_frame(spark, prow, "batch_id long, side byte, max_ts timestamp, dim int, "
                                                 "fingerprint string"), t.progress, piece="progress")
    _delete(spark, t.work("records"), f"batch_id <= {b}")
    return {"unit": b, "windows": sorted(by_w), "stats": t.stats, "watermark": str(wm), **tot}
