"""S3J pipeline for the CLI: every micro-batch since the last run, each joined in ``foreachBatch``.

For each micro-batch the handler runs the stages in order - ingest (validate, window,
quarantine, stage) -> partition -> worksets -> join -> gate -> stats - the same functions
the ``simjoin_s3j`` DAG calls one per task. A unit left half-done by a crash is finished
first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession

from jobs import s3j_gate, s3j_ingest, s3j_join, s3j_partition, s3j_stats, s3j_worksets
from jobs.s3j_common import PIPELINE, S3JRun, pending
from simjoin.log import get_logger, stage
from simjoin.spark.runner import run_microbatches

log = get_logger("simjoin.s3j")
STAGES = (("partition", s3j_partition), ("worksets", s3j_worksets), ("join", s3j_join),
          ("gate", s3j_gate), ("stats", s3j_stats))


@dataclass
class S3JSummary:
    output: str
    algorithm: str
    batches: list[int] = field(default_factory=list)
    rows: int = 0
    quarantined: int = 0
    pairs: int = 0
    records: int = 0
    copies: int = 0
    computations: int = 0
    windows: set[int] = field(default_factory=set)

    @property
    def duplication_ratio(self) -> float:
        return self.copies / self.records if self.records else 0.0

    @property
    def comparisons_ratio(self) -> float:
        return self.computations / max(self.pairs, 1)

    def line(self) -> str:
        return (f"s3j {self.algorithm}: {self.pairs} pairs, {len(self.windows)} windows, "
                f"duplication ratio {self.duplication_ratio:.3f}, comparisons ratio {self.comparisons_ratio:.3f} "
                f"({len(self.batches)} micro-batches, {self.rows} rows, {self.quarantined} quarantined) "
                f"-> {self.output}")

    def add(self, res: dict[str, Any]) -> None:
        for k in ("pairs", "records", "copies", "computations"):
            setattr(self, k, getattr(self, k) + int(res.get(k, 0)))
        self.windows.update(res.get("windows", []))


def process_pending(spark: SparkSession, run_: S3JRun) -> dict[str, Any] | None:
    """Run partition -> worksets -> join -> gate -> stats on the staged, not yet joined unit."""
    if pending(spark, run_) is None:
        return None
    out: dict[str, Any] = {}
    for name, mod in STAGES:
        with stage(f"s3j {name}", log):
            out = mod.run(spark, run_)
    return out


def run(spark: SparkSession, run_: S3JRun) -> S3JSummary:
    summary = S3JSummary(run_.output, run_.cfg.algorithm)
    left_over = process_pending(spark, run_)
    if left_over:
        summary.add(left_over)

    def handler(batch: Any, ctx: Any) -> None:
        try:
            with stage(f"s3j ingest batch {ctx.batch_id}", log):
                info = s3j_ingest.stage_batch(spark, run_, batch, ctx.batch_id)
            summary.quarantined += info["quarantined"]
            res = process_pending(spark, run_)
        except Exception:
            # Spark reports only the Python side's last line: log the whole cause first.
            log.exception("s3j micro-batch %d failed", ctx.batch_id)
            raise
        if res:
            summary.add(res)

    rs = run_microbatches(spark, run_.sources, run_.tables.checkpoint, PIPELINE, handler)
    summary.batches, summary.rows = rs.batches, rs.rows
    return summary


def demo(spark: SparkSession, warehouse: str) -> str:
    """Small two-stream demo: 2 x 1,500 uniform 2-D vectors over 3 windows of 10 s."""
    from jobs import generate
    from simjoin.config import GenerateConfig, S3JConfig

    base = f"{warehouse.rstrip('/')}/s3j_demo"
    left, right, out = f"{base}/left", f"{base}/right", f"{base}/pairs"
    generate.run(spark, "vectors", left, GenerateConfig(rows=1500, dim=2, dist="uniform", rate=50.0, seed=1))
    generate.run(spark, "vectors", right, GenerateConfig(rows=1500, dim=2, dist="uniform", rate=50.0, seed=2))
    import shutil

    for suffix in ("", "_checkpoint", "_quarantine", "_stats", "_state", "_work"):
        shutil.rmtree(out + suffix, ignore_errors=True)
    cfg = S3JConfig(threshold=0.02, metric="euclidean", window="10s", workers=3)
    s = run(spark, S3JRun(left, out, cfg, right=right))
    return f"s3j demo: {s.line()}; stats {out}_stats, quarantine {out}_quarantine, state {out}_state"
