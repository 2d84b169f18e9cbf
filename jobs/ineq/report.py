"""The inequality join's plots for ``simjoin report``: probe and merge time, live PO-Join batches,
probe seconds per worker.

The pipeline's spec names its renderer (``PipelineSpec.report``); ``simjoin.report`` calls it."""

from __future__ import annotations

from typing import Any

from simjoin.report import pyplot_frame, save_figure, write_index

__all__ = ["render_ineq_stats"]


def render_ineq_stats(pdf: Any, out: str, title: str = "stats") -> list[str]:
    """The inequality join's stats (pandas) to PNGs and an index.html: merge and probe seconds
    per micro-batch (unit), live PO-Join batches with the mutable part's size, and probe seconds
    per worker."""

    plt, df = pyplot_frame(pdf, out)
    files: list[str] = []
    unit = df[df["level"] == "unit"].sort_values("unit")
    wrk = df[df["level"] == "worker"]
    x = [str(int(u)) for u in unit["unit"]]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar(x, unit["probe_seconds"].values, label="probe (sum over tasks)")
    ax.bar(x, unit["merge_seconds"].values, bottom=unit["probe_seconds"].values, label="merge")
    ax.set_xlabel("micro-batch (unit)"), ax.set_ylabel("seconds"), ax.set_title("ineq: probe and merge time")
    ax.legend()
    save_figure(fig, out, "ineq_times.png", files)
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(x, unit["live_batches"].values, marker="o", label="live immutable batches")
    ax.set_xlabel("micro-batch (unit)"), ax.set_ylabel("batches"), ax.set_title("ineq: live PO-Join batches")
    ax2 = ax.twinx()
    ax2.plot(x, unit["mutable"].values, marker="s", color="tab:orange", label="mutable part (tuples)")
    ax2.set_ylabel("tuples")
    fig.legend(loc="upper left")
    save_figure(fig, out, "ineq_batches.png", files)
    if len(wrk):
        k = wrk.pivot_table(index="unit", columns="worker", values="probe_seconds", aggfunc="sum").sort_index()
        fig, ax = plt.subplots(figsize=(8, 4))
        bottom = None
        for col in k.columns:
            ax.bar([str(int(u)) for u in k.index], k[col].values, bottom=bottom, label=f"worker {int(col)}")
            bottom = k[col].values if bottom is None else bottom + k[col].values
        ax.set_xlabel("micro-batch (unit)"), ax.set_ylabel("probe seconds"), ax.set_title("ineq: load per worker")
        ax.legend(fontsize=7)
        save_figure(fig, out, "ineq_load.png", files)
    write_index(out, title, files,
                unit.drop(columns=["worker"], errors="ignore").to_html(index=False, float_format="%.3f"))
    return files
