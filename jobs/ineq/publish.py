"""Inequality join stage 6, publish (after the gate): the unit's pairs -> the output, its stats
-> the stats table, its new batches and mutable parts -> ``<output>_state/batches``, its tuples
-> ``<output>_state/tuples``; then the engine commits the unit (with each side's tuple count and
the next batch id), and state no future tuple can meet is dropped: batches past the window
(coarse expiry, SPO-Join Section 4.3 - the exact test is in every probe), superseded mutable
parts and expired tuples. Every append is idempotent per (checkpoint, unit)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.ineq.common import IneqRun, counts
from jobs.ineq.gate import staged_pairs
from simjoin.core.inequality.spo import BATCH, MUTABLE


def _expire(u: Any, run: IneqRun) -> None:
    """Drop state no future tuple can meet (the rule of ``simjoin.core.inequality.spo.expired``):
    one DELETE per table."""
    p = run.params()
    prog = u.engine.progress()
    n = counts(prog.meta)
    batch_drop = [f"(kind = '{MUTABLE}' AND unit < {u.id})"]
    tuple_drop = []
    for s in p.sides:
        other = s if p.self_join else 1 - s
        if p.window.time_us is not None:
            mark = prog.max_ts.get(other)
            if mark is None:
                continue
            bound = int(mark.timestamp() * 1_000_000) - int(p.window.time_us)
            batch_drop.append(f"(side = {s} AND kind = '{BATCH}' AND ts_max <= {bound})")
            tuple_drop.append(f"(side = {s} AND unix_micros(ts) <= {bound})")
        else:
            bound = n.get(s, 0) - int(p.window.count)
            batch_drop.append(f"(side = {s} AND kind = '{BATCH}' AND seq_max < {bound})")
            tuple_drop.append(f"(side = {s} AND seq < {bound})")
    u.engine.delete(run.batches, " OR ".join(batch_drop))
    if tuple_drop:
        u.engine.delete(run.tuples, " OR ".join(tuple_drop))


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
    _expire(u, run_)
    return res  # type: ignore[no-any-return]
