"""S3J stages 2-8 for a small unit, in the driver: the same task functions, the same tables.

A unit of a few thousand records (follow mode at 1,000 records/s, a DAG run over a few hundred
new rows) costs about 40 Spark jobs on the distributed path - a second each on 2 cores - for
milliseconds of work. Up to ``SIMJOIN_LOCAL_UNIT_ROWS`` staged records (default 200,000; 0: never),
a run that holds every stage in one process (the CLI, follow mode) runs partition -> worksets ->
join -> gate -> stats -> rebalance -> publish here instead:

- the unit's records and the state it reads (centroids, join state of its windows, the
  assignment in force: rows of earlier units only) are read with ``deltalake``;
- each stage calls the very function its Spark tasks call on their Arrow batches
  (``space_partition_arrow``, ``formulate_partition_arrow`` per space partition,
  ``route_by_assignment_arrow``, ``join_worker_arrow`` per worker), and the stats and rebalance
  stages' own row builders (``stats_rows``, ``decide``);
- the gate runs the same Great Expectations suite (``gate.check``) on the pairs in memory;
- publish is the engine's, with the same ``txn`` per (checkpoint, piece, unit): the pairs as one
  Parquet file committed to the output, the rest as Arrow tables.

So the output, the stats and the state are the rows the Spark stages would write, and a unit
interrupted here is finished by either path. A larger unit, a non-local table, or ClusterJoin
takes the distributed stages.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from jobs.s3j.common import S3JRun, expire_state
from jobs.s3j.gate import PAIR_ARROW, check
from jobs.s3j.rebalance import ASSIGNMENT_SCHEMA, decide
from jobs.s3j.stats import STATS_SCHEMA, stats_rows
from simjoin.contracts import Role, RowKind
from simjoin.faults import maybe_fail
from simjoin.log import get_logger
from simjoin.pipeline.stream import in_process_rows
from simjoin.spark import delta
from simjoin.spark.delta_files import write_file
from simjoin.spark.metric import (
    formulate_partition_arrow,
    formulation_input_arrow,
    join_worker_arrow,
    route_by_assignment_arrow,
    space_partition_arrow,
)

log = get_logger("simjoin.s3j")



def fits(run_: S3JRun, ingested: dict[str, Any]) -> bool:
    """Whether the unit ingest staged (``ingested``, its result) may run in the driver: the
    Airflow DAG then runs stages 2-8 in one task (``driver``), as the CLI does. :func:`run`
    decides again there, on the tables themselves."""
    rows = ingested.get("unit_rows")
    n = in_process_rows()
    return (n > 0 and run_.cfg.algorithm == "s3j" and ingested.get("unit") is not None
            and isinstance(rows, int) and rows <= n)
STAGES = ("partition", "worksets", "join", "gate", "stats", "rebalance", "publish")
MEMBER_COLS = ["w", "we", "partition", "workset_id", "worker", "side", "id", "vector", "role", "is_new"]
UTC_US = pa.timestamp("us", tz="UTC")


def _us(col: Any) -> pa.Array:
    """A timestamp column as epoch microseconds (int64)."""
    return pc.cast(pc.cast(col, UTC_US), pa.int64())


def _ts(col: Any) -> pa.Array:
    return pc.cast(pc.cast(col, pa.int64()), UTC_US)


def _np(t: pa.Table, name: str, dtype: Any) -> np.ndarray:
    return np.asarray(t.column(name).to_numpy(), dtype=dtype)


def _state(ref: str, unit: int, columns: list[str] | None = None) -> pa.Table | None:
    return delta.read_arrow(ref, [("unit", "<", int(unit))], columns)  # type: ignore[no-any-return]


def _table(rows: list[tuple[Any, ...]], ddl: str) -> pa.Table:
    sch = delta.arrow_schema(ddl)
    return pa.Table.from_pylist([dict(zip(sch.names, r)) for r in rows], schema=sch)


def _cast(t: pa.Table, ddl: str) -> pa.Table:
    sch = delta.arrow_schema(ddl)
    return pa.Table.from_arrays([t.column(f.name).cast(f.type) for f in sch], schema=sch)


STATE_DDL = ("window_start timestamp, window_end timestamp, partition int, workset_id long, worker int, "
             "side byte, id long, vector array<double>, role byte, unit long")
CENTROID_DDL = "partition int, workset_id long, vector array<double>, worker int, window_start timestamp, unit long"


def run(spark: SparkSession, run_: S3JRun) -> dict[str, Any] | None:
    """Stages 2-8 of the open unit in the driver; their results by stage name, or None when the
    unit takes the distributed stages (too large, ClusterJoin, or a table that is not local)."""
    cfg, limit = run_.cfg, in_process_rows()
    if limit <= 0 or cfg.algorithm != "s3j":
        return None
    target = delta.file_target(run_.output, PAIR_ARROW)
    if target is None:
        return None
    eng = run_.engine(spark)
    try:
        u = eng.open_unit_table()
    except delta.NotLocal as e:
        log.info("s3j: the unit runs on Spark: %s", e)
        return None
    if u is None:
        return {s: {"unit": None} for s in STAGES}
    if u.records.num_rows > limit:
        log.info("s3j: unit %d has %d records (> SIMJOIN_LOCAL_UNIT_ROWS=%d): distributed stages", u.unit,
                 u.records.num_rows, limit)
        return None
    try:
        return _run(spark, run_, eng, u, target)
    except delta.NotLocal as e:  # a state table deltalake cannot read: nothing was written yet
        log.info("s3j: unit %d runs on Spark: %s", u.unit, e)
        return None


def _run(spark: SparkSession, run_: S3JRun, eng: Any, u: Any, target: tuple[str, pa.Schema]) -> dict[str, Any]:
    cfg, b = run_.cfg, int(u.unit)
    meta = {**eng.progress().meta, **(json.loads(u.meta) if u.meta else {})}
    if not meta.get("dim"):
        raise RuntimeError(f"unit {b} has no vector dimension: rerun ingest")
    dim = int(meta["dim"])
    p = run_.params(dim)
    times: dict[str, float] = {}
    clock = [time.perf_counter()]

    def lap(name: str) -> None:
        now = time.perf_counter()
        times[name] = now - clock[0]
        clock[0] = now
        if name in STAGES:  # the stage's fault point, as its own task has it (simjoin.faults)
            maybe_fail(f"s3j.{name}")

    recs = u.records
    # stage 2, partition (Section 6)
    rec = pa.table({"w": _us(recs.column("window_start")), "we": _us(recs.column("window_end")),
                    "ts": _us(recs.column("ts")), "side": recs.column("side").cast(pa.int8()),
                    "id": recs.column("id").cast(pa.int64()),
                    "vector": recs.column("vector").cast(pa.list_(pa.float64()))})
    copies = space_partition_arrow(rec, p)
    lap("partition")
    # stage 3, worksets (Section 7, steps 1-5), from the state earlier units left
    windows = pc.unique(copies.column("w"))
    cent = _state(run_.centroids, b, ["partition", "workset_id", "vector", "worker"])
    js = _state(run_.join_state, b)
    state = None
    if js is not None and js.num_rows:
        js = js.append_column("w", _us(js.column("window_start"))).append_column("we", _us(js.column("window_end")))
        state = js.filter(pc.is_in(js.column("w"), windows))
    form_in = formulation_input_arrow(copies, cent, state)
    fpart = _np(form_in, "partition", np.int64)
    members = pa.concat_tables([formulate_partition_arrow(form_in.filter(pa.array(fpart == q)), p)
                                for q in np.unique(_np(copies, "partition", np.int64))])
    lap("worksets")
    # stage 4, join (Section 7.7): new members, plus the earlier rows of every workset with new rows
    kind = _np(members, "kind", np.int8)
    new = members.filter(pa.array(kind == int(RowKind.MEMBER))).select(MEMBER_COLS)
    joined_in = new
    if js is not None and js.num_rows:
        old = js.filter(pc.not_equal(js.column("role"), int(Role.BUFFER)))
        keys = new.filter(new.column("is_new")).select(["w", "partition", "workset_id", "worker"])
        keys = keys.group_by(["w", "partition", "workset_id", "worker"]).aggregate([])
        at = pa.table({"w": old.column("w"), "partition": old.column("partition").cast(pa.int32()),
                       "workset_id": old.column("workset_id").cast(pa.int64()),
                       "_row": pa.array(np.arange(old.num_rows, dtype=np.int64))})
        hit = at.join(keys, ["w", "partition", "workset_id"], join_type="inner")
        o = old.take(hit.column("_row"))
        old_t = pa.table({"w": o.column("w"), "we": o.column("we"), "partition": o.column("partition"),
                          "workset_id": o.column("workset_id"), "worker": hit.column("worker"),
                          "side": o.column("side"), "id": o.column("id"), "vector": o.column("vector"),
                          "role": o.column("role"), "is_new": pa.array(np.zeros(o.num_rows, bool))})
        joined_in = pa.concat_tables([new, _cast_like(old_t, new.schema)])
    a = _state(run_.assignment, b)
    if a is not None and a.num_rows:
        a = a.filter(pc.equal(a.column("unit"), pc.max(a.column("unit"))))
    routed = route_by_assignment_arrow(joined_in, a)
    wk = _np(routed, "worker", np.int64)
    outs, pairs = [], []
    for k in np.unique(wk):
        out, pr = join_worker_arrow(routed.filter(pa.array(wk == k)), p, target[1])
        outs.append(out)
        if pr is not None:
            pairs.append(pr)
    pairs_t = pa.concat_tables(pairs) if pairs else target[1].empty_table()
    counters = [{"kind": r["kind"], "w": r["w"], "worker": r["worker"], **r["c"]}
                for r in (pa.concat_tables(outs).to_pylist() if outs else []) if r["c"] is not None]
    lap("join")
    # stage 5, the gate: the same suite as the distributed gate. It runs beside the pair file's
    # write, the stats and the rebalance decision; nothing is committed before it passed (a failed
    # unit's file is in no table, as the join tasks' files of a failed distributed unit)
    pool = ThreadPoolExecutor(1, thread_name_prefix="gate")
    gate = pool.submit(check, pairs_t, recs.select(["window_start", "side", "id"]), cfg.threshold, run_.self_join)
    pool.shutdown(wait=False)  # the thread finishes the check; gate.result() waits for it
    file_row = write_file(target[0], pairs_t)
    lap("file")
    # stage 6, stats
    form: dict[tuple[int, int], int] = {}
    mw = _np(members, "w", np.int64)
    for w in np.unique(mw):
        sel = mw == w
        form[(int(w), int(RowKind.CENTROID))] = int(((kind == int(RowKind.CENTROID)) & sel).sum())
        form[(int(w), int(RowKind.COUNTER))] = int(_np(members, "n", np.int64)[sel & (kind == int(RowKind.COUNTER))]
                                                   .sum())
    cw, co = _np(copies, "w", np.int64), _np(copies, "is_outer", bool)
    cp = {int(w): (int((cw == w).sum()), int(co[cw == w].sum())) for w in np.unique(cw)}
    rw = _np(rec, "w", np.int64)
    rc = {int(w): int((rw == w).sum()) for w in np.unique(rw)}
    srows, st = stats_rows(cfg, b, dim, counters, form, cp, rc)
    lap("stats")
    # stage 7, rebalance (Algorithm 1): the next unit's assignment, one commit
    reb: dict[str, Any] = {"unit": b, "rebalance": "off"}
    rrows: list[tuple[Any, ...]] = []
    assignment: list[tuple[Any, ...]] = []
    if cfg.rebalance != "off":
        agg: dict[tuple[int, int], dict[str, Any]] = {}
        for r in counters:
            if int(r["kind"]) != int(RowKind.WORKSET):
                continue
            k = (int(r["partition"]), int(r["workset_id"]))
            e = agg.setdefault(k, {"partition": k[0], "workset_id": k[1], "load": 0.0, "rows": 0,
                                   "worker": int(r["worker"])})
            e["load"] += float(r["load"])
            e["rows"] = max(e["rows"], int(r["n_inner"]))
            e["worker"] = min(e["worker"], int(r["worker"]))
        ws = [agg[k] for k in sorted(agg)]
        reb = {"unit": b, "fired": False}
        if ws:
            prev = None if a is None or a.num_rows == 0 else a.to_pylist()
            new_c = members.filter(pa.array(kind == int(RowKind.CENTROID))).select(
                ["partition", "workset_id", "worker"]).to_pylist()
            homes = [*(cent.select(["partition", "workset_id", "worker"]).to_pylist() if cent is not None else []),
                     *new_c]
            reb, assignment, rrows = decide(cfg, b, dim, ws, prev, homes)
    lap("rebalance")
    g = gate.result()  # raises GateFailed: nothing of the unit is committed
    lap("gate")
    if assignment:  # the next unit's routing (the savepoint), once the gate passed
        delta.append_rows(spark, assignment, ASSIGNMENT_SCHEMA, run_.assignment,
                          eng.write_id("assignment", u.checkpoint_id), b)
    # stage 8, publish: the pairs as one file in the output's directory, the rest as Arrow tables
    files = delta.Files(target[0], target[1], (file_row,))
    mem = members.filter(pa.array(kind == int(RowKind.MEMBER)))
    n_m = mem.num_rows
    state_t = pa.table({"window_start": _ts(mem.column("w")), "window_end": _ts(mem.column("we")),
                        "partition": mem.column("partition"), "workset_id": mem.column("workset_id"),
                        "worker": mem.column("worker"), "side": mem.column("side"), "id": mem.column("id"),
                        "vector": mem.column("vector"), "role": mem.column("role"),
                        "unit": pa.array(np.full(n_m, b, np.int64))})
    buf = copies.filter(copies.column("is_outer"))
    n_b = buf.num_rows
    buf_t = pa.table({"window_start": _ts(buf.column("w")), "window_end": _ts(buf.column("we")),
                      "partition": buf.column("partition"), "workset_id": pa.array(np.zeros(n_b, np.int64)),
                      "worker": pa.array(np.full(n_b, -1, np.int32)), "side": buf.column("side"),
                      "id": buf.column("id"), "vector": buf.column("vector"),
                      "role": pa.array(np.full(n_b, int(Role.BUFFER), np.int8)),
                      "unit": pa.array(np.full(n_b, b, np.int64))})
    cen = members.filter(pa.array(kind == int(RowKind.CENTROID)))
    cen_t = pa.table({"partition": cen.column("partition"), "workset_id": cen.column("workset_id"),
                      "vector": cen.column("vector"), "worker": cen.column("worker"),
                      "window_start": _ts(cen.column("w")), "unit": pa.array(np.full(cen.num_rows, b, np.int64))})
    pieces = [("pairs", files, run_.output), ("stats", _table(srows + rrows, STATS_SCHEMA), run_.tables.stats),
              ("centroids", _cast(cen_t, CENTROID_DDL), run_.centroids),
              ("join_state", _cast(pa.concat_tables([_cast(state_t, STATE_DDL), _cast(buf_t, STATE_DDL)]), STATE_DDL),
               run_.join_state)]
    res = eng.publish(u, pieces, meta={"dim": dim}, options={"stats": {"mergeSchema": "true"}})
    expire_state(eng, run_, res)
    lap("publish")
    log.info("s3j: unit %d ran in the driver: %d records, %d pairs (%s)", b, recs.num_rows, pairs_t.num_rows,
             ", ".join(f"{k} {v:.2f}s" for k, v in times.items()))
    return {
        "partition": {"unit": b, "copies": f"driver ({copies.num_rows} rows)", "dim": dim},
        "worksets": {"unit": b, "members": f"driver ({members.num_rows} rows)"},
        "join": {"unit": b, "pairs": int(pairs_t.num_rows)},
        "gate": {"unit": b, "expectations": g.evaluated, "success": g.success},
        "stats": {**st, "stats": "driver"},
        "rebalance": reb,
        "publish": {**res, "path": "driver", "seconds": times},
    }


def _cast_like(t: pa.Table, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_arrays([t.column(f.name).cast(f.type) for f in schema], schema=schema)
