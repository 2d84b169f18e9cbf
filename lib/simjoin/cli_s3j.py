"""`simjoin s3j` (streaming metric-space similarity join) and `simjoin report` (plots of stats).

Registered on ``simjoin.cli.app`` when imported (from ``simjoin.cli_pipelines``).
"""

from __future__ import annotations

import time
from enum import Enum

import typer

from simjoin.cli import MASTER, _fail, _spark, _summary, app
from simjoin.config import ConfigError, S3JConfig, load_config


class Metric(str, Enum):
    angular = "angular"
    euclidean = "euclidean"
    cosine = "cosine"


class Algorithm(str, Enum):
    s3j = "s3j"
    clusterjoin = "clusterjoin"


@app.command("s3j")
def s3j(
    left: str = typer.Option(..., "--left", help="Left (or only) stream: Delta table `id long, ts timestamp, "
                                                 "vector array<double>`."),
    right: str | None = typer.Option(None, "--right", help="Right stream (two-stream join); omit for a self-join."),
    output: str = typer.Option(..., "--output", help="Pair table `left_id, right_id, distance, window_start`; "
                                                     "<output>_stats, _quarantine, _state, _checkpoint beside it."),
    threshold: float | None = typer.Option(None, "--threshold", help="Distance threshold t (match: d < t)."),
    metric: Metric | None = typer.Option(None, "--metric", help="angular acos(cos)/pi (default), euclidean, "
                                                                   "cosine 1-cos."),
    window: str | None = typer.Option(None, "--window", help="Window size on ts, e.g. 60s, 5m."),
    slide: str | None = typer.Option(None, "--slide", help="Sliding windows: slide <= window (default tumbling)."),
    workers: int | None = typer.Option(None, "--workers", min=1, help="Workers P (space partitions)."),
    algorithm: Algorithm | None = typer.Option(None, "--algorithm", help="s3j or the clusterjoin baseline."),
    virtual_partitions: int | None = typer.Option(None, "--virtual-partitions", min=1,
                                                     help="ClusterJoin virtual partitions V (default 500)."),
    seed: int | None = typer.Option(None, "--seed", help="Seed of the random space-partition centroids."),
    inclusive: bool = typer.Option(False, "--inclusive", help="Match d <= t instead of d < t."),
    exact_distances: bool = typer.Option(False, "--exact-distances",
                                         help="Also compute the distance of inner x inner pairs."),
    master: str | None = MASTER,
) -> None:
    """Exact streaming similarity join (S3J, Siachamis et al.) of what arrived since the last run."""
    from jobs import s3j as job
    from jobs.s3j_common import S3JRun

    t0 = time.perf_counter()
    try:
        cfg = load_config(S3JConfig, "s3j", {
            "threshold": threshold, "metric": metric.value if metric else None, "window": window, "slide": slide,
            "workers": workers, "algorithm": algorithm.value if algorithm else None,
            "virtual_partitions": virtual_partitions, "seed": seed,
            "inclusive": True if inclusive else None, "exact_distances": True if exact_distances else None})
        run = S3JRun(left, output, cfg, right=right)
    except (ConfigError, ValueError) as e:
        _fail(str(e))
    spark = _spark(master)
    try:
        res = job.run(spark, run)  # type: ignore[possibly-undefined]
    except (ValueError, FileNotFoundError) as e:
        _fail(str(e))
    _summary(f"{res.line()} in {time.perf_counter() - t0:.1f}s")  # type: ignore[possibly-undefined]
