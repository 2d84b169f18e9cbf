"""Benchmark: S3J workset balancing under drift (Section 8.3, Algorithm 1, plus splitting), through
the Spark pipeline (``simjoin s3j``).

Workload: one 2-D vector stream from ``simjoin.core.datagen.gen_vectors`` (uniform background,
``--drift skew``: uniform for ``--after`` windows, then 90 % of the rows in one small blob;
``--drift wander``: 80 % in a hot cluster that moves every window), ``2 x --records-per-window``
rows per tumbling 60 s window, the drift period being the window. Its rows alternate between two
streams (even rows left, odd rows right: the same distribution, different records - with two
generator seeds the blobs would lie apart), joined left x right with the euclidean distance,
P = ``--workers``. The threshold gives about ``--selectivity`` pairs / (|L| |R|) in the drifted
windows (calibrated on a sample of them); the stationary windows of ``skew`` then have far fewer.
A case ``skew@base`` instead keeps the threshold calibrated on the windows before the drift (the
query's threshold, fixed before the data drifted): the blob's drifted windows are then ~60 %
selective and hold worksets heavier than a worker's average load - the case Algorithm 1 cannot
balance (irremovable worksets) and splitting is for; it runs ``--base-records-per-window`` records.

Each window is fed as one micro-batch: append window k's rows to both stream tables, then one
``run_pipeline`` (what ``simjoin s3j`` runs, in this process: no JVM start per run) - so the
rebalance decided from window k's workset loads routes window k+1. The same data runs three ways:
``--rebalance off``, ``balance`` (Algorithm 1) and ``split`` (Algorithm 1 after splitting worksets
heavier than the average worker load); the three pair sets (left_id, right_id, window_start) must
be identical. Per window: DI and max/avg of the realized per-worker load (``worker`` rows), the
decision taken after it (``rebalance`` rows), the window's p99 join-task latency and the run's
wall seconds. ``simjoin.report.render`` plots each stats table.

Writes bench/results/s3j_balance.md and .json (plots under bench/results/s3j_balance/).

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/s3j_balance.py [--records-per-window 3000]
        [--windows 8] [--workers 5] [--drift skew,skew@base,wander] [--out bench/results/s3j_balance.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MODES = ("off", "balance", "split")
WINDOW_S = 60
GOAL = 1.25


def stream(n: int, windows: int, drift: str, after: int, seed: int) -> dict[str, np.ndarray]:
    """2n rows per window of one drifting stream: ids, ts (us), vectors, window index, side."""
    from simjoin.core.datagen import T0_US, gen_vectors, timestamps_us

    rate = 2 * n / WINDOW_S
    N = 2 * n * windows
    X = gen_vectors(0, N, 2, "uniform", seed, drift=drift, rate=rate, period=WINDOW_S, after=after)
    ts = timestamps_us(0, N, rate)
    return {"id": np.arange(N, dtype=np.int64), "ts": ts, "X": X, "win": (ts - T0_US) // (WINDOW_S * 1_000_000),
            "side": (np.arange(N) % 2).astype(np.int8)}


def calibrate(S: dict[str, np.ndarray], windows: list[int], sel: float, rng: np.random.Generator) -> float:
    """Euclidean threshold at quantile ``sel`` of the left x right distances inside each of ``windows``
    (a sample of each)."""
    from simjoin.core.metric import pairwise

    D = []
    for k in windows:  # pairs within a window only (a wandering cluster is elsewhere in another window)
        m = S["win"] == k
        L, R = S["X"][m & (S["side"] == 0)], S["X"][m & (S["side"] == 1)]
        L = L[rng.choice(len(L), min(len(L), 1000), replace=False)]
        R = R[rng.choice(len(R), min(len(R), 1000), replace=False)]
        D.append(pairwise("euclidean", L, R).ravel())
    return float(np.quantile(np.concatenate(D), sel))


def selectivity(S: dict[str, np.ndarray], k: int, t: float) -> float:
    """Exact pairs / (|L| |R|) of window k (brute force in blocks)."""
    from simjoin.core.metric import pairwise

    m = S["win"] == k
    L, R = S["X"][m & (S["side"] == 0)], S["X"][m & (S["side"] == 1)]
    cnt = sum(int((pairwise("euclidean", L[i:i + 1000], R) < t).sum()) for i in range(0, len(L), 1000))
    return cnt / max(1, len(L) * len(R))


def write_piece(path: str, S: dict[str, np.ndarray], idx: np.ndarray) -> None:
    from deltalake import write_deltalake

    X = np.ascontiguousarray(S["X"][idx], dtype=np.float64)
    vec = pa.ListArray.from_arrays(pa.array(np.arange(0, X.size + 1, X.shape[1], dtype=np.int32)),
                                   pa.array(X.ravel()))
    t = pa.table({"id": pa.array(S["id"][idx], pa.int64()),
                  "ts": pa.array(S["ts"][idx], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                  "vector": vec})
    write_deltalake(path, t, mode="append")


def run_mode(spark, work: Path, name: str, S: dict[str, np.ndarray], windows: int, cfg: dict) -> dict:
    """One output; window k's rows appended, then one run; wall seconds per run."""
    from simjoin.pipeline import get_spec
    from simjoin.pipeline.runner import run_pipeline
    from simjoin.spark import delta

    base = work / name
    shutil.rmtree(base, ignore_errors=True)
    left, right, out = str(base / "left"), str(base / "right"), str(base / "out")
    spec = get_spec("s3j")
    secs = []
    for k in range(windows):
        m = S["win"] == k
        write_piece(left, S, np.nonzero(m & (S["side"] == 0))[0])
        write_piece(right, S, np.nonzero(m & (S["side"] == 1))[0])
        run = spec.make_run({"left": left, "right": right, "output": out, **cfg})
        t0 = time.perf_counter()
        run_pipeline(spark, run)
        secs.append(time.perf_counter() - t0)
        print(f"  {name} window {k}: {secs[-1]:.1f}s", flush=True)
    st = delta.read_table(spark, f"{out}_stats").toPandas()
    return {"seconds": secs, "stats": st, "out": out}


