"""S3J stage 6, statistics: one stats row per window and one per (window, worker) for the unit
(Section 9.1: records by role, duplication ratio, distance computations, comparisons ratio,
pairs emitted without computation, per-worker load by Definition 5, and the processing latency
p50/p99/max of the window's worker tasks), written to ``<output>_work/stats``; ``publish``
appends them to ``<output>_stats``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.s3j.common import S3JRun, micros, open_unit
from simjoin.contracts import STATS_COMMON_SCHEMA, RowKind
from simjoin.core.metric import comparisons_ratio, imbalance
from simjoin.spark.session import small_frame

STATS_SCHEMA = (
    STATS_COMMON_SCHEMA + ", level string, algorithm string, unit long, window_start timestamp, worker int, "
    "records long, "
    "space_copies long, inner long, outlier long, outer long, copies long, state_rows long, duplication_ratio double, "
    "worksets long, new_worksets long, distance_computations long, centroid_distance_computations long, "
    "shortcut_pairs long, result_pairs long, comparisons_ratio double, load double, load_imbalance double, "
    "max_worker_load double, latency_p50_s double, latency_p99_s double, latency_max_s double"
)
UTC = dt.UTC


def _ts(us: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=int(us))


def run(spark: SparkSession, run_: S3JRun) -> dict[str, Any]:
    u = open_unit(spark, run_)
    if u is None:
        return {"unit": None}
    b = u.id
    unit = u
    cfg = run_.cfg
    P = int(cfg.workers)
    joined = u.work("joined").where(F.col("kind") == int(RowKind.STATS)).collect()
    members = u.work("members")
    copies = u.work("copies")
    # new worksets (CENTROID rows) and centroid distance computations (COUNTER rows) per window
    form = {(r["w"], int(r["kind"])): r["n"] for r in members.where(F.col("kind") != int(RowKind.MEMBER))
            .groupBy("w", "kind").agg(F.when(F.first("kind") == int(RowKind.CENTROID), F.count("*"))
                                      .otherwise(F.sum("n")).alias("n")).collect()}
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
            "s3j", float(secs.sum()), "window", cfg.algorithm, b, _ts(w), None, n_rec,
            int(cp.get(w, (0, 0))[0]), s["n_inner"],
            s["n_outlier"], s["n_outer"], copies_n, s["s_inner"] + s["s_outlier"] + s["s_outer"],
            copies_n / n_rec if n_rec else 0.0, s["worksets"], int(form.get((w, int(RowKind.CENTROID)), 0) or 0),
            s["computations"],
            int(form.get((w, int(RowKind.COUNTER)), 0) or 0), s["shortcut"], s["results"],
            comparisons_ratio(s["computations"], s["results"]), float(load.sum()), imbalance(load),
            float(load.max()), float(np.percentile(secs, 50)), float(np.percentile(secs, 99)), float(secs.max())))
        for k in range(P):
            wr: Any = per.get(k)

            def g(c: str, r: Any = wr) -> int:
                return int(r[c]) if r is not None else 0

            n_k = g("n_inner") + g("n_outlier") + g("n_outer")
            sec = float(wr["seconds"]) if wr is not None else 0.0
            rows.append((
                "s3j", sec, "worker", cfg.algorithm, b, _ts(w), k, None, None, g("n_inner"), g("n_outlier"),
                g("n_outer"), n_k,
                g("s_inner") + g("s_outlier") + g("s_outer"), None, g("worksets"), None, g("computations"), None,
                g("shortcut"), g("results"), comparisons_ratio(g("computations"), g("results")), float(load[k]),
                None, None, sec, sec, sec))
        tot["pairs"] += s["results"]
        tot["records"] += n_rec
        tot["copies"] += copies_n
        tot["computations"] += s["computations"]
    path = u.write_work(small_frame(spark, rows, STATS_SCHEMA), "stats")
    return {"unit": b, "windows": sorted(by_w), "stats": path, **tot}
