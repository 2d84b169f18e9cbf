"""Inequality join stage 5, statistics: one row per unit (tuples in, tuples probed, live
batches, merge and probe seconds, result pairs, quarantined rows) and one per worker (its
batches, stored tuples, probe seconds and pairs), to ``<output>_work/stats``; ``publish``
appends them to ``<output>_stats``, which ``simjoin report`` plots."""

from __future__ import annotations

from typing import Any

import pyarrow.compute as pc

from jobs.ineq.common import IneqRun
from simjoin.contracts import STATS_COMMON_SCHEMA, RowKind
from simjoin.io.rows import rows_table
from simjoin.pipeline.context import StageContext

STATS_SCHEMA = (STATS_COMMON_SCHEMA + ", level string, unit long, worker int, tuples_in long, tuples_probed long, "
                "live_batches long, stored_tuples long, new_batches long, mutable long, merge_seconds double, "
                "probe_seconds double, max_task_seconds double, result_pairs long, quarantined long")


def run(ctx: StageContext) -> dict[str, Any]:
    run_: IneqRun = ctx.run
    u = ctx.unit
    probed = u.work("probed")
    st = probed.filter(pc.equal(probed.column("kind"), int(RowKind.STATS))).to_pylist()
    merge = u.work("merge").to_pylist()[0]
    tuples_in = u.records.num_rows
    qt = u.read_state(run_.tables.quarantine, [("unit", "=", int(u.id))], ["unit"])
    q = 0 if qt is None else qt.num_rows
    pairs = sum(int(r["ts"]) for r in st)  # a STATS row's ts column holds its pair count
    batches = sum(1 for r in st if int(r["batch_id"]) >= 0)
    probe_s = sum(float(r["seconds"]) for r in st)
    per: dict[int, list[Any]] = {}
    for r in st:
        per.setdefault(int(r["worker"]), []).append(r)
    merge_s = float(merge["merge_seconds"]) + float(merge["build_seconds"])
    probed = max((int(r["probed"]) for r in st), default=0)
    rows: list[tuple[Any, ...]] = [("ineq", probe_s + merge_s, "unit", u.id, None, tuples_in, probed,
             batches, sum(int(r["stored"]) for r in st), int(merge["new_batches"]), int(merge["mutable"]), merge_s,
             probe_s, max((float(r["seconds"]) for r in st), default=0.0), pairs, q)]
    for w, rs in sorted(per.items()):
        s = sum(float(r["seconds"]) for r in rs)
        rows.append(("ineq", s, "worker", u.id, w, None, sum(int(r["probed"]) for r in rs),
                     sum(1 for r in rs if int(r["batch_id"]) >= 0), sum(int(r["stored"]) for r in rs), None, None,
                     None, s, max(float(r["seconds"]) for r in rs), sum(int(r["ts"]) for r in rs), None))
    return {"unit": u.id, "work": {"stats": rows_table(rows, STATS_SCHEMA)}, "pairs": pairs,
            "live_batches": batches, "tuples_in": tuples_in,
            "probe_seconds": probe_s, "merge_seconds": merge_s, "quarantined": q}
