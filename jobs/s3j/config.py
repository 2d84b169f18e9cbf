"""The S3J pipeline's config: ``simjoin s3j`` options, the DAG's Params, ``conf/s3j.yaml``."""

from __future__ import annotations

import math
from dataclasses import dataclass

from simjoin.config import StreamConfig, check, check_fields, check_stream_paths, param, parse_duration

__all__ = ["S3JConfig"]


@dataclass(frozen=True)
class S3JConfig(StreamConfig):
    left: str | None = param(None, "Left (or only) stream: Delta table id, ts, vector array<double>.", io=True,
                             required=True, dag_default="{warehouse}/s3j/left")
    right: str | None = param(None, "Right stream (two-stream join); omit for a self-join.", io=True)
    output: str | None = param(None, "Pair table left_id, right_id, distance, window_start; <output>_stats, "
                                     "_quarantine, _state, _checkpoint beside it.", io=True, required=True,
                               dag_default="{warehouse}/s3j/pairs")
    threshold: float = param(0.05, "Distance threshold t (match: d < t; d <= t with --inclusive).", gt=0)
    metric: str = param("angular", "angular acos(cos)/pi, euclidean, or cosine 1 - cos.",
                        choices=("angular", "euclidean", "cosine"))
    inclusive: bool = param(False, "Match d <= t instead of d < t.")
    window: str = param("60s", "Window size on ts, e.g. 60s, 5m.", duration=True)
    slide: str | None = param(None, "Sliding windows: a slide <= window (default: tumbling).", duration=True)
    workers: int = param(5, "Workers P (space partitions).", ge=1, le=4096)
    algorithm: str = param("s3j", "s3j, or the clusterjoin baseline.", choices=("s3j", "clusterjoin"))
    virtual_partitions: int = param(500, "ClusterJoin's virtual partitions V.", ge=1, le=100_000)
    seed: int = param(42, "Seed of the random space-partition centroids.", ge=0)
    exact_distances: bool = param(False, "Also compute the distance of inner x inner pairs.", state=False)
    rebalance: str = param("split", "Adaptive workset balancing between micro-batches (Section 8.3): off; balance "
                                    "(Algorithm 1: move worksets); split (also split a workset heavier than the "
                                    "average worker load across workers). Results are the same either way.",
                           choices=("off", "balance", "split"), state=False)
    rebalance_trigger: float = param(0.2, "Rebalance when a worker's load deviates more than this fraction from "
                                          "the average.", gt=0, le=10, state=False)
    migration_cost: float = param(0.0, "Algorithm 1's migration-cost factor: a move's benefit is its DI reduction "
                                       "minus this x the workset's state bytes.", ge=0, state=False)

    def __post_init__(self) -> None:
        s = "s3j"
        check_fields(self, s)
        hi = {"angular": 1.0, "cosine": 2.0}.get(self.metric, math.inf)
        check(0 < self.threshold <= hi, s, "threshold", self.threshold,
              f"0 < threshold <= {hi} for metric {self.metric}")
        if self.slide is not None:
            check(parse_duration(self.slide) <= parse_duration(self.window), s, "slide", self.slide,
                  f"a duration <= window ({self.window})")
        check_stream_paths(self, s)
