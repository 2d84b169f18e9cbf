"""Streaming HyperCube stage 5, statistics: per worker - copies received this micro-batch (new
and held), tasks, output, join seconds, and the load it holds afterwards under the unit's grids
(the paper's load: tuple copies) beside the tuples plain hashing (PHJ) would give it; per unit -
the maximum of each, the optimal bound N/p + sqrt(OUT/p) over the held tuples (N tuples, OUT the
join size of the held tuples), the replication factor, migrated copies and heavy keys; per heavy
key - its grid p_R x p_S and the copies its migration moved. To
``<output>_work/stats``; ``publish`` appends them to ``<output>_stats``."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.hypercube.common import HyperCubeRun, held
from jobs.hypercube.dispatch import dispatcher
from simjoin.contracts import STATS_COMMON_SCHEMA, RowKind
from simjoin.core.hypercube.stream import optimal_bound
from simjoin.spark import delta
from simjoin.spark.hypercube import loads
from simjoin.spark.session import small_frame

STATS_SCHEMA = (STATS_COMMON_SCHEMA + ", level string, unit long, worker int, tuples_in long, received long, "
                "new_copies long, tasks long, load long, phj_load long, held long, out_pairs double, bound double, "
                "replication double, migrated long, heavy_keys int, result_pairs long, quarantined long, k long, "
                "p_r int, p_s int")


def run(spark: SparkSession, run_: HyperCubeRun) -> dict[str, Any]:
    u = run_.open_unit(spark)
    if u is None:
        return {"unit": None}
    disp = dispatcher(spark, run_, u)
    p = run_.p
    st = {int(r["worker"]): r for r in u.work("joined").where(F.col("kind") == int(RowKind.STATS)).collect()}
    d = u.work("dispatch").first()
    recs = u.records.select("side", "id", "k", "ts")
    h = held(spark, run_, u.id, u.engine.progress().max_ts)
    now = recs if h is None else h.select("side", "id", "k", "ts").unionByName(recs)
    if run_.window_us > 0:  # the tuples still live after this unit
        from jobs.hypercube.common import live_bound

        marks = dict(u.engine.progress().max_ts)
        for r in recs.groupBy("side").agg(F.max("ts").alias("m")).collect():
            s = int(r["side"])
            marks[s] = max(marks[s], r["m"]) if s in marks else r["m"]
        now = now.where(live_bound(run_, marks) or "true")
    now = now.cache()
    try:
        ours, phj = loads(now, disp)
        per_key = now.groupBy("k").agg(F.sum(F.when(F.col("side") == 0, 1).otherwise(0)).alias("r"),
                                       F.sum(F.when(F.col("side") == 1, 1).otherwise(0)).alias("s"))
        agg = per_key.agg(F.sum("r").alias("r"), F.sum("s").alias("s"),
                          F.sum(F.col("r").cast("double") * F.col("s")).alias("out")).first()
    finally:
        now.unpersist()
    n_held = int((agg["r"] or 0) + (agg["s"] or 0))  # type: ignore[index]
    out = float(agg["out"] or 0.0)  # type: ignore[index]
    bound = optimal_bound(n_held, int(out), p)
    q = 0
    if delta.table_exists(spark, run_.tables.quarantine):
        q = delta.read_table(spark, run_.tables.quarantine).where(F.col("unit") == u.id).count()
    tuples_in = u.records.count()
    pairs = sum(int(r["pairs"]) for r in st.values())
    rep = float(ours.sum()) / n_held if n_held else 0.0
    secs = [float(r["seconds"]) for r in st.values()]
    rows: list[tuple[Any, ...]] = [(
        "hypercube", max(secs, default=0.0), "unit", u.id, None, tuples_in,
        sum(int(r["received"]) for r in st.values()), sum(int(r["new_copies"]) for r in st.values()),
        sum(int(r["tasks"]) for r in st.values()), int(ours.max()), int(phj.max()), n_held, out, bound, rep,
        int(d["migrated"]), int(d["heavy"]), pairs, q, None, None, None)]
    for w in range(p):
        r = st.get(w)
        rows.append(("hypercube", float(r["seconds"]) if r else 0.0, "worker", u.id, w, None,
                     int(r["received"]) if r else 0, int(r["new_copies"]) if r else 0, int(r["tasks"]) if r else 0,
                     int(ours[w]), int(phj[w]), None, None, None, None, None, None,
                     int(r["pairs"]) if r else 0, None, None, None, None))
    for g in u.work("grids").collect():  # each heavy key's grid (0 x 0: it turned light)
        rows.append(("hypercube", 0.0, "grid", u.id, None, None, None, None, g["p_r"] * g["p_s"], None, None, None,
                     None, None, None, int(g["migrated"]), None, None, None, int(g["k"]), int(g["p_r"]), int(g["p_s"])))
    path = u.write_work(small_frame(spark, rows, STATS_SCHEMA), "stats")
    return {"unit": u.id, "stats": path, "pairs": pairs, "max_load": int(ours.max()), "phj_max_load": int(phj.max()),
            "bound": bound, "replication": rep, "migrated": int(d["migrated"]), "heavy": int(d["heavy"]),
            "tuples_in": tuples_in, "quarantined": q}
