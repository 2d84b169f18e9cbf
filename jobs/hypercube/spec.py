"""Streaming HyperCube's spec: ``simjoin hypercube`` and the ``simjoin_hypercube`` DAG."""

from __future__ import annotations

from typing import Any

from jobs.hypercube.config import HyperCubeConfig
from simjoin.pipeline.spec import PipelineSpec, Stage


def totals(results: dict[str, Any]) -> dict[str, Any]:
    tot: dict[str, Any] = {"pairs": 0, "rows": 0, "quarantined": 0, "units": 0, "migrated": 0, "heavy": 0,
                           "max_load": 0, "phj": 0, "bound": 0.0}
    for r in results["rounds"]:
        ing, st = r.get("ingest") or {}, r.get("stats") or {}
        tot["rows"] += int(ing.get("rows", 0))
        tot["quarantined"] += int(ing.get("quarantined", 0))
        if st.get("unit") is not None:
            tot["units"] += 1
            tot["pairs"] += int(st.get("unit_pairs", 0))
            tot["migrated"] += int(st.get("migrated", 0))
            tot.update(heavy=int(st.get("heavy", 0)), max_load=int(st.get("max_load", 0)),
                       phj=int(st.get("phj_max_load", 0)), bound=float(st.get("bound", 0.0)))
    return tot


def summary(run: Any, results: dict[str, Any]) -> str:
    t = totals(results)
    c = run.cfg
    win = f"window {c.window}" if c.window else "whole history"
    what = "pairs counted" if c.count_only else "pairs"
    load = (f"max load {t['max_load']} (PHJ {t['phj']}, bound {t['bound']:.0f})" if t["units"] else "no new data")
    return (f"hypercube p={c.workers}, {win}, key {c.key}: {t['pairs']} {what} ({t['units']} units, {t['rows']} rows, "
            f"{t['quarantined']} quarantined, {t['heavy']} heavy keys, {t['migrated']} copies migrated; {load}) "
            f"-> {run.output}")


SPEC = PipelineSpec(
    name="hypercube",
    config=HyperCubeConfig,
    run_type="stream",
    doc="Exact, skew-resilient equi-join of two streams (Streaming HyperCube, Qiu, Papadias & Yi) over what "
        "arrived since the last run.\n\n"
        "A recurring micro-batch on the engine of simjoin.spark.engine: ingest (validate, quarantine, stage one "
        "unit) -> dispatch (heavy-hitter summary, grids of heavy keys resized by the factor-2 rule, migration) -> "
        "join (light keys hashed over p tasks, heavy keys on their grids; per-task hash joins of new and held "
        "tuples) -> gate (Great Expectations) -> stats -> publish (pairs or per-key counts, stats and state, "
        "exactly once per unit). Every pair of equal keys is reported once, in the micro-batch where its later "
        "tuple arrives (with --window W: only if 0 <= ts_later - ts_earlier < W).",
    stages=(
        Stage("ingest", "jobs.hypercube.ingest:run", writes=("work", "quarantine"),
              doc="New stream rows -> one staged unit; null keys, duplicate ids and late rows -> quarantine."),
        Stage("dispatch", "jobs.hypercube.dispatch:run", reads=("work", "sketch", "tuples"), writes=("work",),
              doc="Heavy hitters, grids (factor-2 rule), task -> worker, migration volume."),
        Stage("join", "jobs.hypercube.join:run", reads=("work", "tuples"), writes=("work",),
              doc="New and held tuples routed to tasks; per-task hash joins."),
        Stage("gate", "jobs.hypercube.gate:run", reads=("work",), gate=True,
              doc="Great Expectations on the unit's pairs or counts."),
        Stage("stats", "jobs.hypercube.stats:run", reads=("work", "tuples", "quarantine"), writes=("work",),
              doc="Per-worker loads (ours, PHJ's, the optimal bound), replication, migration."),
        Stage("publish", "jobs.hypercube.publish:run", reads=("work",),
              writes=("output", "stats", "tuples", "sketch", "grids", "progress"), outlets=("output", "stats", "state"),
              publishes=True, doc="Output, stats and state, exactly once per unit."),
    ),
    run_class="jobs.hypercube.common:HyperCubeRun",
    summary="jobs.hypercube.spec:summary",
    report="jobs.hypercube.report:render_hypercube_stats",
    balance=("worker", "load", "unit"),
    output_columns={"output": ("left_id", "right_id", "k", "ts")},
    tags=("streaming", "equi-join", "skew"),
    trigger_input="left",
)
