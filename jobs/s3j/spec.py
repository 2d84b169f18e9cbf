"""The S3J pipeline's spec: ``simjoin s3j`` and the ``simjoin_s3j`` DAG."""

from __future__ import annotations

from typing import Any

from jobs.s3j.config import S3JConfig
from simjoin.pipeline.spec import PipelineSpec, Stage


def totals(results: dict[str, Any]) -> dict[str, Any]:
    """Counts over every unit a run processed (``run_pipeline``'s results)."""
    tot: dict[str, Any] = {"pairs": 0, "records": 0, "copies": 0, "computations": 0, "rows": 0, "quarantined": 0}
    batches: list[int] = []
    windows: set[Any] = set()
    for r in results["rounds"]:
        ing, st = r.get("ingest") or {}, r.get("stats") or {}
        batches += ing.get("batches", [])
        for k in ("rows", "quarantined"):
            tot[k] += int(ing.get(k, 0))
        for k in ("pairs", "records", "copies", "computations"):
            tot[k] += int(st.get(k, 0))
        windows.update(st.get("windows", []))
    return {**tot, "batches": batches, "windows": windows}


def summary(run: Any, results: dict[str, Any]) -> str:
    tot = totals(results)
    batches, windows = tot["batches"], tot["windows"]
    dup = tot["copies"] / tot["records"] if tot["records"] else 0.0
    comp = tot["computations"] / max(tot["pairs"], 1)
    return (f"s3j {run.cfg.algorithm}: {tot['pairs']} pairs, {len(windows)} windows, duplication ratio {dup:.3f}, "
            f"comparisons ratio {comp:.3f} ({len(batches)} micro-batches, {tot['rows']} rows, "
            f"{tot['quarantined']} quarantined) -> {run.output}")


SPEC = PipelineSpec(
    name="s3j",
    config=S3JConfig,
    run_type="stream",
    doc="Exact streaming similarity join (S3J, Siachamis et al., DEBS'23) of what arrived since the last run.\n\n"
        "A recurring micro-batch on the engine of simjoin.spark.engine: ingest (validate, quarantine, window, "
        "stage one unit) -> partition (Section 6) -> worksets (Section 7, steps 1-5) -> join (Section 7.7) -> "
        "gate (Great Expectations) -> stats -> rebalance (Algorithm 1, Section 8.3) -> publish (pairs, stats and "
        "state, exactly once per unit). A failed "
        "run is resumed as the same unit by the next one. max_active_runs=1: units are processed in order.",
    stages=(
        Stage("ingest", "jobs.s3j.ingest:run", writes=("work", "quarantine"),
              doc="New stream rows -> one staged unit; bad rows -> quarantine."),
        Stage("partition", "jobs.s3j.partition:run", reads=("work",), writes=("work",),
              doc="Space partitioning (Section 6)."),
        Stage("worksets", "jobs.s3j.worksets:run", reads=("work", "centroids", "join_state"), writes=("work",),
              doc="Workset formulation (Section 7, steps 1-5)."),
        Stage("join", "jobs.s3j.join:run", reads=("work", "join_state"), writes=("work",),
              doc="Similarity computation per worker (Section 7.7)."),
        Stage("gate", "jobs.s3j.gate:run", reads=("work", "output"), gate=True,
              doc="Great Expectations on the unit's pairs; each names a record of this unit."),
        Stage("stats", "jobs.s3j.stats:run", reads=("work",), writes=("work",),
              doc="Per-window, per-worker and per-workset statistics (Section 9.1)."),
        Stage("rebalance", "jobs.s3j.rebalance:run", reads=("work", "centroids", "assignment"),
              writes=("work", "assignment"),
              doc="Adaptive workset balancing (Section 8.3, Algorithm 1, with splitting): the next unit's "
                  "workset -> worker assignment, one Delta commit."),
        Stage("publish", "jobs.s3j.publish:run", reads=("work",),
              writes=("output", "stats", "centroids", "join_state", "progress"),
              outlets=("output", "stats", "state"), publishes=True,
              doc="Pairs, stats and state, exactly once per unit; the unit is committed."),
    ),
    run_class="jobs.s3j.common:S3JRun",
    summary="jobs.s3j.spec:summary",
    retain="jobs.s3j.retention:prune",
    report="jobs.s3j.report:render_s3j_stats",
    balance=("worker", "load", "unit"),
    output_columns={"output": ("left_id", "right_id", "distance", "window_start")},
    tags=("streaming",),
    trigger_input="left",
)
