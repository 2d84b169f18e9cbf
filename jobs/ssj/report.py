"""The set-similarity join's plots for ``simjoin report``: estimated slice cost vs actual work
per unit, wall seconds per unit (the load per worker), records indexed/probed per unit.

The pipeline's spec names its renderer (``PipelineSpec.report``); ``simjoin.report`` calls it."""

from __future__ import annotations

from typing import Any

from simjoin.report import pyplot_frame, save_figure, write_index

__all__ = ["render_ssj_stats", "render_ssj"]


def render_ssj_stats(pdf: Any, out: str, title: str = "ssj stats") -> list[str]:

    plt, df = pyplot_frame(pdf, out)
    files: list[str] = []
    for run_id, d in df.groupby("run_id") if "run_id" in df else [("run", df)]:
        d = d.sort_values("unit")
        labels = [f"{n}/{g}" for n, g in zip(d["node"], d["modgroup"])]
        x = range(len(d))
        fig, ax1 = plt.subplots(figsize=(8, 4))
        ax1.bar([i - 0.2 for i in x], d["est_cost"] / max(d["est_cost"].max(), 1), width=0.4,
                label="estimated slice cost C(i)/m (scaled)")
        ax1.bar([i + 0.2 for i in x], d["candidates"] / max(d["candidates"].max(), 1), width=0.4,
                label="actual candidates (scaled)")
        ax1.set_xticks(list(x), labels, rotation=45, fontsize=7)
        ax1.set_xlabel("unit (node/modgroup)")
        ax1.set_title(f"{title} [{run_id}]: estimated vs actual cost per unit")
        ax1.legend(fontsize=7)
        save_figure(fig, out, f"ssj_{run_id}_slice_costs.png", files)
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.bar(x, d["wall_seconds"], label="wall seconds")
        ax.set_xticks(list(x), labels, rotation=45, fontsize=7)
        ax.set_ylabel("seconds")
        ax.set_title(f"{title} [{run_id}]: load per unit (slowest/fastest "
                     f"{d['wall_seconds'].max() / max(d['wall_seconds'].min(), 1e-9):.1f})")
        save_figure(fig, out, f"ssj_{run_id}_unit_seconds.png", files)
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.bar([i - 0.2 for i in x], d["records_indexed"], width=0.4, label="records indexed")
        ax.bar([i + 0.2 for i in x], d["records_probed"], width=0.4, label="records probed")
        ax.set_xticks(list(x), labels, rotation=45, fontsize=7)
        ax.set_title(f"{title} [{run_id}]: records per unit (replication)")
        ax.legend(fontsize=7)
        save_figure(fig, out, f"ssj_{run_id}_records.png", files)
    return files


def render_ssj(pdf: Any, out: str, title: str) -> list[str]:
    files = render_ssj_stats(pdf, out, title)
    write_index(out, title, files, pdf.to_html(index=False, float_format="%.3f"))
    return files
