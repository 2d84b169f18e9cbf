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
        [--windows 8] [--workers 5] [--drift skew,wander] [--out bench/results/s3j_balance.md]
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
    """Euclidean threshold at quantile ``sel`` of left x right distances in ``windows`` (a sample)."""
    from simjoin.core.metric import pairwise

    m = np.isin(S["win"], windows)
    L = S["X"][m & (S["side"] == 0)]
    R = S["X"][m & (S["side"] == 1)]
    L = L[rng.choice(len(L), min(len(L), 2000), replace=False)]
    R = R[rng.choice(len(R), min(len(R), 2000), replace=False)]
    return float(np.quantile(pairwise("euclidean", L, R), sel))


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
        row = {"window": k, "unit": unit, "records": int(g["records"].sum()), "pairs": int(g["result_pairs"].sum()),
               "load": float(L.sum()), "worker_load": L.tolist(), "di": imbalance(L),
               "di_rel": imbalance(L) / L.sum() if L.sum() else 0.0, "max_avg": float(L.max() / avg) if avg else 1.0,
               "p99_s": float(g["latency_p99_s"].max()), "max_s": float(g["latency_max_s"].max()),
               "worksets": int(len(wl)), "top_workset_avg": float(wl.max() / avg) if avg and len(wl) else 0.0}
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
    ap.add_argument("--drift", default="skew,wander", help="comma-separated: skew, wander")
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
    for drift in filter(None, a.drift.split(",")):
        S = stream(a.records_per_window, a.windows, drift, a.after, a.seed)
        drifted = list(range(a.after, a.windows)) if drift == "skew" else list(range(a.windows))
        t = a.threshold if a.threshold is not None else calibrate(S, drifted, a.selectivity,
                                                                  np.random.default_rng(a.seed))
        sel = [selectivity(S, k, t) for k in range(a.windows)]
        print(f"{drift}: t = {t:.5f}, selectivity per window {[f'{s:.4%}' for s in sel]}", flush=True)
        case: dict = {"threshold": t, "selectivity": sel, "modes": {}}
        outs = {}
        for mode in MODES:
            cfg = {"threshold": t, "metric": "euclidean", "window": f"{WINDOW_S}s", "workers": a.workers,
                   "rebalance": mode, "rebalance_trigger": a.trigger}
            r = run_mode(spark, work, f"{drift}_{mode}", S, a.windows, cfg)
            outs[mode] = r["out"]
            rows = analyse(r["stats"], a.workers, a.trigger, T0_US)
            pdir = plots / f"{drift}_{mode}"
            shutil.rmtree(pdir, ignore_errors=True)
            files = render(r["stats"], str(pdir), title=f"s3j {drift}, rebalance {mode}")
            case["modes"][mode] = {"seconds": r["seconds"], "windows": rows, "goal": goal(rows, a.after),
                                   "plots": [os.path.relpath(f, out_md.parent) for f in files]}
            print(f"  {mode}: {sum(r['seconds']):.0f}s, max/avg per window "
                  f"{[round(x['max_avg'], 2) for x in rows]}, goal {case['modes'][mode]['goal']}", flush=True)
        case["pairs"] = compare_pairs(spark, outs)
        print(f"  pairs: {case['pairs']}", flush=True)
        res["cases"][drift] = case
    res["seconds"] = time.perf_counter() - t_all
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    write_results(res, a, out_md)
    if not all(c["pairs"]["identical"] for c in res["cases"].values()):
        sys.exit("s3j_balance: the rebalance modes gave different pair sets (see the results)")


def _f(x: float | None, d: int = 2) -> str:
    return "-" if x is None else f"{x:.{d}f}"


