"""The inequality join's spec: ``simjoin ineq`` and the ``simjoin_ineq`` DAG."""

from __future__ import annotations

from typing import Any

from jobs.ineq.config import IneqConfig
from simjoin.pipeline.spec import PipelineSpec, Stage


def totals(results: dict[str, Any]) -> dict[str, int]:
    tot = {"pairs": 0, "rows": 0, "quarantined": 0, "batches": 0, "units": 0}
    for r in results["rounds"]:
        ing, st = r.get("ingest") or {}, r.get("stats") or {}
        tot["rows"] += int(ing.get("rows", 0))
        tot["quarantined"] += int(ing.get("quarantined", 0))
        if st.get("unit") is not None:
            tot["units"] += 1
            tot["pairs"] += int(st.get("pairs", 0))
            tot["batches"] = int(st.get("live_batches", 0))
    return tot


def summary(run: Any, results: dict[str, Any]) -> str:
    t = totals(results)
    c = run.cfg
    win = f"window {c.window}" if c.window else f"window {c.window_count} tuples"
    kind = "self-join" if run.self_join else "two streams"
    return (f"ineq {kind}, {win}, where {c.where}: {t['pairs']} pairs ({t['units']} units, {t['rows']} rows, "
            f"{t['quarantined']} quarantined, {t['batches']} live PO-Join batches) -> {run.output}")


SPEC = PipelineSpec(
    name="ineq",
    config=IneqConfig,
    run_type="stream",
    doc="Exact sliding-window inequality and band join of streams (SPO-Join, Aslam et al.) over what arrived "
        "since the last run.\n\n"
        "A recurring micro-batch on the engine of simjoin.spark.engine: ingest (validate, quarantine, stage one "
        "unit) -> probe (every live PO-Join batch and the mutable part, in parallel, plus the new tuples among "
        "themselves) -> merge (new tuples into the mutable part; full runs become immutable batches) -> gate "
        "(Great Expectations) -> stats -> publish (pairs, stats and state, exactly once per unit; expired "
        "batches dropped). A pair is reported once, iff its predicates hold and 0 <= ts_later - ts_earlier < W.",
    stages=(
        Stage("ingest", "jobs.ineq.ingest:run", reads=("batches",), writes=("work", "quarantine"),
              doc="New stream rows -> one staged unit; null, NaN, duplicate (against the live batches' tuples) and "
                  "late rows -> quarantine."),
        Stage("probe", "jobs.ineq.probe:run", reads=("work", "batches"), writes=("work",),
              doc="New tuples probe the mutable part (bitsets) and the immutable batches (IEJoin scan)."),
        Stage("merge", "jobs.ineq.merge:run", reads=("work", "batches"), writes=("work",),
              doc="New tuples enter the mutable part; every delta tuples it becomes an immutable batch."),
        Stage("gate", "jobs.ineq.gate:run", reads=("work",), gate=True,
              doc="Great Expectations on the unit's pairs."),
        Stage("stats", "jobs.ineq.stats:run", reads=("work", "quarantine"), writes=("work",),
              doc="Per-unit and per-worker probe and merge statistics."),
        Stage("publish", "jobs.ineq.publish:run", reads=("work",),
              writes=("output", "stats", "batches", "progress"), outlets=("output", "stats", "state"),
              publishes=True, doc="Pairs, stats and state, exactly once per unit; expired batches are dropped."),
    ),
    run_class="jobs.ineq.common:IneqRun",
    summary="jobs.ineq.spec:summary",
    report="jobs.ineq.report:render_ineq_stats",
    balance=("worker", "probe_seconds", "unit"),
    output_columns={"output": ("left_id", "right_id", "ts")},
    tags=("streaming", "inequality"),
    trigger_input="left",
)
