"""`simjoin report`: plots (PNG + index.html) from the stats tables.

Each pipeline's plots are drawn by the renderer its spec names (``PipelineSpec.report``, in
``jobs/<name>/report.py``, with the shared :func:`save_figure` and :func:`write_index`), and its
load balance is the stats column its spec names (``PipelineSpec.balance``):

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

__all__ = ["pyplot_frame", "render", "render_run", "render_task_timing", "save_figure", "write_index"]


def render(pdf: Any, out: str, title: str = "stats") -> list[str]:
    """Render a stats table ``pdf`` (pandas) by its ``pipeline`` column (the output contract's
    common stats column, ``simjoin.contracts.STATS_COMMON``); returns the PNG paths."""
    from simjoin.contracts import STATS_COMMON

    cols = list(pdf.columns)
    missing = [c for c in STATS_COMMON if c not in cols]
    if missing:
        raise ValueError(f"{title}: not a simjoin stats table (no {', '.join(missing)} column; columns {cols}); "
                         f"allowed: the <output>_stats table of a simjoin pipeline")
    from simjoin.pipeline.spec import resolve

    renderers = {name: spec.report for name, spec in _specs().items() if spec.report}
    files: list[str] = []
    for name in sorted(pdf["pipeline"].dropna().unique()):
        if name not in renderers:
            raise ValueError(f"{title}: no plots for pipeline {name!r}: allowed {', '.join(sorted(renderers))}")
        files += resolve(renderers[name])(pdf[pdf["pipeline"] == name], out, title)
    return files


def _specs() -> dict[str, Any]:
    """Every pipeline's spec by name: its ``report`` and ``balance`` say how it is plotted."""
    from simjoin.pipeline.registry import specs

    return specs()


def pyplot_frame(pdf: Any, out: str) -> tuple[Any, Any]:
    """matplotlib's pyplot (the Agg backend: no display) and the stats ``pdf`` as a pandas
    DataFrame (a copy); the folder ``out`` created. What each pipeline's renderer starts with."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    os.makedirs(out, exist_ok=True)
    return plt, pd.DataFrame(pdf)


def save_figure(fig: Any, out: str, name: str, files: list[str]) -> None:
    """Write one figure as ``out/name`` (PNG), record it in ``files`` and close it."""
    import matplotlib.pyplot as plt

    files.append(os.path.join(out, name))
    fig.savefig(files[-1], dpi=100, bbox_inches="tight")
    plt.close(fig)


def img(path: str) -> str:
    """An ``<img>`` of the PNG at ``path`` with the picture inlined (a data URI): the page shows
    it wherever it is opened or copied to; the PNG file stays beside it."""
    import base64
    import html

    with open(path, "rb") as fh:
        data = base64.b64encode(fh.read()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(os.path.basename(path))}">'


def write_index(out: str, title: str, files: list[str], table_html: str) -> None:
    import html

    body = "".join(f"<h3>{html.escape(os.path.basename(f))}</h3>{img(f)}" for f in files)
    t = html.escape(title)
    with open(os.path.join(out, "index.html"), "w") as fh:
        fh.write(f"<html><head><meta charset=\"utf-8\"><title>{t}</title></head><body><h1>{t}</h1>{body}"
                 f"<h2>table</h2>{table_html}</body></html>")


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
        save_figure(fig, out, f"task_timing_{safe}.png", files)
    cols = ["pipeline", "run_id", "stage", "mode", "spark", "attempt", "process_s", "startup_s", "work_s", "ok"]
    table = df[[c for c in cols if c in df.columns]].tail(60).to_html(index=False, float_format="%.2f")
    imgs = "".join(f"<h3>{html.escape(os.path.basename(f))}</h3>{img(f)}" for f in files)
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



def _delta_pandas(path: str) -> Any:
    """A Delta table as pandas (None if there is none), read with deltalake."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(path):
        return None
    return DeltaTable(path).to_pandas()