def write_results(res: dict, a: argparse.Namespace, out_md: Path) -> None:
    out_md.parent.mkdir(parents=True, exist_ok=True)
    out_md.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
    n, W, P = a.records_per_window, a.windows, a.workers
    md = ["# S3J workset balancing under drift (`simjoin s3j --rebalance off|balance|split`)", "",
          f"Run {res['started'][:19]}Z on this machine (2 cores, Spark local[2]), {res['seconds'] / 60:.1f} min "
          "in all. Reproduce: `make bench-s3j-balance` (or `.venv/bin/python bench/s3j_balance.py`).", "",
          f"Setting: one 2-D stream (`gen_vectors`, uniform background), {2 * n:,} rows per tumbling "
          f"{WINDOW_S} s window, rows alternating between a left and a right stream ({n:,} + {n:,} per window; "
          "a two-stream join, same distribution, different records), euclidean distance, strict `<`, "
          f"P = {P} workers, {W} windows, rebalance trigger {a.trigger} (a worker more than {a.trigger:.0%} off "
          "the average), migration cost 0. Each window is one micro-batch: its rows are appended, then one "
          "`run_pipeline` (the `simjoin s3j` code path in this process), so the assignment decided from "
          "window k's workset loads routes window k+1 (the prediction is the previous window).", "",
          "Columns: *DI/ΣL* is the degree of imbalance Σ|L_n - L_avg| (Definition 11) over the window's "
          "total load; *max/avg* the most loaded worker over the average, both from the realized Definition 5 "
          "loads of the window (`worker` rows); *top workset* the heaviest workset's load over the average "
          "worker load (> 1: Algorithm 1 pins it, irremovable); *p99* the window's p99 join-task seconds "
          "(`latency_p99_s`, per-worker task time; 2 cores run 5 worker tasks); *wall* the run's seconds; "
          "*decision* the rebalance the run took after the window (`rebalance` rows: max/avg of the loads it "
          "predicts after the moves, units moved, worksets split, state bytes migrated; `-` when it did not "
          "fire).", ""]
    for drift, c in res["cases"].items():
        modes = c["modes"]
        sel = c["selectivity"]
        md += [f"## Drift `{drift}`", "",
               (f"Uniform for windows 0-{a.after - 1}, then 90 % of the rows in one blob (sd 0.05). "
                if drift == "skew" else
                "80 % of the rows in a cluster (sd 0.08) whose centre moves 0.35 per window (a billiard path), "
                "so each window's hot region is predicted from where it was one window earlier. "),
               f"Threshold t = {c['threshold']:.5f} (about {a.selectivity:.1%} selectivity in the drifted windows); "
               f"exact selectivity per window: {', '.join(f'{s:.3%}' for s in sel)}.", ""]
        p = c["pairs"]
        md += [f"Pairs: {', '.join(f'{m} {v:,}' for m, v in p['pairs'].items())}; identical pair sets "
               f"(left_id, right_id, window_start) across the three modes: **{'yes' if p['identical'] else 'NO'}** "
               f"(symmetric difference against `off`: "
               f"{', '.join(f'{m} {d[0]}/{d[1]}' for m, d in p['diff_vs_off'].items())}).", ""]
        md += ["| window | pairs | " + " | ".join(f"{m}: DI/ΣL, max/avg, top workset, p99 s, wall s" for m in MODES)
               + " | balance: decision | split: decision |",
               "|---|---|" + "---|" * (len(MODES) + 2)]
        for i in range(len(modes["off"]["windows"])):
            cells = []
            for m in MODES:
                r = modes[m]["windows"][i]
                cells.append(f"{r['di_rel']:.2f}, **{r['max_avg']:.2f}**, {r['top_workset_avg']:.2f}, "
                             f"{r['p99_s']:.2f}, {modes[m]['seconds'][i]:.1f}")
            dec = []
            for m in ("balance", "split"):
                d = modes[m]["windows"][i].get("decision")
                dec.append("-" if not d or not d["fired"] else
                           f"{d['max_avg_before']:.2f} → {d['max_avg_after']:.2f}, moved {d['moved']}, "
                           f"split {d['split']}, {d['bytes_migrated'] / 1024:.0f} KiB")
            r0 = modes["off"]["windows"][i]
            md.append(f"| {r0['window']} | {r0['pairs']:,} | " + " | ".join(cells) + " | " + " | ".join(dec) + " |")
        md += ["", "Totals: " + "; ".join(
            f"{m} {sum(modes[m]['seconds']):.0f} s wall, bytes migrated "
            f"{sum((r.get('decision') or {}).get('bytes_migrated', 0) for r in modes[m]['windows']) / 2**20:.2f} MiB"
            for m in MODES), ""]
        md += ["Realized max/avg worker load in the windows routed after the first rebalance that fired under "
               f"drift (goal with splitting: ≤ {GOAL}):", ""]
        for m in MODES:
            g = modes[m]["goal"]
            ref = modes["split"]["goal"]
            if m == "off":
                ws = ref["windows"]
                v = [modes["off"]["windows"][k]["max_avg"] for k in range(len(modes["off"]["windows"]))
                     if modes["off"]["windows"][k]["window"] in ws]
                md.append(f"- off (same windows as split: {ws}): worst {_f(max(v) if v else None)}, "
                          f"mean {_f(float(np.mean(v)) if v else None)}")
                continue
            ok = g["max"] is not None and g["max"] <= GOAL
            md.append(f"- {m}: first rebalance under drift after window {g['first']}, windows {g['windows']}: "
                      f"worst {_f(g['max'])}, mean {_f(g['mean'])}" + (f" - goal {'met' if ok else 'MISSED'}"
                                                                     if m == "split" else ""))
        md += ["", "Plots (`simjoin.report.render` of each mode's stats table):", ""]
        for m in MODES:
            md.append(f"- {m}: " + ", ".join(f"[{Path(f).stem}]({f})" for f in modes[m]["plots"]))
        md.append("")
    text = "\n".join(md) + "\n"
    out_md.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
