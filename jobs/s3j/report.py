"""S3J / ClusterJoin's plots for ``simjoin report``: load per worker per window, window latencies
p50/p99/max, comparisons and duplication ratios per window, and the rebalance stage's loads.

The pipeline's spec names its renderer (``PipelineSpec.report``); ``simjoin.report`` calls it."""

from __future__ import annotations

from typing import Any

from simjoin.report import pyplot_frame, save_figure, write_index

__all__ = ["render_s3j_stats"]


def render_s3j_stats(pdf: Any, out: str, title: str = "stats") -> list[str]:
    """Render a stats table (pandas) to PNGs and an index.html; returns the PNG paths.

    Plots: load per worker per window (stacked), window latency p50/p99/max, comparisons
    (with and without centroid distances) and duplication ratio per window, and - when the
    rebalance stage ran - per-worker load before and after each rebalance and the workset size
    distribution. Rows are aggregated over micro-batches per window.
    """
    import numpy as np

    plt, df = pyplot_frame(pdf, out)
    for c in ("centroid_distance_computations", "load_after", "partition", "workset_id", "unit"):
        if c not in df:  # stats tables written before these columns existed
            df[c] = 0 if c == "centroid_distance_computations" else np.nan
    files: list[str] = []
    win = df[df["level"] == "window"].copy()
    wrk = df[df["level"] == "worker"].copy()
    for algo in sorted(df["algorithm"].dropna().unique()):
        w = win[win["algorithm"] == algo].groupby("window_start").agg(
            records=("records", "sum"), copies=("copies", "sum"), comps=("distance_computations", "sum"),
            cent=("centroid_distance_computations", "sum"),
            pairs=("result_pairs", "sum"), p50=("latency_p50_s", "max"), p99=("latency_p99_s", "max"),
            mx=("latency_max_s", "max")).sort_index()
        k = wrk[wrk["algorithm"] == algo].pivot_table(index="window_start", columns="worker", values="load",
                                                      aggfunc="sum").sort_index()
        labels = [str(i) for i in range(len(w))]
        fig, ax = plt.subplots(figsize=(8, 4))
        bottom = None
        for col in k.columns:
            ax.bar(range(len(k)), k[col].values, bottom=bottom, label=f"worker {int(col)}")
            bottom = k[col].values if bottom is None else bottom + k[col].values
        ax.set_xlabel("window"), ax.set_ylabel("load (Definition 5)"), ax.set_title(f"{algo}: load per worker")
        ax.legend(fontsize=7)
        save_figure(fig, out, f"{algo}_load.png", files)
        fig, ax = plt.subplots(figsize=(8, 4))
        for c, lab in (("p50", "p50"), ("p99", "p99"), ("mx", "max")):
            ax.plot(labels, w[c].values, marker="o", label=lab)
        ax.set_xlabel("window"), ax.set_ylabel("seconds"), ax.set_title(f"{algo}: window latency")
        ax.legend()
        save_figure(fig, out, f"{algo}_latency.png", files)
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.plot(labels, (w["comps"] / w["pairs"].clip(lower=1)).values, marker="o", label="comparisons ratio")
        ax.plot(labels, ((w["comps"] + w["cent"].astype(float).fillna(0)) / w["pairs"].clip(lower=1)).values,
                marker="^",
                label="comparisons ratio incl. centroid distances")
        ax.plot(labels, (w["copies"] / w["records"].clip(lower=1)).values, marker="s", label="duplication ratio")
        ax.set_xlabel("window"), ax.set_title(f"{algo}: ratios per window")
        ax.legend()
        save_figure(fig, out, f"{algo}_ratios.png", files)
        _s3j_rebalance_plots(df[df["algorithm"] == algo], algo, out, files)
    table = df[df["level"].isin(["window", "rebalance"])]
    write_index(out, title, files, table.dropna(axis=1, how="all").to_html(index=False, float_format="%.3f"))
    return files


def _s3j_rebalance_plots(df: Any, algo: str, out: str, files: list[str]) -> None:
    """Per-worker load before/after each rebalance, and the workset size distribution."""
    import matplotlib.pyplot as plt
    import numpy as np

    rw = df[df["level"] == "rebalance_worker"] if "level" in df else df.iloc[0:0]
    if len(rw):
        before = rw.pivot_table(index="unit", columns="worker", values="load", aggfunc="sum").sort_index()
        after = rw.pivot_table(index="unit", columns="worker", values="load_after", aggfunc="sum").sort_index()
        n_w = len(before.columns)
        fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
        for ax, tab, name in ((axes[0], before, "before"), (axes[1], after, "after")):
            x = np.arange(len(tab))
            for j, col in enumerate(tab.columns):
                ax.bar(x + (j - n_w / 2) * 0.8 / n_w, tab[col].values, width=0.8 / n_w, label=f"worker {int(col)}")
            avg = tab.mean(axis=1).values
            ax.plot(x, avg, "k--", label="average")
            ax.set_xticks(list(x), [str(int(u)) for u in tab.index])
            ax.set_xlabel("unit (rebalance after it)"), ax.set_title(f"{algo}: worker load {name} rebalance")
        axes[0].set_ylabel("load (Definition 5)")
        axes[1].legend(fontsize=7)
        save_figure(fig, out, f"{algo}_rebalance_load.png", files)
    ws = df[df["level"] == "workset"] if "level" in df else df.iloc[0:0]
    if len(ws):
        fig, ax = plt.subplots(figsize=(8, 4))
        sizes = ws.groupby(["window_start", "partition", "workset_id"])["records"].max().values
        ax.hist(sizes, bins=min(50, max(5, len(sizes) // 4)), log=True)
        ax.set_xlabel("rows per workset and window (new + state)"), ax.set_ylabel("worksets")
        ax.set_title(f"{algo}: workset size distribution ({len(sizes)} worksets x windows)")
        save_figure(fig, out, f"{algo}_worksets.png", files)
