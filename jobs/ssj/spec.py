"""The set-similarity join's spec: ``simjoin ssj`` and the ``simjoin_ssj`` DAG."""

from __future__ import annotations

from typing import Any

from jobs.ssj.config import SSJConfig
from simjoin.pipeline.spec import PipelineSpec, Stage


def summary(run: Any, results: dict[str, Any]) -> str:
    r = results["rounds"][-1]
    tok, opt, join, pub = r["tokenize"], r["optimize"], r["join"], r["publish"]
    how = f", {pub['new_pairs']} new on top of run {pub['base_run']}" if pub.get("base_run") else ""
    mods = [k for k in opt.get("mods", []) if k != opt["m"]]
    split = f", split {'/'.join(map(str, mods))}" if mods else ""
    lo, hi = join.get("fastest_unit_cpu_s", 0.0), join.get("slowest_unit_cpu_s", 0.0)
    # the balance only where units did measurable work (an empty input has none)
    balance = f", unit CPU slowest/fastest {hi / lo:.1f}" if lo > 0 and join["units"] else ""
    where = "in process" if tok.get("executor") == "in_process" else "on Spark"
    return (f"ssj: {pub['pairs']} pairs{how} from {tok['records']} records ({tok['quarantined']} quarantined), "
            f"{join['units']} units (n={opt['n']}, m={opt['m']}{split}{balance}) "
            f"{where} -> {run.output}")


SPEC = PipelineSpec(
    name="ssj",
    config=SSJConfig,
    run_type="batch",
    doc="Exact set-similarity join (Fier & Freytag): tokenize, optimize, distributed PPJoin.\n\n"
        "Every stage reads and writes Delta tables beside the output path and replaces only this run's "
        "run_id partition, so a retried or re-run task reproduces the same tables. Trigger with a config "
        'such as {"input": "warehouse/sets", "output": "warehouse/ssj_pairs", "threshold": 0.8}.',
    stages=(
        Stage("tokenize", "jobs.ssj.tokenize:run", reads=(),
              writes=("tokens", "lengths", "quarantine", "runs", "increments"), outlets=("tokens",),
              doc="Pin the input versions, choose full or incremental, tokenize, quarantine bad rows, "
                  "length statistics."),
        Stage("gate_tokens", "jobs.ssj.gates:tokens", reads=("tokens",), gate=True, background=True,
              doc="Great Expectations on the token records."),
        Stage("optimize", "jobs.ssj.optimize:run", reads=("lengths",), writes=("plan",), outlets=("plan",),
              doc="The optimizer's parameter search (Section 2.5) -> the plan table."),
        Stage("join", "jobs.ssj.join:run", reads=("tokens", "plan"), writes=("staging", "stats"),
              outlets=("staging",), doc="One local PPJoin per unit -> staging pairs and unit stats."),
        Stage("gate_pairs", "jobs.ssj.gates:pairs", reads=("staging",), gate=True,
              doc="Great Expectations on the staged pairs."),
        Stage("publish", "jobs.ssj.publish:run", reads=("staging",), writes=("output", "increments", "runs"),
              outlets=("output",), publishes=True,
              doc="The gated pairs (with the base run's, if incremental) -> the output's run_id partition."),
    ),
    run_class="jobs.ssj.common:SSJRun",
    summary="jobs.ssj.spec:summary",
    retain="jobs.ssj.retention:prune",
    report="jobs.ssj.report:render_ssj",
    report_run="jobs.ssj.report:render_ssj_stats",
    balance=(None, "wall_seconds", "run_id"),
    output_columns={"output": ("left_id", "right_id", "similarity", "run_id")},
    tags=("batch",),
    trigger_input="input",
    max_active_runs=4,
)
