"""Inequality join stage 6, publish (after the gate): the unit's pairs -> the output, its stats
-> the stats table, its new batches and mutable parts -> ``<output>_state/batches``, its tuples
-> ``<output>_state/tuples``; then the engine commits the unit (with each side's tuple count and
the next batch id), and state no future tuple can meet is dropped: batches past the window
(coarse expiry, SPO-Join Section 4.3, kept the allowed lateness longer - the exact test is in
every probe), with the superseded mutable parts and expired tuples. Every append is idempotent
per (checkpoint, unit)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.ineq.common import IneqRun, counts, tuple_bound
from jobs.ineq.gate import staged_pairs
from simjoin.core.inequality.spo import BATCH, MUTABLE
from simjoin.spark import delta


def _expire(u: Any, run: IneqRun) -> list[int]:
    """Drop the batches no future tuple can meet (``simjoin.core.inequality.spo.expired``, read
    from the batches' metadata), and with them the superseded mutable parts and the expired
    tuples. Nothing is deleted until a batch expires (about once a slide): readers take each
    side's latest mutable part, and ingest's duplicate check applies the exact bound itself."""
    from simjoin.core.inequality.spo import expired

    p = run.params()
    prog = u.engine.progress()
    n = counts(prog.meta)
    meta = (delta.read_table(u.engine.spark, run.batches).where(F.col("kind") == BATCH)
            .select("batch_id", "side", "ts_max", "seq_max").collect())
    marks = {s: int(m.timestamp() * 1_000_000) for s, m in prog.max_ts.items()}
    gone = [int(r["batch_id"]) for r in meta if expired(
        p.window, int(r["ts_max"]), int(r["seq_max"]), marks.get(int(r["side"]) if p.self_join else 1 - int(r["side"])),
        n.get(int(r["side"]), 0), p.lateness_us)]
    if not gone:
        return []
    u.engine.delete(run.batches, f"batch_id IN ({', '.join(map(str, gone))}) OR (kind = '{MUTABLE}' AND unit < {u.id})")
    drop = [f"({c})" for s in p.sides if (c := tuple_bound(p, prog, s, "ts", "seq", keep=False))]
    if drop:
        u.engine.delete(run.tuples, " OR ".join(drop))
    return gone


def run(spark: SparkSession, run_: IneqRun) -> dict[str, Any]:
    u = run_.open_unit(spark)
    if u is None:
        return {"unit": None}
    b = u.id
    unit_col = F.lit(b).cast("long").alias("unit")
    state = u.work("state", keep_unit=True)
    merge = u.work("merge").first()
    before = counts(u.engine.progress().meta)
    got = {int(r["side"]): int(r["n"]) for r in u.records.groupBy("side").agg(F.count("*").alias("n")).collect()}
    n = {str(s): before.get(s, 0) + got.get(s, 0) for s in run_.params().sides}
    # seq of each new tuple: its rank by (ts, id) in its side after the earlier units' count
    from pyspark.sql import Window

    seq = F.row_number().over(Window.partitionBy("side").orderBy("ts", "id")) - 1
    base = F.element_at(F.array(*[F.lit(before.get(s, 0)) for s in (0, 1)]), F.col("side").cast("int") + 1)
    tuples = u.records.select("side", "id", "ts", (seq + base).cast("long").alias("seq"), unit_col)
    pieces = [("pairs", staged_pairs(u), run_.output), ("stats", u.work("stats", keep_unit=True), run_.tables.stats),
              ("batches", state, run_.batches), ("tuples", tuples, run_.tuples)]
    res = u.engine.publish(u.unit, pieces, meta={"count": n, "next_batch": int(merge["next_batch"])})
    return {**res, "expired_batches": _expire(u, run_)}  # type: ignore[no-any-return]
