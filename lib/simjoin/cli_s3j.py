"""`simjoin s3j` (streaming metric-space similarity join) and `simjoin report` (plots of stats).

Registered on ``simjoin.cli.app`` when imported (from ``simjoin.cli_pipelines``).
"""

from __future__ import annotations

import time
from enum import Enum
from typing import Optional

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
    right: Optional[str] = typer.Option(None, "--right", help="Right stream (two-stream join); omit for a self-join."),
    output: str = typer.Option(..., "--output", help="Pair table `left_id, right_id, distance, window_start`; "
                                                     "<output>_stats, _quarantine, _state, _checkpoint beside it."),
    threshold: Optional[float] = typer.Option(None, "--threshold", help="Distance threshold t (match: d < t)."),
    metric: Optional[Metric] = typer.Option(None, "--metric", help="angular acos(cos)/pi (default), euclidean, "
                                                                   "cosine 1-cos."),
    window: Optional[str] = typer.Option(None, "--window", help="Window size on ts, e.g. 60s, 5m."),
    slide: Optional[str] = typer.Option(None, "--slide", help="Sliding windows: slide <= window (default tumbling)."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Workers P (space partitions)."),
    algorithm: Optional[Algorithm] = typer.Option(None, "--algorithm", help="s3j or the clusterjoin baseline."),
    virtual_partitions: Optional[int] = typer.Option(None, "--virtual-partitions", min=1,
                                                     help="ClusterJoin virtual partitions V (default 500)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the random space-partition centroids."),
    inclusive: bool = typer.Option(False, "--inclusive", help="Match d <= t instead of d < t."),
    exact_distances: bool = typer.Option(False, "--exact-distances",
                                         help="Also compute the distance of inner x inner pairs."),
    master: Optional[str] = MASTER,
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


@app.command("report")
def report(
    stats: str = typer.Option(..., "--stats", help="A stats Delta table (e.g. <output>_stats of simjoin s3j)."),
    out: str = typer.Option(..., "--out", help="Folder for the PNG plots and index.html."),
    master: Optional[str] = MASTER,
) -> None:
    """Plot a stats table: load per worker, window latencies, comparisons and duplication ratios."""
    from simjoin.spark import delta

    spark = _spark(master)
    try:
        pdf = delta.read_table(spark, stats).toPandas()
    except FileNotFoundError as e:
        _fail(str(e))
    files = render_stats(pdf, out, title=stats)  # type: ignore[possibly-undefined]
    _summary(f"report {stats}: {len(files)} plots and index.html in {out}")


def render_stats(pdf: "object", out: str, title: str = "stats") -> list[str]:
    """Render a stats table (pandas) to PNGs and an index.html; returns the PNG paths.

    Plots: load per worker per window (stacked), window latency p50/p99/max, comparisons and
    duplication ratio per window. Rows are aggregated over micro-batches per window.
    """
    import os

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    df = pd.DataFrame(pdf)
    os.makedirs(out, exist_ok=True)
    files: list[str] = []
    win = df[df["level"] == "window"].copy()
    wrk = df[df["level"] == "worker"].copy()
    for algo in sorted(df["algorithm"].dropna().unique()):
        w = win[win["algorithm"] == algo].groupby("window_start").agg(
            records=("records", "sum"), copies=("copies", "sum"), comps=("distance_computations", "sum"),
            pairs=("result_pairs", "sum"), p50=("latency_p50_s", "max"), p99=("latency_p99_s", "max"),
            mx=("latency_max_s", "max")).sort_index()
        k = wrk[wrk["algorithm"] == algo].pivot_table(index="window_start", columns="worker", values="load",
                                                      aggfunc="sum").sort_index()
        labels = [str(i) for i in range(len(w))]
        fig, ax = plt.subplots(figsize=(8, 4))
        bottom = None
        for col in k.columns:
            ax.bar(range(len(k)), k[col].values, bottom=bottom, label=f"worker {col}")
            bottom = k[col].values if bottom is None else bottom + k[col].values
        ax.set_xlabel("window"), ax.set_ylabel("load (Definition 5)"), ax.set_title(f"{algo}: load per worker")
        ax.legend(fontsize=7)
        files.append(os.path.join(out, f"{algo}_load.png"))
        fig.savefig(files[-1], dpi=100, bbox_inches="tight")
        plt.close(fig)
        fig, ax = plt.subplots(figsize=(8, 4))
        for c, lab in (("p50", "p50"), ("p99", "p99"), ("mx", "max")):
            ax.plot(labels, w[c].values, marker="o", label=lab)
        ax.set_xlabel("window"), ax.set_ylabel("seconds"), ax.set_title(f"{algo}: window latency")
        ax.legend()
        files.append(os.path.join(out, f"{algo}_latency.png"))
        fig.savefig(files[-1], dpi=100, bbox_inches="tight")
        plt.close(fig)
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.plot(labels, (w["comps"] / w["pairs"].clip(lower=1)).values, marker="o", label="comparisons ratio")
        ax.plot(labels, (w["copies"] / w["records"].clip(lower=1)).values, marker="s", label="duplication ratio")
        ax.set_xlabel("window"), ax.set_title(f"{algo}: ratios per window")
        ax.legend()
        files.append(os.path.join(out, f"{algo}_ratios.png"))
        fig.savefig(files[-1], dpi=100, bbox_inches="tight")
        plt.close(fig)
    body = "".join(f'<h3>{os.path.basename(f)}</h3><img src="{os.path.basename(f)}">' for f in files)
    table = win.drop(columns=["worker"], errors="ignore").to_html(index=False, float_format="%.3f")
    with open(os.path.join(out, "index.html"), "w") as fh:
        fh.write(f"<html><head><title>{title}</title></head><body><h1>{title}</h1>{body}"
                 f"<h2>per window</h2>{table}</body></html>")
    return files