def _companions(pipeline: str, output: str) -> tuple[str, str]:
    """The stats and quarantine tables of ``pipeline``'s run writing ``output``, as its run class
    names them (``<output>_stats``; S2J's ``<output>/_stats``)."""
    from simjoin.pipeline.spec import resolve

    spec = _specs().get(pipeline)
    t = resolve(spec.run_class).tables_at(output) if spec is not None else None
    if t is None:
        return f"{output}_stats", f"{output}_quarantine"
    return t.stats, t.quarantine


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

    from simjoin.pipeline.spec import resolve
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
    out = out or f"{output}_report/{_safe(run_folder(rid, str(last)))}"
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
    save_figure(fig, out, "stage_durations.png", files)
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
    save_figure(fig, out, "stage_rows.png", files)

    figures: dict[str, Any] = {"pipeline": pipeline, "output": output, "run": rid, "invocation": last,
                               "mode": "/".join(sorted(set(stages["mode"]))),
                               "Spark": "/".join(SPARK_LABELS.get(k, k) for k in sorted(set(stages["spark"].dropna()))),
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
    stats_path, quarantine_path = _companions(pipeline, output)
    quarantine = _delta_pandas(quarantine_path)
    q_html = "<p>no quarantine table</p>"
    if quarantine is not None:
        q = quarantine[quarantine["run_id"] == rid] if "run_id" in quarantine.columns else quarantine
        figures["quarantined rows" + (" of this run" if "run_id" in quarantine.columns else " (all runs)")] = len(q)
        if "reason" in q.columns and len(q):
            q_html = q.groupby("reason").size().rename("rows").reset_index().to_html(index=False)
        else:
            q_html = "<p>none</p>"
    stats = _delta_pandas(stats_path)
    stat_files: list[str] = []
    if stats is not None and len(stats) and "pipeline" in stats.columns:
        st = stats[stats["pipeline"] == pipeline]
        if "run_id" in st.columns and (st["run_id"] == rid).any():
            st = st[st["run_id"] == rid]
        spec = _specs().get(pipeline)
        ref = (spec.report_run or spec.report) if spec is not None else ""
        renderer = resolve(ref) if ref else None
        if renderer is not None and len(st):
            sub = os.path.join(out, "stats")
            stat_files = renderer(st, sub, f"{pipeline} stats")
        bal = _balance_plot(st, pipeline, out, files)
        if bal is not None and bal[2]:
            figures["load balance, max/mean per worker (worst)"] = round(bal[0], 3)
            figures["load balance, max/mean per worker (median)"] = round(bal[1], 3)
        if bal is not None and bal[3]:  # units too short for their times to say anything
            figures["load balance: units not measured"] = (f"{bal[3]} of {bal[2] + bal[3]} (under "
                                                           f"{BALANCE_MIN_SECONDS} s of work)")
        if "window_start" in st.columns and "latency_p99_s" in st.columns:
            lat = st[st.get("level", "window") == "window"] if "level" in st.columns else st
            if len(lat):
                figures["window latency p99, worst (s)"] = round(float(lat["latency_p99_s"].max()), 3)
    key = pd.DataFrame({"figure": list(figures), "value": [_cell(v) for v in figures.values()]}).to_html(
        index=False, escape=True)
    cols = [c for c in ("stage", "mode", "spark", "attempt", "process_s", "startup_s", "work_s", "rows_in",
                        "rows_out", "quarantined", "ok") if c in stages.columns]
    shown = stages[cols].copy()
    if "spark" in shown.columns:
        shown["spark"] = shown["spark"].map(lambda k: SPARK_LABELS.get(k, k) if isinstance(k, str) else k)
    counts_ = ("attempt", "rows_in", "rows_out", "quarantined")
    table = pd.DataFrame({c: [_cell(int(v) if c in counts_ and _cell(v) else v) for v in shown[c]]
                          for c in cols}).to_html(index=False, escape=True)

    def imgs(paths: list[str]) -> str:
        return "".join(f"<figure>{img(f)}<figcaption>{html.escape(os.path.basename(f))}</figcaption></figure>"
                       for f in paths)

    title = f"simjoin {pipeline}: run {rid} -> {output}"
    page = (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif;margin:2em;max-width:1100px}img{max-width:100%}"
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><h2>key figures</h2>{key}"
            f"<h2>stages</h2>{imgs(files[:2])}{table}"
            f"<h2>quarantine by reason</h2>{q_html}"
            f"<h2>load per worker and balance, window latency, {html.escape(pipeline)} plots</h2>"
            f"{imgs(files[2:])}{imgs(stat_files)}</body></html>")
    index = os.path.join(out, "index.html")
    with open(index, "w") as fh:
        fh.write(page)
    return index


#: What a task-timing row's ``spark`` says, as the report's reader needs it.
SPARK_LABELS = {"none": "none (no JVM started)", "local": "local (a JVM of this process)",
                "warm": "warm (Spark Connect)"}

#: A group (unit, window, run) whose largest worker time is below this is not measured for load
#: balance: at hundredths of a second the ratio is timer noise, not skew.
BALANCE_MIN_SECONDS = 0.05


def run_folder(run_id: str, invocation: str) -> str:
    """The report folder of a run: its run id (an Airflow run), or for a command-line run (run
    id ``cli``, one per invocation) ``cli-<UTC start>``."""
    if run_id != "cli":
        return run_id
    when = invocation.partition("@")[2].rpartition("-")[0] or invocation.partition("@")[2]
    return f"cli-{when}" if when else "cli"


def _cell(v: Any) -> str:
    """A value as a report cell: a missing one (None, NaN, pandas' NA) is empty, a float has 2 decimals."""
    import pandas as pd

    if v is None or (not isinstance(v, (str, bytes, list, dict)) and bool(pd.isna(v))):
        return ""
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def _balance_plot(st: Any, pipeline: str, out: str, files: list[str]) -> tuple[float, float, int, int] | None:
    """max/mean load over workers per group (unit, window or run): a plot and (worst, median,
    groups measured, groups too short to measure: a time load under :data:`BALANCE_MIN_SECONDS`)."""
    import matplotlib.pyplot as plt

    spec = _specs().get(pipeline)
    if spec is None or spec.balance is None:
        return None
    level, col, group = spec.balance
    d = st[st["level"] == level] if level and "level" in st.columns else st
    if col not in d.columns or group not in d.columns or not len(d):
        return None
    worker = "worker" if "worker" in d.columns else "unit"
    per = d.groupby([group, worker])[col].sum().astype(float)
    g = per.groupby(level=0)
    ratio = (g.max() / g.mean().where(g.mean() > 0)).dropna()
    skipped = 0
    if "second" in col:
        big = g.max() >= BALANCE_MIN_SECONDS
        skipped = int((~big.reindex(ratio.index, fill_value=False)).sum())
        ratio = ratio[big.reindex(ratio.index, fill_value=False)]
    if not len(ratio):
        return (0.0, 0.0, 0, skipped) if skipped else None
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot([str(i) for i in ratio.index], ratio.values, marker="o")
    ax.axhline(1.0, color="#999999", lw=0.8)
    ax.set_xlabel(group), ax.set_ylabel(f"max / mean {col}")
    ax.set_title(f"{pipeline}: load balance over {'units' if worker == 'unit' else 'workers'} per {group}")
    save_figure(fig, out, "balance.png", files)
    return float(ratio.max()), float(ratio.median()), len(ratio), skipped