def compare_pairs(spark, outs: dict[str, str]) -> dict:
    """Pair counts per mode, duplicates, and the symmetric difference against ``off``."""
    from simjoin.spark import delta

    cols = ["left_id", "right_id", "window_start"]
    df = {m: delta.read_table(spark, p).select(*cols) for m, p in outs.items()}
    res: dict = {"pairs": {m: d.count() for m, d in df.items()},
                 "distinct": {m: d.distinct().count() for m, d in df.items()}, "diff_vs_off": {}}
    for m in outs:
        if m != "off":
            res["diff_vs_off"][m] = [df[m].exceptAll(df["off"]).count(), df["off"].exceptAll(df[m]).count()]
    res["identical"] = (len(set(res["pairs"].values())) == 1 and res["pairs"] == res["distinct"]
                        and all(a == b == 0 for a, b in res["diff_vs_off"].values()))
    return res


def analyse(st, P: int, trigger: float, t0_us: int) -> list[dict]:
    """Per window: realized worker loads (summed over units), latency, and the decision of the unit
    that processed it (the unit holding most of its records)."""
    from simjoin.core.metric import imbalance, needs_rebalance

    def widx(ts) -> int:
        return int((ts.value // 1000 - t0_us) // (WINDOW_S * 1_000_000))

    win = st[st["level"] == "window"]
    wrk = st[st["level"] == "worker"]
    wss = st[st["level"] == "workset"]
    reb = st[st["level"] == "rebalance"].set_index("unit")
    rbw = st[st["level"] == "rebalance_worker"]
    rows = []
    for ws, g in win.groupby("window_start"):
        k = widx(ws)
        L = np.zeros(P)
        for _, r in wrk[wrk["window_start"] == ws].iterrows():
            L[int(r["worker"])] += float(r["load"])
        avg = L.mean()
        unit = int(g.sort_values("records").iloc[-1]["unit"])
        wl = wss[wss["window_start"] == ws].groupby(["partition", "workset_id"])["load"].sum()
        mw = int(np.argmax(L))
        wsw = wss[wss["window_start"] == ws]
        parts = wsw.groupby(["partition", "workset_id"])["worker"].nunique()
        mine = wsw[wsw["worker"] == mw].groupby(["partition", "workset_id"])["load"].sum().sort_values(ascending=False)
        units = [{"partition": int(pk), "workset_id": int(gk), "parts": int(parts[(pk, gk)]),
                  "rel": float(v / avg) if avg else 0.0} for (pk, gk), v in mine.head(3).items()]
        row = {"window": k, "max_worker": mw, "max_worker_units": units,
               "max_worker_rest": float(mine.iloc[3:].sum() / avg) if avg else 0.0, "unit": unit,
               "records": int(g["records"].sum()), "pairs": int(g["result_pairs"].sum()),
               "load": float(L.sum()), "worker_load": L.tolist(), "di": imbalance(L),
               "di_rel": imbalance(L) / L.sum() if L.sum() else 0.0, "max_avg": float(L.max() / avg) if avg else 1.0,
               "p99_s": float(g["latency_p99_s"].max()), "max_s": float(g["latency_max_s"].max()),
               "worksets": len(wl), "top_workset_avg": float(wl.max() / avg) if avg and len(wl) else 0.0}
        if unit in reb.index:
            r = reb.loc[unit]
            lb = rbw[rbw["unit"] == unit].sort_values("worker")
            before, after = lb["load"].to_numpy(float), lb["load_after"].to_numpy(float)
            a0, a1 = before.mean(), after.mean()
            row["decision"] = {
                "fired": bool(needs_rebalance(before, trigger)), "di_before": float(r["load_imbalance"]),
                "di_after": float(r["imbalance_after"]),
                "di_after_rel": float(r["imbalance_after"]) / after.sum() if after.sum() else 0.0,
                "max_avg_before": float(before.max() / a0) if a0 else 1.0,
                "max_avg_after": float(after.max() / a1) if a1 else 1.0, "moved": int(r["moved"]),
                "split": int(r["split"]), "bytes_migrated": float(r["bytes_migrated"])}
        rows.append(row)
    return sorted(rows, key=lambda x: x["window"])


def goal(rows: list[dict], after: int) -> dict:
    """Windows routed by a decision made after the first rebalance that fired under drift."""
    fired = [r["window"] for r in rows if r["window"] >= after and r.get("decision", {}).get("fired")]
    if not fired:
        return {"first": None, "windows": [], "max": None, "mean": None}
    ks = [r for r in rows if r["window"] > fired[0]]
    v = [r["max_avg"] for r in ks]
    return {"first": fired[0], "windows": [r["window"] for r in ks], "max": max(v) if v else None,
            "mean": float(np.mean(v)) if v else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records-per-window", type=int, default=3000, help="records per stream per window")
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--workers", type=int, default=5)
    ap.add_argument("--drift", default="skew,skew@base,wander",
                    help="comma-separated cases: skew or wander; @base: threshold calibrated on the windows before "
                         "the drift (skew: the uniform ones) instead of the drifted ones")
    ap.add_argument("--base-records-per-window", type=int, default=1000,
                    help="records per stream per window of the @base cases (their drifted windows are ~60 %% "
                         "selective)")
    ap.add_argument("--after", type=int, default=2, help="skew: uniform windows before the blob")
    ap.add_argument("--selectivity", type=float, default=0.01, help="target in the drifted windows")
    ap.add_argument("--threshold", type=float, default=None, help="euclidean t (default: calibrated)")
    ap.add_argument("--trigger", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "s3j_balance.md"))
    a = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    logging.getLogger("simjoin").setLevel(logging.WARNING)
    from simjoin.config import SparkConfig
    from simjoin.core.datagen import T0_US
    from simjoin.report import render
    from simjoin.spark.session import get_spark

    spark = get_spark(SparkConfig(master="local[2]", shuffle_partitions=4, log_level="ERROR"))
    work = Path(tempfile.mkdtemp(prefix="s3j-balance-"))
    out_md = Path(a.out)
    plots = out_md.with_suffix("")
    res: dict = {"args": vars(a), "started": dt.datetime.now(dt.UTC).isoformat(), "cases": {}}
    t_all = time.perf_counter()
    # warm-up (JIT, JVM), not measured
    Sw = stream(300, 2, "none", 0, a.seed)
    run_mode(spark, work, "warm", Sw, 2, {"threshold": 0.05, "metric": "euclidean", "workers": a.workers})
    for case in filter(None, a.drift.split(",")):
        drift, _, calib = case.partition("@")
        n = a.base_records_per_window if calib == "base" else a.records_per_window
        S = stream(n, a.windows, drift, a.after, a.seed)
        if calib == "base":  # the query's threshold, set on the stream before the drift
            on = list(range(a.after)) if drift == "skew" else [0]
        else:  # calibrated on the drifted windows
            on = list(range(a.after, a.windows)) if drift == "skew" else list(range(a.windows))
        t = a.threshold if a.threshold is not None else calibrate(S, on, a.selectivity, np.random.default_rng(a.seed))
        sel = [selectivity(S, k, t) for k in range(a.windows)]
        print(f"{case}: n = {n}, t = {t:.5f}, selectivity per window {[f'{x:.4%}' for x in sel]}", flush=True)
        c: dict = {"started": dt.datetime.now(dt.UTC).isoformat(), "drift": drift, "calibration": calib or "drifted",
                   "records_per_window": n, "threshold": t,
                   "calibrated_on": on, "selectivity": sel, "modes": {}}
        outs = {}
        slug = case.replace("@", "-")
        for mode in MODES:
            cfg = {"threshold": t, "metric": "euclidean", "window": f"{WINDOW_S}s", "workers": a.workers,
                   "rebalance": mode, "rebalance_trigger": a.trigger}
            r = run_mode(spark, work, f"{slug}_{mode}", S, a.windows, cfg)
            outs[mode] = r["out"]
            rows = analyse(r["stats"], a.workers, a.trigger, T0_US)
            pdir = plots / f"{slug}_{mode}"
            shutil.rmtree(pdir, ignore_errors=True)
            files = render(r["stats"], str(pdir), title=f"s3j {case}, rebalance {mode}")
            c["modes"][mode] = {"seconds": r["seconds"], "windows": rows,
                                "goal": goal(rows, a.after if drift == "skew" else 0),
                                "plots": [os.path.relpath(f, out_md.parent) for f in files]}
            print(f"  {mode}: {sum(r['seconds']):.0f}s, max/avg per window "
                  f"{[round(x['max_avg'], 2) for x in rows]}, goal {c['modes'][mode]['goal']}", flush=True)
        c["pairs"] = compare_pairs(spark, outs)
        print(f"  pairs: {c['pairs']}", flush=True)
        res["cases"][case] = c
        if not c["pairs"]["identical"]:
            print(f"STOP: {case}: the rebalance modes gave different pair sets", flush=True)
            break
    res["seconds"] = time.perf_counter() - t_all
    prev = out_md.with_suffix(".json")
    if prev.exists():  # cases not run now keep the previous run's results (each dated)
        old = json.loads(prev.read_text())
        for case, c in old.get("cases", {}).items():
            if case not in res["cases"]:
                c.setdefault("started", old.get("started"))
                res["cases"][case] = c
                res.setdefault("kept", []).append(case)
        order = ["skew", "skew@base", "wander"]
        res["cases"] = dict(sorted(res["cases"].items(), key=lambda kv: (
            order.index(kv[0]) if kv[0] in order else len(order), kv[0])))
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    write_results(res, a, out_md)
    if not all(c["pairs"]["identical"] for c in res["cases"].values()):
        sys.exit("s3j_balance: the rebalance modes gave different pair sets (see the results)")


def _f(x: float | None, d: int = 2) -> str:
    return "-" if x is None else f"{x:.{d}f}"


def _migrated(mode: dict) -> float:
    return float(sum((r.get("decision") or {}).get("bytes_migrated", 0) for r in mode["windows"]))


def _heaviest(r: dict) -> str:
    """The units on the window's most loaded worker, as load over the average worker load."""
    out = []
    for u in r["max_worker_units"]:
        what = "workset" if u["parts"] == 1 else f"a 1/{u['parts']} part of workset"
        out.append(f"{what} ({u['partition']},{u['workset_id']}) {u['rel']:.2f}")
    return " + ".join(out) + (" + smaller ones" if r["max_worker_rest"] > 0.005 else "")


def write_results(res: dict, a: argparse.Namespace, out_md: Path) -> None:
    out_md.parent.mkdir(parents=True, exist_ok=True)
    out_md.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
    W, P = a.windows, a.workers
    md = ["# S3J workset balancing under drift (`simjoin s3j --rebalance off|balance|split`)", "",
          f"Run {res['started'][:19]}Z on this machine (2 cores, Spark local[2]), {res['seconds'] / 60:.1f} min "
          f"for the cases run then ({', '.join(c for c in res['cases'] if c not in res.get('kept', []))}; about "
          "4-5 min per case and mode: 8 micro-batches of ~30 s). Reproduce: `make bench-s3j-balance` (or "
          "`.venv/bin/python bench/s3j_balance.py [--drift skew]`; cases not run keep their earlier results).", "",
          "Setting: one 2-D stream (`gen_vectors`, uniform background) per case, 2n rows per tumbling "
          f"{WINDOW_S} s window, rows alternating between a left and a right stream (n + n per window; a "
          "two-stream join, same distribution, different records - two generator seeds would put the two blobs "
          f"apart), euclidean distance, strict `<`, P = {P} workers, {W} windows, rebalance trigger {a.trigger} "
          f"(a worker more than {a.trigger:.0%} off the average), migration cost 0. Each window is one "
          "micro-batch: its rows are appended, then one `run_pipeline` (the `simjoin s3j` code path in this "
          "process), so the assignment decided from window k's workset loads routes window k+1 (the prediction "
          "is the previous window). The three modes run on the same data.", "",
          "Columns: *DI/ΣL* is the degree of imbalance Σ|L_n - L_avg| (Definition 11) over the window's total "
          "load; *max/avg* the most loaded worker over the average, both of the realized Definition 5 loads of "
          "the window (`worker` rows); *top ws* the heaviest workset's load over the average worker load (> 1: "
          "Algorithm 1 pins it as irremovable); *p99* the window's p99 join-task seconds (`latency_p99_s`, "
          "per-worker task time); *wall* the run's seconds (all stages); *decision* what the rebalance stage "
          "decided after the window (`rebalance` rows: max/avg before → the max/avg it predicts after, units "
          "moved, worksets split, state bytes migrated; `-`: did not fire).", ""]
    for case, c in res["cases"].items():
        modes, drift, n = c["modes"], c["drift"], c["records_per_window"]
        sel = c["selectivity"]
        what = (f"uniform for windows 0-{a.after - 1}, then 90 % of the rows in one blob (sd 0.05)"
                if drift == "skew" else "80 % of the rows in a cluster (sd 0.08) whose centre moves 0.35 per "
                "window (a billiard path): each window's hot region is predicted from where it was a window earlier")
        cal = ("on the drifted windows" if c["calibration"] == "drifted" else
               "on the windows before the drift (the query's threshold, set before the data drifted; the blob "
               "then holds worksets heavier than a worker's average load)")
        when = f" (run {str(c.get('started'))[:19]}Z, kept)" if case in res.get("kept", []) else ""
        md += [f"## `{case}`: {what}{when}", "",
               f"n = {n:,} records per stream per window; threshold t = {c['threshold']:.5f}, {a.selectivity:.1%} "
               f"selectivity {cal}. Exact selectivity per window: {', '.join(f'{x:.3%}' for x in sel)}.", ""]
        p = c["pairs"]
        md += [f"Pairs: {', '.join(f'{m} {v:,}' for m, v in p['pairs'].items())}; identical pair sets "
               f"(left_id, right_id, window_start) in the three modes: **{'yes' if p['identical'] else 'NO'}** "
               f"(rows only in the mode / only in `off`: "
               f"{', '.join(f'{m} {d[0]}/{d[1]}' for m, d in p['diff_vs_off'].items())}; no duplicates: "
               f"{'yes' if p['pairs'] == p['distinct'] else 'NO'}).", ""]
        md += ["| window | pairs | " + " | ".join(f"{m}: DI/ΣL, max/avg, top ws, p99 s, wall s" for m in MODES)
               + " | balance: decision | split: decision |",
               "|---|---|" + "---|" * (len(MODES) + 2)]
        for i in range(len(modes["off"]["windows"])):
            cells = []
            for m in MODES:
                r = modes[m]["windows"][i]
                cells.append(f"{r['di_rel']:.2f}, **{r['max_avg']:.2f}**, {r['top_workset_avg']:.2f}, "
                             f"{r['p99_s']:.2f}, {modes[m]['seconds'][i]:.0f}")
            dec = []
            for m in ("balance", "split"):
                d = modes[m]["windows"][i].get("decision")
                dec.append("-" if not d or not d["fired"] else
                           f"{d['max_avg_before']:.2f} → {d['max_avg_after']:.2f}, moved {d['moved']}, "
                           f"split {d['split']}, {d['bytes_migrated'] / 1024:.0f} KiB")
            r0 = modes["off"]["windows"][i]
            md.append(f"| {r0['window']} | {r0['pairs']:,} | " + " | ".join(cells) + " | " + " | ".join(dec) + " |")
        md += ["", "Wall time: " + "; ".join(
            f"{m} {sum(modes[m]['seconds']):.0f} s ({np.mean(modes[m]['seconds']):.0f} s per window)"
            for m in MODES) + ". State migrated: " + "; ".join(
            f"{m} {_migrated(modes[m]) / 2**20:.2f} MiB" for m in ("balance", "split")) + ".", ""]
        ref = modes["split"]["goal"]
        md += [f"Realized max/avg worker load in the windows routed after the first rebalance that fired under drift "
               f"(split: after window {ref['first']}, windows {ref['windows']}; goal with splitting ≤ {GOAL}):", ""]
        for m in MODES:
            g = modes[m]["goal"]
            ws = ref["windows"] if m == "off" else g["windows"]
            v = [r["max_avg"] for r in modes[m]["windows"] if r["window"] in ws]
            worst = max(v) if v else None
            line = (f"- {m}: worst **{_f(worst)}**, mean {_f(float(np.mean(v)) if v else None)}"
                    + ("" if m == "off" else f" (first rebalance under drift after window {g['first']})"))
            if m == "split" and worst is not None:
                line += (" - goal **met**" if worst <= GOAL else
                         f" - goal **missed** by {worst - GOAL:.2f} ({worst / GOAL - 1:.0%} over)")
            if m != "off" and v:
                r = max((r for r in modes[m]["windows"] if r["window"] in ws), key=lambda r: r["max_avg"])
                line += f"; worst window {r['window']}: worker {r['max_worker']} runs {_heaviest(r)}"
            md.append(line)
        md += ["", "Plots (`simjoin.report.render` of each mode's stats table):", ""]
        for m in MODES:
            md.append(f"- {m}: " + ", ".join(f"[{Path(f).stem}]({f})" for f in modes[m]["plots"]))
        md.append("")
    text = "\n".join(md)
    marker = "## Analysis"
    old = out_md.read_text() if out_md.exists() else ""
    if marker in old:  # the hand-written analysis of an earlier run is kept (check it against the numbers)
        text += "\n" + marker + old.split(marker, 1)[1]
    out_md.write_text(text if text.endswith("\n") else text + "\n")
    print(text)


if __name__ == "__main__":
    main()
