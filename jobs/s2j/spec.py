"""The S2J operator's spec: ``simjoin s2j run|query|follow`` and the ``simjoin_s2j`` DAG."""

from __future__ import annotations

from typing import Any

from jobs.s2j.config import S2JConfig
from simjoin.pipeline.spec import PipelineSpec, Stage


def totals(results: dict[str, Any]) -> dict[str, Any]:
    tot: dict[str, Any] = {"pairs": 0, "rows": 0, "quarantined": 0, "units": 0, "shed": 0, "workers": None,
                           "tau": None, "snapshots": 0}
    for r in results["rounds"]:
        ing, j, pub = r.get("ingest") or {}, r.get("join") or {}, r.get("publish") or {}
        tot["rows"] += int(ing.get("rows", 0))
        tot["quarantined"] += int(ing.get("quarantined", 0))
        if j.get("unit") is not None:
            tot["units"] += 1
            tot["pairs"] += int(j.get("pairs", 0))
            tot["shed"] += int(j.get("shed", 0))
            tot.update(workers=j.get("workers"), tau=j.get("tau"))
        if pub.get("snapshot") is not None:
            tot["snapshots"] += 1
    return tot


def summary(run: Any, results: dict[str, Any]) -> str:
    t = totals(results)
    c = run.cfg
    names = ", ".join(x.name for x in run.tasks)
    load = "no new data" if not t["units"] else f"tau {t['tau']:.2f} on {t['workers']} workers"
    return (f"s2j {len(run.tasks)} tasks ({names}), window {c.window}: {t['pairs']} pairs ({t['units']} units, "
            f"{t['rows']} rows, {t['quarantined']} quarantined, {t['shed']} shed, {t['snapshots']} snapshots; "
            f"{load}) -> {run.output}")


SPEC = PipelineSpec(
    name="s2j",
    config=S2JConfig,
    run_type="stream",
    doc="General stream join (S2J, Wang et al.): many theta join tasks on one stream pair, over what arrived "
        "since the last run.\n\n"
        "A recurring micro-batch on the engine of simjoin.spark.engine: ingest (input adapter: project the "
        "tasks' columns, quarantine, stage one unit) -> join (utilisation tau, scaling, load shedding, tuple-block "
        "size; one read of the micro-batch and of each live block serves every task, each through its hash or "
        "sorted index) -> gate (Great Expectations) -> publish (a snapshot per task table, shed tuples, stats, "
        "blocks; exactly once per unit; expired blocks dropped). A pair is reported once, iff its task's "
        "predicates hold and 0 <= ts_later - ts_earlier < W.",
    stages=(
        Stage("ingest", "jobs.s2j.ingest:run", writes=("work", "quarantine"),
              doc="New stream rows -> one staged unit; null, NaN, duplicate and late rows -> quarantine."),
        Stage("join", "jobs.s2j.join:run", reads=("work", "blocks"), writes=("work",),
              doc="Adapt (tau, workers, shed ratio, block size), shed, and join every task in one pass."),
        Stage("gate", "jobs.s2j.gate:run", reads=("work",), gate=True,
              doc="Great Expectations on every task's pairs."),
        Stage("publish", "jobs.s2j.publish:run", reads=("work", "buffer"),
              writes=("output", "stats", "shed", "blocks", "buffer", "progress"), outlets=("output", "stats", "state"),
              publishes=True, doc="Snapshots, shed tuples, stats and blocks, exactly once per unit."),
    ),
    run_class="jobs.s2j.common:S2JRun",
    summary="jobs.s2j.spec:summary",
    report="jobs.s2j.report:render_s2j_stats",
    balance=("worker", "live", "unit"),
    cli_commands="jobs.s2j.cli:commands",
    tags=("streaming", "s2j", "theta"),
    trigger_input="left",
)
