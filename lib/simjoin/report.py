"""`simjoin report`: plots (PNG + index.html) from the stats tables.

- set-similarity join (``<output>_stats`` of ``simjoin ssj``): estimated slice cost vs actual
  work per unit, wall seconds per unit (the load per worker), records indexed/probed per unit;
- S3J / ClusterJoin (``<output>_stats`` of ``simjoin s3j``): load per worker per window, window
  latencies p50/p99/max, comparisons and duplication ratios per window;
- inequality join: probe and merge time, live PO-Join batches, probe seconds per worker;
- Streaming HyperCube: load per worker (ours, PHJ's, the optimal bound), heavy keys' grids over time;
- S2J: utilisation τ against its thresholds, workers and shed ratio per micro-batch, load per
  worker, pairs and index candidates per task;
- every pipeline, from the task-timing table (``<warehouse>/_simjoin/task_timing``): per stage of
  a run, its process start, Spark start-up and work seconds (:func:`render_task_timing`);
- one page per run (:func:`render_run`, ``simjoin report --output PATH [--run-id ID]``): the run's
  key figures, stage durations, rows in, out and quarantined per stage, quarantine reasons, the
  load per worker and its balance, window latencies and the pipeline's own plots. It reads the
  Delta tables with ``deltalake``: no Spark.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["render", "render_run", "RENDERERS", "BALANCE", "render_ssj_stats", "render_s3j_stats", "render_ineq_stats",
           "render_hypercube_stats", "render_s2j_stats", "render_task_timing"]


def render(pdf: Any, out: str, title: str = "stats") -> list[str]:
    """Render a stats table ``pdf`` (pandas) by its ``pipeline`` column (the output contract's
    common stats column, ``simjoin.contracts.STATS_COMMON``); returns the PNG paths."""
    from simjoin.contracts import STATS_COMMON

    cols = list(pdf.columns)
    missing = [c for c in STATS_COMMON if c not in cols]
    if missing:
        raise ValueError(f"{title}: not a simjoin stats table (no {', '.join(missing)} column; columns {cols}); "
                         f"allowed: the <output>_stats table of a simjoin pipeline")
    files: list[str] = []
    for name in sorted(pdf["pipeline"].dropna().unique()):
        if name not in RENDERERS:
            raise ValueError(f"{title}: no plots for pipeline {name!r}: allowed {', '.join(sorted(RENDERERS))}")
        files += RENDERERS[name](pdf[pdf["pipeline"] == name], out, title)
    return files


def _render_ssj(pdf: Any, out: str, title: str) -> list[str]:
    files = render_ssj_stats(pdf, out, title)
    _index(out, title, files, pdf.to_html(index=False, float_format="%.3f"))
    return files


def _save(fig: Any, out: str, name: str, files: list[str]) -> None:
    """Write one figure as ``out/name`` (PNG), record it in ``files`` and close it."""
    import matplotlib.pyplot as plt

    files.append(os.path.join(out, name))
    fig.savefig(files[-1], dpi=100, bbox_inches="tight")
    plt.close(fig)


def _index(out: str, title: str, files: list[str], table_html: str) -> None:
    import html

    body = "".join(f'<h3>{html.escape(os.path.basename(f))}</h3><img src="{html.escape(os.path.basename(f))}">'
                   for f in files)
    t = html.escape(title)
    with open(os.path.join(out, "index.html"), "w") as fh:
        fh.write(f"<html><head><meta charset=\"utf-8\"><title>{t}</title></head><body><h1>{t}</h1>{body}"
                 f"<h2>table</h2>{table_html}</body></html>")


def render_ssj_stats(pdf: Any, out: str, title: str = "ssj stats") -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    df = pd.DataFrame(pdf)
    os.makedirs(out, exist_ok=True)
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
        _save(fig, out, f"ssj_{run_id}_slice_costs.png", files)
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.bar(x, d["wall_seconds"], label="wall seconds")
        ax.set_xticks(list(x), labels, rotation=45, fontsize=7)
        ax.set_ylabel("seconds")
        ax.set_title(f"{title} [{run_id}]: load per unit (slowest/fastest "
                     f"{d['wall_seconds'].max() / max(d['wall_seconds'].min(), 1e-9):.1f})")
        _save(fig, out, f"ssj_{run_id}_unit_seconds.png", files)
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.bar([i - 0.2 for i in x], d["records_indexed"], width=0.4, label="records indexed")
        ax.bar([i + 0.2 for i in x], d["records_probed"], width=0.4, label="records probed")
        ax.set_xticks(list(x), labels, rotation=45, fontsize=7)
        ax.set_title(f"{title} [{run_id}]: records per unit (replication)")
        ax.legend(fontsize=7)
        _save(fig, out, f"ssj_{run_id}_records.png", files)
    return files


def render_s3j_stats(pdf: Any, out: str, title: str = "stats") -> list[str]:
    """Render a stats table (pandas) to PNGs and an index.html; returns the PNG paths.

    Plots: load per worker per window (stacked), window latency p50/p99/max, comparisons
    (with and without centroid distances) and duplication ratio per window, and - when the
    rebalance stage ran - per-worker load before and after each rebalance and the workset size
    distribution. Rows are aggregated over micro-batches per window.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    df = pd.DataFrame(pdf)
    for c in ("centroid_distance_computations", "load_after", "partition", "workset_id", "unit"):
        if c not in df:  # stats tables written before these columns existed
            df[c] = 0 if c == "centroid_distance_computations" else np.nan
    os.makedirs(out, exist_ok=True)
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
        _save(fig, out, f"{algo}_load.png", files)
        fig, ax = plt.subplots(figsize=(8, 4))
        for c, lab in (("p50", "p50"), ("p99", "p99"), ("mx", "max")):
            ax.plot(labels, w[c].values, marker="o", label=lab)
        ax.set_xlabel("window"), ax.set_ylabel("seconds"), ax.set_title(f"{algo}: window latency")
        ax.legend()
        _save(fig, out, f"{algo}_latency.png", files)
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.plot(labels, (w["comps"] / w["pairs"].clip(lower=1)).values, marker="o", label="comparisons ratio")
        ax.plot(labels, ((w["comps"] + w["cent"].astype(float).fillna(0)) / w["pairs"].clip(lower=1)).values,
                marker="^",
                label="comparisons ratio incl. centroid distances")
        ax.plot(labels, (w["copies"] / w["records"].clip(lower=1)).values, marker="s", label="duplication ratio")
        ax.set_xlabel("window"), ax.set_title(f"{algo}: ratios per window")
        ax.legend()
        _save(fig, out, f"{algo}_ratios.png", files)
        _s3j_rebalance_plots(df[df["algorithm"] == algo], algo, out, files)
    table = df[df["level"].isin(["window", "rebalance"])]
    _index(out, title, files, table.dropna(axis=1, how="all").to_html(index=False, float_format="%.3f"))
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
        _save(fig, out, f"{algo}_rebalance_load.png", files)
    ws = df[df["level"] == "workset"] if "level" in df else df.iloc[0:0]
    if len(ws):
        fig, ax = plt.subplots(figsize=(8, 4))
        sizes = ws.groupby(["window_start", "partition", "workset_id"])["records"].max().values
        ax.hist(sizes, bins=min(50, max(5, len(sizes) // 4)), log=True)
        ax.set_xlabel("rows per workset and window (new + state)"), ax.set_ylabel("worksets")
        ax.set_title(f"{algo}: workset size distribution ({len(sizes)} worksets x windows)")
        _save(fig, out, f"{algo}_worksets.png", files)


def render_ineq_stats(pdf: Any, out: str, title: str = "stats") -> list[str]:
    """The inequality join's stats (pandas) to PNGs and an index.html: merge and probe seconds
    per micro-batch (unit), live PO-Join batches with the mutable part's size, and probe seconds
    per worker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    df = pd.DataFrame(pdf)
    os.makedirs(out, exist_ok=True)
    files: list[str] = []
    unit = df[df["level"] == "unit"].sort_values("unit")
    wrk = df[df["level"] == "worker"]
    x = [str(int(u)) for u in unit["unit"]]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar(x, unit["probe_seconds"].values, label="probe (sum over tasks)")
    ax.bar(x, unit["merge_seconds"].values, bottom=unit["probe_seconds"].values, label="merge")
    ax.set_xlabel("micro-batch (unit)"), ax.set_ylabel("seconds"), ax.set_title("ineq: probe and merge time")
    ax.legend()
    _save(fig, out, "ineq_times.png", files)
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(x, unit["live_batches"].values, marker="o", label="live immutable batches")
    ax.set_xlabel("micro-batch (unit)"), ax.set_ylabel("batches"), ax.set_title("ineq: live PO-Join batches")
    ax2 = ax.twinx()
    ax2.plot(x, unit["mutable"].values, marker="s", color="tab:orange", label="mutable part (tuples)")
    ax2.set_ylabel("tuples")
    fig.legend(loc="upper left")
    _save(fig, out, "ineq_batches.png", files)
    if len(wrk):
        k = wrk.pivot_table(index="unit", columns="worker", values="probe_seconds", aggfunc="sum").sort_index()
        fig, ax = plt.subplots(figsize=(8, 4))
        bottom = None
        for col in k.columns:
            ax.bar([str(int(u)) for u in k.index], k[col].values, bottom=bottom, label=f"worker {int(col)}")
            bottom = k[col].values if bottom is None else bottom + k[col].values
        ax.set_xlabel("micro-batch (unit)"), ax.set_ylabel("probe seconds"), ax.set_title("ineq: load per worker")
        ax.legend(fontsize=7)
        _save(fig, out, "ineq_load.png", files)
    _index(out, title, files, unit.drop(columns=["worker"], errors="ignore").to_html(index=False, float_format="%.3f"))
    return files


def render_hypercube_stats(pdf: Any, out: str, title: str = "stats") -> list[str]:
    """Streaming HyperCube's stats (pandas) to PNGs and an index.html: the load per worker after
    the last micro-batch - ours, PHJ's, and the optimal bound N/p + sqrt(OUT/p) - with the
    maximum of each per micro-batch, and each heavy key's grid (p_R x p_S) over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    df = pd.DataFrame(pdf)
    os.makedirs(out, exist_ok=True)
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
    _save(fig, out, "hypercube_load.png", files)
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
    _save(fig, out, "hypercube_grids.png", files)
    _index(out, title, files, unit.drop(columns=["worker", "k", "p_r", "p_s"], errors="ignore")
           .to_html(index=False, float_format="%.3f"))
    return files


def render_s2j_stats(pdf: Any, out: str, title: str = "stats") -> list[str]:
    """S2J's stats (pandas) to PNGs and an index.html: per micro-batch the utilisation τ, the
    workers and the shed ratio (Section 3.2), the load per worker, and per task its pairs and
    its index's candidates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    df = pd.DataFrame(pdf)
    os.makedirs(out, exist_ok=True)
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
    _save(fig, out, "s2j_adapt.png", files)
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
        _save(fig, out, "s2j_load.png", files)
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
        _save(fig, out, "s2j_tasks.png", files)
    _index(out, title, files, unit.drop(columns=["worker", "task"], errors="ignore")
           .to_html(index=False, float_format="%.3f"))
    return files


def render_task_timing(pdf: Any, out: str, title: str = "task timing", append: bool = False) -> list[str]:
    """Per run (the latest 6), a stacked bar per stage: process start, Spark start-up, work.
    ``append``: add a section to an existing ``index.html`` instead of writing a new one."""
    import html

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    need = ("run_id", "pipeline", "stage", "mode", "spark", "process_s", "startup_s", "work_s", "started_at")
    missing = [c for c in need if c not in pdf.columns]
    if missing:
        raise ValueError(f"{title}: not a simjoin task-timing table (no {', '.join(missing)})")
    os.makedirs(out, exist_ok=True)
    files: list[str] = []
    df = pdf.sort_values("started_at")
    runs = df.groupby(["pipeline", "run_id"], sort=False)["started_at"].min().sort_values().index[-6:]
    for pipeline, run_id in runs:
        r = df[(df["pipeline"] == pipeline) & (df["run_id"] == run_id)].drop_duplicates("stage", keep="last")
        fig, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * len(r)))
        left = [0.0] * len(r)
        for col, label, color in (("process_s", "process start", "#bbbbbb"),
                                  ("startup_s", "Spark start-up", "#e4572e"), ("work_s", "work", "#4c72b0")):
            vals = r[col].fillna(0).tolist()
            ax.barh(r["stage"], vals, left=left, label=label, color=color)
            left = [a + b for a, b in zip(left, vals, strict=True)]
        ax.invert_yaxis()
        ax.set_xlabel("seconds")
        mode = "/".join(sorted(set(r["mode"]))) + ", Spark " + "/".join(sorted(set(r["spark"])))
        ax.set_title(f"{pipeline} run {run_id} ({mode}): {sum(left):.1f}s in stages")
        ax.legend(loc="lower right", fontsize=8)
        safe = "".join(ch if ch.isalnum() else "_" for ch in f"{pipeline}_{run_id}")[:80]
        _save(fig, out, f"task_timing_{safe}.png", files)
    cols = ["pipeline", "run_id", "stage", "mode", "spark", "attempt", "process_s", "startup_s", "work_s", "ok"]
    table = df[[c for c in cols if c in df.columns]].tail(60).to_html(index=False, float_format="%.2f")
    imgs = "".join(f'<h3>{html.escape(os.path.basename(f))}</h3><img src="{html.escape(os.path.basename(f))}">'
                   for f in files)
    section = f"<h2>task timing</h2>{imgs}<h3>task timing table</h3>{table}"
    index = os.path.join(out, "index.html")
    if append and os.path.exists(index):
        with open(index) as fh:
            text = fh.read()
        text = text.replace("</body>", section + "</body>") if "</body>" in text else text + section
        with open(index, "w") as fh:
            fh.write(text)
    else:
        with open(index, "w") as fh:
            fh.write(f"<html><head><title>{html.escape(title)}</title></head><body><h1>{html.escape(title)}</h1>"
                     f"{section}</body></html>")
    return files


#: Plots per pipeline; a new pipeline adds its renderer here.
RENDERERS = {"ssj": _render_ssj, "s3j": render_s3j_stats, "ineq": render_ineq_stats,
             "hypercube": render_hypercube_stats, "s2j": render_s2j_stats}


#: Per pipeline, the stats rows and column whose spread over workers is its load balance:
#: (level or None for every row, load column, group column: one balance figure per group).
BALANCE: dict[str, tuple[str | None, str, str]] = {
    "ssj": (None, "wall_seconds", "run_id"), "s3j": ("worker", "load", "unit"),
    "ineq": ("worker", "probe_seconds", "unit"), "hypercube": ("worker", "load", "unit"),
    "s2j": ("worker", "live", "unit")}


def _delta_pandas(path: str) -> Any:
    """A Delta table as pandas (None if there is none), read with deltalake."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(path):
        return None
    return DeltaTable(path).to_pandas()


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)[:100]


def render_run(output: str, out: str | None = None, run_id: str | None = None,
               timing: str | None = None) -> str:
    """One HTML page (PNG plots beside it) for one run of the pipeline writing ``output``: the
    latest run, or the latest with ``run_id``. Returns the page's path (default
    ``<output>_report/<run>/index.html``)."""
    import html

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from simjoin.pipeline.timing import timing_path

    output = output if "://" in output else os.path.abspath(output.rstrip("/"))
    tpath = timing or timing_path()
    tdf = _delta_pandas(tpath)
    if tdf is None or "output" not in tdf.columns:
        raise ValueError(f"no task-timing table at {tpath}: allowed the warehouse of a simjoin run "
                         "(SIMJOIN_WAREHOUSE), or --timing")
    mine = tdf[tdf["output"] == output]
    if not len(mine):
        known = sorted(set(tdf["output"].dropna()))[-8:]
        raise ValueError(f"no run recorded for output {output}: allowed the output path of a simjoin run "
                         f"(recorded: {', '.join(known) or 'none'})")
    if run_id is not None:
        from simjoin.pipeline.spec import sanitize_run_id

        want = {run_id, sanitize_run_id(run_id)}
        mine = mine[mine["run_id"].isin(want) | mine["invocation"].isin(want)]
        if not len(mine):
            ids = sorted(set(tdf[tdf["output"] == output]["run_id"]))[-8:]
            raise ValueError(f"no run {run_id!r} recorded for {output}: allowed {', '.join(map(str, ids))}")
    last = mine.sort_values("started_at")["invocation"].iloc[-1]
    stages = mine[mine["invocation"] == last].sort_values("started_at")
    pipeline = str(stages["pipeline"].iloc[0])
    rid = str(stages["run_id"].iloc[0])
    out = out or f"{output}_report/{_safe(str(last))}"
    os.makedirs(out, exist_ok=True)
    files: list[str] = []
    # stage durations (retries and the second round of a resumed stream each appear)
    by = stages.groupby("stage", sort=False).agg(process_s=("process_s", "sum"), startup_s=("startup_s", "sum"),
                                                 work_s=("work_s", "sum"), attempts=("attempt", "max"),
                                                 ok=("ok", "all"), rows_in=("rows_in", "max"),
                                                 rows_out=("rows_out", "max"), quarantined=("quarantined", "max"))
    fig, ax = plt.subplots(figsize=(8, 0.8 + 0.45 * len(by)))
    left = [0.0] * len(by)
    for col, label, color in (("process_s", "process start", "#bbbbbb"), ("startup_s", "Spark start-up", "#e4572e"),
                              ("work_s", "work", "#4c72b0")):
        vals = by[col].fillna(0).tolist()
        ax.barh(list(by.index), vals, left=left, label=label, color=color)
        left = [a + b for a, b in zip(left, vals, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel("seconds"), ax.set_title(f"{pipeline} run {rid}: stage durations")
    ax.legend(loc="lower right", fontsize=8)
    _save(fig, out, "stage_durations.png", files)
    counts = by[["rows_in", "rows_out", "quarantined"]].astype(float)
    fig, ax = plt.subplots(figsize=(8, 0.8 + 0.45 * len(by)))
    y = range(len(by))
    for i, (col, color) in enumerate((("rows_in", "#4c72b0"), ("rows_out", "#55a868"), ("quarantined", "#c44e52"))):
        ax.barh([v + (i - 1) * 0.27 for v in y], counts[col].fillna(0).values, height=0.27, label=col.replace("_", " "),
                color=color)
    ax.set_yticks(list(y), list(by.index))
    ax.invert_yaxis()
    ax.set_xlabel("rows"), ax.set_title(f"{pipeline} run {rid}: rows in, out and quarantined per stage")
    ax.legend(loc="lower right", fontsize=8)
    _save(fig, out, "stage_rows.png", files)

    figures: dict[str, Any] = {"pipeline": pipeline, "output": output, "run": rid, "invocation": last,
                               "mode": "/".join(sorted(set(stages["mode"]))),
                               "Spark": "/".join(sorted(set(stages["spark"]))),
                               "started": str(stages["started_at"].min()),
                               "seconds in stages": round(float(sum(left)), 2),
                               "all stages ok": bool(by["ok"].all())}
    pairs = _delta_pandas(output)
    if pairs is not None:
        figures["output rows (all runs)"] = len(pairs)
        if "run_id" in pairs.columns and pipeline == "ssj":
            figures["output rows of this run"] = int((pairs["run_id"] == rid).sum())
    pub = by["rows_out"].dropna()
    if len(pub):
        figures["rows out of the last stage"] = int(pub.iloc[-1])
    quarantine = _delta_pandas(f"{output}_quarantine")
    q_html = "<p>no quarantine table</p>"
    if quarantine is not None:
        q = quarantine[quarantine["run_id"] == rid] if "run_id" in quarantine.columns else quarantine
        figures["quarantined rows" + (" of this run" if "run_id" in quarantine.columns else " (all runs)")] = len(q)
        if "reason" in q.columns and len(q):
            q_html = q.groupby("reason").size().rename("rows").reset_index().to_html(index=False)
        else:
            q_html = "<p>none</p>"
    stats = _delta_pandas(f"{output}_stats")
    stat_files: list[str] = []
    if stats is not None and len(stats) and "pipeline" in stats.columns:
        st = stats[stats["pipeline"] == pipeline]
        if "run_id" in st.columns and (st["run_id"] == rid).any():
            st = st[st["run_id"] == rid]
        renderer = {"ssj": render_ssj_stats}.get(pipeline) or RENDERERS.get(pipeline)
        if renderer is not None and len(st):
            sub = os.path.join(out, "stats")
            stat_files = renderer(st, sub, f"{pipeline} stats")
        bal = _balance_plot(st, pipeline, out, files)
        if bal is not None:
            figures["load balance, max/mean per worker (worst)"] = round(bal[0], 3)
            figures["load balance, max/mean per worker (median)"] = round(bal[1], 3)
        if "window_start" in st.columns and "latency_p99_s" in st.columns:
            lat = st[st.get("level", "window") == "window"] if "level" in st.columns else st
            if len(lat):
                figures["window latency p99, worst (s)"] = round(float(lat["latency_p99_s"].max()), 3)
    key = pd.DataFrame({"figure": list(figures), "value": [str(v) for v in figures.values()]}).to_html(
        index=False, escape=True)
    stages = stages.astype({c: "Int64" for c in ("rows_in", "rows_out", "quarantined") if c in stages.columns})
    table = stages[[c for c in ("stage", "mode", "spark", "attempt", "process_s", "startup_s", "work_s", "rows_in",
                                "rows_out", "quarantined", "ok") if c in stages.columns]].to_html(
        index=False, float_format="%.2f", na_rep="")

    def imgs(paths: list[str], base: str = "") -> str:
        return "".join(f'<figure><img src="{html.escape(base + os.path.basename(f))}" '
                       f'alt="{html.escape(os.path.basename(f))}">'
                       f"<figcaption>{html.escape(os.path.basename(f))}</figcaption></figure>" for f in paths)

    title = f"simjoin {pipeline}: run {rid} -> {output}"
    page = (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif;margin:2em;max-width:1100px}img{max-width:100%}"
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><h2>key figures</h2>{key}"
            f"<h2>stages</h2>{imgs(files[:2])}{table}"
            f"<h2>quarantine by reason</h2>{q_html}"
            f"<h2>load per worker and balance, window latency, {html.escape(pipeline)} plots</h2>"
            f"{imgs(files[2:])}{imgs(stat_files, 'stats/')}</body></html>")
    index = os.path.join(out, "index.html")
    with open(index, "w") as fh:
        fh.write(page)
    return index


def _balance_plot(st: Any, pipeline: str, out: str, files: list[str]) -> tuple[float, float] | None:
    """max/mean load over workers per group (unit, window or run): a plot and (worst, median)."""
    import matplotlib.pyplot as plt

    if pipeline not in BALANCE:
        return None
    level, col, group = BALANCE[pipeline]
    d = st[st["level"] == level] if level and "level" in st.columns else st
    if col not in d.columns or group not in d.columns or not len(d):
        return None
    worker = "worker" if "worker" in d.columns else "unit"
    per = d.groupby([group, worker])[col].sum().astype(float)
    g = per.groupby(level=0)
    ratio = (g.max() / g.mean().where(g.mean() > 0)).dropna()
    if not len(ratio):
        return None
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot([str(i) for i in ratio.index], ratio.values, marker="o")
    ax.axhline(1.0, color="#999999", lw=0.8)
    ax.set_xlabel(group), ax.set_ylabel(f"max / mean {col}")
    ax.set_title(f"{pipeline}: load balance over {'units' if worker == 'unit' else 'workers'} per {group}")
    _save(fig, out, "balance.png", files)
    return float(ratio.max()), float(ratio.median())
