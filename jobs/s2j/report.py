"""S2J's plots for ``simjoin report``: utilisation τ against its thresholds, workers and shed ratio
per micro-batch, load per worker, pairs and index candidates per task.

The pipeline's spec names its renderer (``PipelineSpec.report``); ``simjoin.report`` calls it."""

from __future__ import annotations

from typing import Any

from simjoin.report import pyplot_frame, save_figure, write_index

__all__ = ["render_s2j_stats"]


def render_s2j_stats(pdf: Any, out: str, title: str = "stats") -> list[str]:
    """S2J's stats (pandas) to PNGs and an index.html: per micro-batch the utilisation τ, the
    workers and the shed ratio (Section 3.2), the load per worker, and per task its pairs and
    its index's candidates."""

    plt, df = pyplot_frame(pdf, out)
    files: list[str] = []
    unit = df[df["level"] == "unit"].sort_values("unit")
    x = [str(int(u)) for u in unit["unit"]]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4))
    a1.plot(x, unit["tau"].values, marker="o", label="tau (utilisation)")
    a1.plot(x, unit["shed_ratio"].values, marker="s", label="shed ratio SR")
    a1.set_xlabel("micro-batch (unit)"), a1.set_ylabel("ratio"), a1.set_title("s2j: utilisation and shedding")
    a1.legend(fontsize=8)
    a2.step(x, unit["workers"].values, where="mid", marker="o", color="tab:green")
    a2.set_xlabel("micro-batch (unit)"), a2.set_ylabel("workers m"), a2.set_title("s2j: workers")
    save_figure(fig, out, "s2j_adapt.png", files)
    wrk = df[df["level"] == "worker"]
    if len(wrk):
        k = wrk.pivot_table(index="unit", columns="worker", values="live", aggfunc="sum").sort_index()
        fig, ax = plt.subplots(figsize=(8, 4))
        bottom = None
        for col in k.columns:
            vals = k[col].fillna(0).values
            ax.bar([str(int(u)) for u in k.index], vals, bottom=bottom, label=f"worker {int(col)}")
            bottom = vals if bottom is None else bottom + vals
        ax.set_xlabel("micro-batch (unit)"), ax.set_ylabel("tuples held"), ax.set_title("s2j: load per worker")
        ax.legend(fontsize=7)
        save_figure(fig, out, "s2j_load.png", files)
    tsk = df[df["level"] == "task"]
    if len(tsk):
        g = tsk.groupby("task")[["pairs", "candidates"]].sum()
        fig, ax = plt.subplots(figsize=(8, 4))
        pos = list(range(len(g)))
        ax.bar([p - 0.2 for p in pos], g["candidates"].values, 0.4, label="index candidates")
        ax.bar([p + 0.2 for p in pos], g["pairs"].values, 0.4, label="pairs")
        ax.set_xticks(pos, list(g.index))
        ax.set_ylabel("count (all micro-batches)"), ax.set_title("s2j: per task")
        ax.legend(fontsize=8)
        save_figure(fig, out, "s2j_tasks.png", files)
    write_index(out, title, files, unit.drop(columns=["worker", "task"], errors="ignore")
                .to_html(index=False, float_format="%.3f"))
    return files
