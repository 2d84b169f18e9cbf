"""The generate tool's spec: ``simjoin generate <kind>`` and the ``simjoin_generate`` DAG."""

from __future__ import annotations

from jobs.generate.config import GenerateConfig
from simjoin.pipeline.spec import PipelineSpec, Run, Stage


class GenerateRun(Run):
    @property
    def tables(self) -> dict[str, str]:
        return {"out": self.cfg.out}


def summary(run: Run, results: dict) -> str:
    r = results["rounds"][-1]["write"]
    return f"generate {r['kind']}: wrote {r['rows']} rows to {r['path']} (Delta version {r['version']})"


SPEC = PipelineSpec(
    name="generate",
    config=GenerateConfig,
    run_type="tool",
    doc="Write a synthetic input table to Delta: token sets (Zipf tokens with planted near-duplicates), "
        "vectors with ts, inequality-join rows or Zipf-keyed equi-join rows.\n\n"
        "sets: id long, text string. vectors: id long, ts timestamp, vector array<double>. "
        "ineq: id, ts, a double, b double. keys: id, ts, k long, payload string.",
    stages=(Stage("write", "jobs.generate.write:run", writes=("out",), outlets=("out",)),),
    run_class="jobs.generate.spec:GenerateRun",
    summary="jobs.generate.spec:summary",
    tags=("generate",),
    max_active_runs=16,
)
