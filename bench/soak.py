"""Soak: every stream pipeline's follow mode for thousands of micro-batches under a steady
producer, killed with SIGKILL and restarted every few hundred units (issue "Runs for days").

Per pipeline: a producer appends ``--rows`` records per stream every ``--every`` seconds (ts = the
wall-clock time of the append, written with deltalake as a user's producer would); a follower
``simjoin <pipeline> ... --follow --trigger T --maintain-every N`` publishes a unit per poll; every
``--kill-every`` units it is killed (SIGKILL, at whatever point of a unit it is) and started again.
Recorded while it runs: each unit's latency (publish time - its newest record's ts, from the
follower's log), the files and bytes of every table of the output, and the follower's RSS.
At the end the producer stops, the follower catches up and stops (SIGTERM), and the output is
checked pair for pair against a brute force over everything produced, with no pair twice.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/soak.py [--pipelines ineq,s3j,hypercube,s2j]
        [--units 2000] [--kill-every 300] [--maintain-every 50] [--rows 10] [--every 0.2]

Writes bench/results/soak.md, soak.json and the plots (soak_<pipeline>.png, with
``simjoin.report``'s plotting). The goals: the output equals the brute force; the median latency
of the last 100 units within 1.2x of units 50-150; the files of the output and its side tables
bounded by a constant; the follower's memory flat.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
Q1 = "l.a < r.a AND l.b > r.b"
WINDOW_S = 10.0
S3J_T = 0.05
#: the inputs keep 10 minutes of log and of removed files' tombstones: the producer's own
#: maintenance (compaction, a checkpoint, log cleanup every ``--input-maintain-every`` appends)
#: keeps its appends from slowing down as its tables grow, as a producer running for days must;
#: the follower is never 10 minutes behind, so it never misses a commit
INPUT_CONFIG = {"delta.logRetentionDuration": "interval 10 minutes",
                "delta.deletedFileRetentionDuration": "interval 10 minutes"}
UNIT_LINE = re.compile(r"(\w+): unit (\d+): (\d+) records, published ([\d.]+)s after its newest")


def piece(pipeline: str, ids: np.ndarray, ts_us: np.ndarray, rng: np.random.Generator) -> pa.Table:
    n = len(ids)
    cols: dict[str, Any] = {"id": pa.array(ids, pa.int64()),
                            "ts": pa.array(ts_us, pa.int64()).cast(pa.timestamp("us", tz="UTC"))}
    if pipeline == "ineq":
        a = np.round(rng.uniform(0, 1000, n))
        cols.update(a=a, b=a + np.round(rng.normal(0, 20, n)))  # ties on a and b
    elif pipeline == "s3j":
        X = rng.uniform(0, 1, (n, 2))
        cols["vector"] = pa.ListArray.from_arrays(pa.array(np.arange(0, 2 * n + 1, 2, dtype=np.int32)),
                                                  pa.array(X.ravel()))
    else:  # hypercube, s2j: skewed keys
        cols["k"] = pa.array(np.minimum(rng.zipf(1.5, n), 50).astype(np.int64))
    return pa.table(cols)


def args_of(pipeline: str) -> list[str]:
    if pipeline == "ineq":
        return ["ineq", "--where", Q1, "--window", f"{WINDOW_S:g}s"]
    if pipeline == "s3j":
        return ["s3j", "--threshold", str(S3J_T), "--metric", "euclidean", "--window", f"{WINDOW_S:g}s",
                "--workers", "2"]
    if pipeline == "s2j":  # one equality task; its pairs in <output>/same_k
        return ["s2j", "run", "--task", "same_k: l.k = r.k", "--window", f"{WINDOW_S:g}s"]
    return ["hypercube", "--key", "k", "--window", f"{WINDOW_S:g}s", "--workers", "4"]


def pairs_table(pipeline: str, work: Path) -> str:
    return str(work / "out" / "same_k") if pipeline == "s2j" else str(work / "out")


def progress_table(pipeline: str, work: Path) -> str:
    return str(work / "out" / "_state" / "progress") if pipeline == "s2j" else str(work / "out_state" / "progress")


def brute_force(pipeline: str, rows: list[pa.Table]) -> list[tuple[int, ...]]:
    """Every pair of the whole streams (``rows``: everything produced, per side)."""
    L, R = rows
    tl = L.column("ts").cast(pa.int64()).to_numpy()
    tr = R.column("ts").cast(pa.int64()).to_numpy()
    order = np.argsort(tr, kind="stable")
    tr_s = tr[order]
    w = round(WINDOW_S * 1e6)
    out: list[tuple[int, ...]] = []
    il, ir = L.column("id").to_numpy(), R.column("id").to_numpy()
    cols = {c: (L.column(c).to_numpy(), R.column(c).to_numpy()) for c in ("a", "b", "k") if c in L.column_names}
    if pipeline == "s3j":
        XL = np.stack(L.column("vector").to_numpy(zero_copy_only=False))
        XR = np.stack(R.column("vector").to_numpy(zero_copy_only=False))
        wl = tl // w
    for i in range(len(il)):
        if pipeline == "s3j":  # tumbling windows: the same window, distance below the threshold
            lo, hi = np.searchsorted(tr_s, wl[i] * w), np.searchsorted(tr_s, (wl[i] + 1) * w)
            c = order[lo:hi]
            c = c[np.linalg.norm(XR[c] - XL[i], axis=1) < S3J_T]
            out += [(int(il[i]), int(ir[j]), int(wl[i] * w)) for j in c]
            continue
        lo, hi = np.searchsorted(tr_s, tl[i] - w, "right"), np.searchsorted(tr_s, tl[i] + w, "left")
        c = order[lo:hi]
        if pipeline == "ineq":
            c = c[(cols["a"][0][i] < cols["a"][1][c]) & (cols["b"][0][i] > cols["b"][1][c])]
        else:
            c = c[cols["k"][1][c] == cols["k"][0][i]]
        out += [(int(il[i]), int(ir[j])) for j in c]
    return sorted(out)


def got_pairs(pipeline: str, out: str) -> list[tuple[int, ...]]:
    from deltalake import DeltaTable

    t = DeltaTable(out).to_pyarrow_table()
    cols = [t.column("left_id").to_pylist(), t.column("right_id").to_pylist()]
    if pipeline == "s3j":
        cols.append([int(x) for x in t.column("window_start").cast(pa.int64()).to_pylist()])
    return sorted(zip(*cols, strict=True))


def files_by_table(work: Path) -> dict[str, tuple[int, int]]:
    """(files, bytes) of the output and every side table (the inputs excluded)."""
    from simjoin.runtime.maintenance import disk_usage

    got: dict[str, tuple[int, int]] = {}
    tops = sorted(p for p in work.iterdir() if p.name.startswith("out") and p.is_dir())
    if (work / "out").is_dir() and not (work / "out" / "_delta_log").is_dir():  # a directory output (S2J)
        tops = [p for p in tops if p.name != "out"] + sorted(p for p in (work / "out").iterdir() if p.is_dir())
    for top in tops:
        subs = [p for p in top.iterdir() if p.is_dir() and not p.name.startswith("_delta")] \
            if top.name.endswith(("_state", "_work")) else [top]
        for p in subs:
            got[str(p.relative_to(work))] = disk_usage(str(p))
    return got


def live_tables(output: str) -> dict[str, tuple[int, int]]:
    """Per Delta table the output's manifest names (its layout and what it owns; a folder: the
    tables in it): its live data files and the commits past its log's last checkpoint (what
    maintenance must keep bounded). Keyed by the path under the output's folder."""
    from deltalake import DeltaTable

    from simjoin.runtime import manifest

    m = manifest.read(output)
    paths = {Path(p) for p in ([*m.layout.values(), *m.owned] if m else [])}
    tables = sorted({t for p in paths if p.is_dir()
                     for t in ([p] if (p / "_delta_log").is_dir() else [c for c in p.iterdir()
                                                                        if (c / "_delta_log").is_dir()])})
    got: dict[str, tuple[int, int]] = {}
    for t in tables:
        log_dir = t / "_delta_log"
        latest = max(int(f.name[:20]) for f in log_dir.glob("*.json"))
        ck = log_dir / "_last_checkpoint"
        at = json.loads(ck.read_text())["version"] if ck.exists() else -1
        got[str(t.relative_to(Path(output).parent))] = (len(DeltaTable(str(t)).file_uris()), latest - at)
    return got


def rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def soak(pipeline: str, a: argparse.Namespace, work: Path) -> dict[str, Any]:
    from deltalake import DeltaTable, write_deltalake

    rng = np.random.default_rng(a.seed)
    produced: list[list[pa.Table]] = [[], []]
    stop = threading.Event()
    next_id = [0, 10**9]
    last_ts = [0]
    side_max = [0, 0]  # each stream's newest ts

    appends: list[tuple[float, float]] = []  # (time since the start, seconds the append took)
    t_start = time.time()

    failed: list[BaseException] = []  # the producer's error: the soak stops at once with it

    def produce() -> None:
        try:
            _produce()
        except BaseException as e:
            failed.append(e)
            raise

    def _produce() -> None:
        n = 0
        while not stop.is_set():
            for s, side in enumerate(("left", "right")):
                now = max(int(time.time() * 1e6), last_ts[0] + 1)  # ts: the wall clock at the append
                ids = np.arange(next_id[s], next_id[s] + a.rows)
                next_id[s] += a.rows
                t = piece(pipeline, ids, now + np.arange(a.rows), rng)
                t0 = time.time()
                write_deltalake(str(work / side), t, mode="append", configuration=INPUT_CONFIG if n == 0 else None)
                appends.append((t0 - t_start, time.time() - t0))
                produced[s].append(t)
                last_ts[0] = now + a.rows
                side_max[s] = now + a.rows - 1
            n += 1
            if a.input_maintain_every and n % a.input_maintain_every == 0:
                for side in ("left", "right"):  # what a producer running for days does to its tables
                    dt_ = DeltaTable(str(work / side))
                    dt_.optimize.compact()
                    dt_ = DeltaTable(str(work / side))
                    dt_.create_checkpoint()
                    dt_.cleanup_metadata()
            stop.wait(a.every)

    env = {**os.environ, "SIMJOIN_LOG_LEVEL": "INFO", "PYSPARK_PYTHON": sys.executable,
           "SIMJOIN_RETENTION_CHECK": "0", "SIMJOIN_RETENTION": a.retention,
           "SIMJOIN_WAREHOUSE": str(work / "warehouse")}
    cmd = [str(BIN / "simjoin"), *args_of(pipeline), "--left", str(work / "left"), "--right", str(work / "right"),
           "--output", str(work / "out"), "--follow", "--trigger", a.trigger, "--maintain-every",
           str(a.maintain_every)]
    units: dict[int, float] = {}
    samples: list[dict[str, Any]] = []
    kills: list[int] = []
    logs: list[Path] = []

    def start() -> subprocess.Popen:
        log = work / f"follow-{len(logs)}.log"
        logs.append(log)
        return subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env, cwd=str(work))

    def scan() -> None:
        for log in logs:
            for m in UNIT_LINE.finditer(log.read_text(errors="replace")):
                units.setdefault(int(m[2]), float(m[4]))

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    p = start()
    t0 = time.time()
    next_kill = a.kill_every
    last_sample = 0.0
    try:
        while len(units) < a.units:
            time.sleep(0.5)
            scan()
            if failed:
                raise SystemExit(f"{pipeline}: the producer failed: {failed[0]!r}") from failed[0]
            if p.poll() is not None:
                raise SystemExit(f"{pipeline}: the follower exited ({p.returncode}): "
                                 f"{logs[-1].read_text()[-3000:]}")
            if time.time() - last_sample >= a.sample_s:
                last_sample = time.time()
                samples.append({"t": last_sample - t0, "units": len(units), "rss_mb": rss_mb(p.pid),
                                "tables": files_by_table(work)})
            if a.kill_every and len(units) >= next_kill:
                p.send_signal(signal.SIGKILL)
                p.wait()
                kills.append(len(units))
                next_kill += a.kill_every
                p = start()
            if time.time() - t0 > a.max_minutes * 60:
                print(f"{pipeline}: stopped at {len(units)} units after {a.max_minutes} minutes", flush=True)
                break
        stop.set()
        producer.join()
        # caught up: the follower has read every commit, published it (an idle poll follows)
        deadline = time.time() + 300
        while time.time() < deadline:
            time.sleep(1.0)
            try:  # the last unit's rows hold each stream's committed max ts
                import pyarrow.compute as pc

                prog = DeltaTable(progress_table(pipeline, work)).to_pyarrow_table()
                last = prog.filter(pc.equal(prog.column("unit"), pc.max(prog.column("unit"))))
                mx = dict(zip(last.column("side").to_pylist(), last.column("max_ts").cast(pa.int64()).to_pylist(),
                              strict=True))
                if len(mx) == 2 and all(mx[s] >= side_max[s] for s in (0, 1)):  # each side's newest row
                    break
            except Exception:  # a commit in flight
                pass
        p.send_signal(signal.SIGTERM)
        p.wait(300)
    finally:
        stop.set()
        if p.poll() is None:
            p.kill()
    scan()
    samples.append({"t": time.time() - t0, "units": len(units), "rss_mb": None, "tables": files_by_table(work)})
    got = got_pairs(pipeline, pairs_table(pipeline, work))
    ref = brute_force(pipeline, [pa.concat_tables(produced[0]), pa.concat_tables(produced[1])])
    lat = [units[u] for u in sorted(units)]
    early, late = lat[50:150], lat[-100:]
    per_table = {k: [s["tables"].get(k, (0, 0))[0] for s in samples] for k in samples[-1]["tables"]}
    return {"pipeline": pipeline, "units": len(units), "minutes": (time.time() - t0) / 60, "kills": kills,
            "records": sum(t.num_rows for t in produced[0]) + sum(t.num_rows for t in produced[1]),
            "pairs": len(got), "brute_force": len(ref), "exact": got == ref, "repeated": len(got) - len(set(got)),
            "latency": lat, "median_50_150": float(np.median(early)) if early else None,
            "median_last_100": float(np.median(late)) if late else None,
            "samples": samples, "live": live_tables(pairs_table(pipeline, work) if pipeline != "s2j"
                                                    else str(work / "out")),
            # the producer's appends (each side's write_deltalake), over the first and the last tenth
            "append_first_s": float(np.median([d for _, d in appends[:max(1, len(appends) // 10)]])),
            "append_last_s": float(np.median([d for _, d in appends[-max(1, len(appends) // 10):]])),
            "files_last": {k: v[-1] for k, v in per_table.items()},
            "files_max_second_half": {k: max(v[len(v) // 2:]) for k, v in per_table.items()},
            # the follower's memory once it is warm (units 50-150), and at the end
            "rss_first_mb": max((s["rss_mb"] for s in samples if s["rss_mb"] and 50 <= s["units"] <= 150),
                                default=None),
            "rss_last_mb": next((s["rss_mb"] for s in reversed(samples) if s["rss_mb"]), None),
            "args": {k: v for k, v in vars(a).items()}}


def plot(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    ax[0].plot(range(len(r["latency"])), r["latency"], ".", ms=2)
    for k in r["kills"]:
        ax[0].axvline(k, color="red", lw=0.5)
    ax[0].set(title=f"{r['pipeline']}: latency per unit (red: SIGKILL)", xlabel="unit", ylabel="s")
    s = [x for x in r["samples"] if x["tables"]]
    total = [sum(n for n, _ in x["tables"].values()) for x in s]
    ax[1].plot([x["units"] for x in s], total, label="all tables")
    key = "out/same_k" if r["pipeline"] == "s2j" else "out"
    ax[1].plot([x["units"] for x in s], [x["tables"].get(key, (0, 0))[0] for x in s], label="output")
    ax[1].set(title="files of the output and its side tables", xlabel="units")
    ax[1].legend()
    m = [x for x in r["samples"] if x["rss_mb"]]
    ax[2].plot([x["units"] for x in m], [x["rss_mb"] for x in m], ".", ms=3)
    ax[2].set(title="follower RSS (MB)", xlabel="units")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def write_md(results: list[dict[str, Any]], out: Path) -> None:
    lines = ["# Soak: follow mode for thousands of units, with SIGKILL and restarts", "",
             "`bench/soak.py`: a producer appends to two Delta streams every "
             f"{results[0]['args']['every']} s; `simjoin <pipeline> --follow --trigger {results[0]['args']['trigger']} "
             f"--maintain-every {results[0]['args']['maintain_every']}` (retention "
             f"{results[0]['args']['retention']}, `SIMJOIN_RETENTION_CHECK=0`) publishes each poll as a unit and is "
             f"killed with SIGKILL every {results[0]['args']['kill_every']} units. Latency = publish time - the "
             "newest record's ts (its append time). Files: every file under the output and its side tables "
             "(data, log, checkpoint offsets, markers).", "",
             "| pipeline | units | kills | records | pairs = brute force | repeated | latency median, units 50-150 | "
             "last 100 | ratio | files at the end | max files, 2nd half | RSS units 50-150 -> last | "
             "producer append, first -> last tenth |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    def sec(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f} s"

    for r in results:
        ratio = (f"{r['median_last_100'] / r['median_50_150']:.2f}x" if r["median_50_150"] and r["median_last_100"]
                 else "-")
        lines.append(f"| {r['pipeline']} | {r['units']} | {len(r['kills'])} | {r['records']:,} | "
                     f"{r['pairs']:,} {'=' if r['exact'] else '!='} {r['brute_force']:,} | {r['repeated']} | "
                     f"{sec(r['median_50_150'])} | {sec(r['median_last_100'])} | {ratio} | "
                     f"{sum(r['files_last'].values())} | {sum(r['files_max_second_half'].values())} | "
                     f"{r['rss_first_mb'] or 0:.0f} -> {r['rss_last_mb'] or 0:.0f} MB | "
                     f"{r['append_first_s']:.3f} -> {r['append_last_s']:.3f} s |")
    lines += ["", "Files per table at the end:", ""]
    for r in results:
        lines.append(f"- **{r['pipeline']}**: " + ", ".join(f"`{k}` {n}" for k, n in r["files_last"].items()))
    lines += ["", "Live data files and commits past the last log checkpoint per table at the end (by the "
              "output's manifest; maintenance keeps both bounded):", ""]
    for r in results:
        lines.append(f"- **{r['pipeline']}**: " + ", ".join(f"`{k}` {f} files, {c} commits"
                                                          for k, (f, c) in r["live"].items()))
    lines += [""] + [f"![{r['pipeline']}](soak_{r['pipeline']}.png)" for r in results] + [""]
    out.write_text("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipelines", default="ineq,s3j,hypercube,s2j")
    ap.add_argument("--units", type=int, default=2000)
    ap.add_argument("--kill-every", type=int, default=300)
    ap.add_argument("--maintain-every", type=int, default=50)
    ap.add_argument("--retention", default="1m")
    ap.add_argument("--rows", type=int, default=10)
    ap.add_argument("--every", type=float, default=0.2)
    ap.add_argument("--input-maintain-every", type=int, default=100,
                    help="the producer compacts, checkpoints and cleans up its input tables every N appends "
                         "(0: never; its appends then slow down as the inputs grow)")
    ap.add_argument("--trigger", default="200ms")
    ap.add_argument("--sample-s", type=float, default=5.0)
    ap.add_argument("--max-minutes", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--results", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args()
    res_dir = Path(a.results)
    res_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for pipeline in a.pipelines.split(","):
        work = Path(tempfile.mkdtemp(prefix=f"soak-{pipeline}-"))
        r = soak(pipeline, a, work)
        results.append(r)
        (res_dir / "soak.json").write_text(json.dumps(results, default=str))
        plot(r, res_dir / f"soak_{pipeline}.png")
        print(f"soak {pipeline}: {r['units']} units, {len(r['kills'])} kills, exact {r['exact']}, latency "
              f"{r['median_50_150']} -> {r['median_last_100']}, files {sum(r['files_last'].values())}",
              flush=True)
    (res_dir / "soak.json").write_text(json.dumps(results, default=str))
    write_md(results, res_dir / "soak.md")


if __name__ == "__main__":
    main()
