"""Streaming HyperCube's plots for ``simjoin report``: load per worker (ours, PHJ's, the optimal
bound), heavy keys' grids over time.

The pipeline's spec names its renderer (``PipelineSpec.report``); ``simjoin.report`` calls it."""

from __future__ import annotations

from typing import Any

from simjoin.report import pyplot_frame, save_figure, write_index

__all__ = ["render_hypercube_stats"]


def render_hypercube_stats(pdf: Any, out: str, title: str = "stats") -> list[str]:
    """Streaming HyperCube's stats (pandas) to PNGs and an index.html: the load per worker after
    the last micro-batch - ours, PHJ's, and the optimal bound N/p + sqrt(OUT/p) - with the
    maximum of each per micro-batch, and each heavy key's grid (p_R x p_S) over time."""
    import numpy as np

    plt, df = pyplot_frame(pdf, out)
    files: list[str] = []
    unit = df[df["level"] == "unit"].sort_values("unit")
    wrk = df[df["level"] == "worker"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4))
    if len(unit):
        last = int(unit["unit"].max())
        w = wrk[wrk["unit"] == last].sort_values("worker")
        x = np.arange(len(w))
        a1.bar(x - 0.2, w["load"].values, 0.4, label="Streaming HyperCube")
        a1.bar(x + 0.2, w["phj_load"].values, 0.4, label="PHJ (hash of the key)")
        a1.axhline(float(unit[unit["unit"] == last]["bound"].iloc[0]), color="k", ls="--", label="N/p + sqrt(OUT/p)")
        a1.set_xticks(x, [str(int(v)) for v in w["worker"]])
        a1.set_xlabel("worker"), a1.set_ylabel("tuple copies held"), a1.set_title(f"load per worker after unit {last}")
        a1.legend(fontsize=8)
        u = [str(int(v)) for v in unit["unit"]]
        a2.plot(u, unit["load"].values, marker="o", label="max load, ours")
        a2.plot(u, unit["phj_load"].values, marker="s", label="max load, PHJ")
        a2.plot(u, unit["bound"].values, ls="--", color="k", label="bound")
        a2.set_xlabel("micro-batch (unit)"), a2.set_ylabel("tuple copies"), a2.set_title("max worker load over time")
        a2.legend(fontsize=8)
    save_figure(fig, out, "hypercube_load.png", files)
    grid = df[df["level"] == "grid"].sort_values("unit")
    fig, ax = plt.subplots(figsize=(8, 4))
    for k, g in grid.groupby("k"):
        ax.step(g["unit"].values, (g["p_r"] * g["p_s"]).values, where="post", marker="o", label=f"key {int(k)}")
        for _, r in g.iterrows():
            ax.annotate(f"{int(r['p_r'])}x{int(r['p_s'])}", (r["unit"], r["p_r"] * r["p_s"]), fontsize=7,
                        textcoords="offset points", xytext=(2, 4))
    ax.set_xlabel("micro-batch (unit)"), ax.set_ylabel("tasks p_R x p_S"), ax.set_title("heavy keys' grids")
    if len(grid):
        ax.legend(fontsize=7)
    save_figure(fig, out, "hypercube_grids.png", files)
    write_index(out, title, files, unit.drop(columns=["worker", "k", "p_r", "p_s"], errors="ignore")
                .to_html(index=False, float_format="%.3f"))
    return files
