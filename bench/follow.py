"""Benchmark: follow mode's per-record latency under a steady producer (issue 38's goal: p99 <= 2 s
at 1,000 tuples/s per stream, for S3J and ineq).

Per pipeline: a follower ``simjoin <pipeline> ... --follow --trigger 1s`` starts on two Delta
streams and catches up; then a producer appends ``--rate`` records/s per stream in pieces every
0.5 s for ``--seconds`` (ts = the wall-clock time of the append, written with deltalake, as a
user's producer would); the follower is stopped with SIGTERM once it has published the last
piece. A record's latency = the commit time of the unit that published it (its progress commit)
- its ts: the producer's write, the poll interval, the unit's stages, gate and publish.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/follow.py [--pipelines s3j,ineq]
        [--rate 1000] [--seconds 60] [--trigger 1s]

Writes bench/results/follow.md and .json. ``bench/s3j.py``'s part 4 runs :func:`latency` too.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
Q1 = "l.a < r.a AND l.b > r.b"


def pd_ts(x: Any) -> int:
    """A timestamp from a pandas/pyarrow row as epoch microseconds."""
    import pandas as pd

    return int(pd.Timestamp(x).value // 1000)


def latency(work: Path, args: list[str], piece: Callable[[np.ndarray, np.ndarray], pa.Table], rate: int,
            seconds: float, trigger: str = "1s") -> dict[str, Any]:
    """Runs ``simjoin <args> --left work/left --right work/right --output work/out --follow`` while
    appending ``rate`` records/s per stream (``piece(ids, ts_us)``: the rows of one append) for
    ``seconds``; returns the records, units and latency percentiles."""
    from deltalake import DeltaTable, write_deltalake

    sides = ("left", "right")
    sent: dict[int, list[np.ndarray]] = {0: [], 1: []}
    next_id = [0, 0]

    def produce(k: int) -> None:
        ts = np.full(k, int(time.time() * 1e6), np.int64)
        for s in (0, 1):
            ids = np.arange(next_id[s], next_id[s] + k, dtype=np.int64) + s * 1_000_000_000
            next_id[s] += k
            write_deltalake(str(work / sides[s]), piece(ids, ts), mode="append")
            sent[s].append(ts)

    produce(10)  # the streams exist before the follower starts
    log = open(work / "follow.log", "w")  # noqa: SIM115 - the follower's log, open while it runs
    p = subprocess.Popen([str(BIN / "simjoin"), *args, "--left", str(work / "left"), "--right", str(work / "right"),
                          "--output", str(work / "out"), "--follow", "--trigger", trigger],
                         stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "SIMJOIN_LOG_LEVEL": "INFO"},
                         cwd=ROOT)
    # started, caught up and polling: the producer starts then (a user's follower runs before the
    # data flows; the process's start-up is not a record's latency)
    while "following" not in (work / "follow.log").read_text():
        time.sleep(0.2)
        if p.poll() is not None:
            raise SystemExit(f"follow failed: {(work / 'follow.log').read_text()[-2000:]}")
    step = 0.5
    t_end = time.time() + seconds
    while time.time() < t_end:
        t0 = time.time()
        produce(int(rate * step))
        time.sleep(max(0.0, step - (time.time() - t0)))
    progress = str(work / "out_state" / "progress")
    drain_until = time.time() + 600
    while time.time() < drain_until:  # let the follower publish what was produced
        prog = DeltaTable(progress).to_pandas()
        last = prog.sort_values("unit").groupby("side")["max_ts"].max()
        if len(last) == 2 and all(pd_ts(last[s]) >= sent[s][-1][-1] for s in (0, 1)):
            break
        time.sleep(1)
    p.send_signal(signal.SIGTERM)
    p.wait(300)
    log.close()
    prog = DeltaTable(progress).to_pandas()
    committed = {}
    for h in DeltaTable(progress).history():
        meta = h.get("userMetadata")
        if meta:
            committed[int(json.loads(meta)["unit"])] = int(h["timestamp"]) * 1000  # ms -> us
    lat: list[np.ndarray] = []
    for s in (0, 1):
        ts = np.concatenate(sent[s])
        us = prog[prog["side"] == s].sort_values("unit")
        bounds = np.array([pd_ts(x) for x in us["max_ts"]])
        unit_of = np.searchsorted(bounds, ts, side="left")  # the first unit whose max_ts >= ts
        ok = unit_of < len(us)
        pub = np.array([committed.get(int(u), -1) for u in us["unit"]])[unit_of[ok]]
        lat.append((pub - ts[ok]) / 1e6)
    L = np.concatenate(lat)
    total = sum(len(x) for x in sent[0])
    return {"rate": rate, "seconds": seconds, "records": int(2 * total), "published": int(L.size),
            "units": int(prog["unit"].nunique()), "p50_s": float(np.percentile(L, 50)),
            "p99_s": float(np.percentile(L, 99)), "max_s": float(L.max()), "unpublished": int(2 * total - L.size),
            "started": dt.datetime.now(dt.UTC).isoformat()}


def s3j_piece(rng: np.random.Generator) -> Callable[[np.ndarray, np.ndarray], pa.Table]:
    def piece(ids: np.ndarray, ts: np.ndarray) -> pa.Table:
        X = rng.uniform(-1, 1, (len(ids), 2))
        vec = pa.ListArray.from_arrays(pa.array(np.arange(0, X.size + 1, 2, dtype=np.int32)), pa.array(X.ravel()))
        return pa.table({"id": pa.array(ids, pa.int64()),
                         "ts": pa.array(ts, pa.int64()).cast(pa.timestamp("us", tz="UTC")), "vector": vec})
    return piece


def ineq_piece(rng: np.random.Generator) -> Callable[[np.ndarray, np.ndarray], pa.Table]:
    """Correlated data, as ``simjoin generate ineq --dist correlated`` (b = a + N(0, 2))."""
    def piece(ids: np.ndarray, ts: np.ndarray) -> pa.Table:
        a = np.round(rng.uniform(0, 75_000, len(ids)) * 1024) / 1024
        return pa.table({"id": pa.array(ids, pa.int64()),
                         "ts": pa.array(ts, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                         "a": a, "b": a + rng.normal(0, 2, len(ids))})
    return piece


def s3j_threshold(sel: float, rng: np.random.Generator) -> float:
    """The angular threshold whose selectivity on uniform 2-D vectors is ``sel``."""
    from simjoin.core.metric import pairwise

    A, B = rng.uniform(-1, 1, (3000, 2)), rng.uniform(-1, 1, (3000, 2))
    return float(np.quantile(pairwise("angular", A, B), sel))


def run_one(pipeline: str, a: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(a.seed)
    if pipeline == "s3j":
        t = s3j_threshold(a.selectivity, np.random.default_rng(11))
        args, piece = ["s3j", "--threshold", repr(t), "--metric", "angular", "--window", "60s",
                       "--workers", "2"], s3j_piece(rng)
        what = f"angular, selectivity {a.selectivity:.1%}, a 60 s window"
    else:
        args, piece = ["ineq", "--where", Q1, "--window", "10s"], ineq_piece(rng)
        what = f"`{Q1}`, correlated data, a 10 s window"
    row = measured(pipeline, args, piece, a.rate, a.seconds, a.trigger)
    row.update(pipeline=pipeline, what=what)
    return row


def measured(label: str, args: list[str], piece: Callable[[np.ndarray, np.ndarray], pa.Table], rate: int,
             seconds: float, trigger: str = "1s") -> dict[str, Any]:
    """:func:`latency` in a fresh folder, removed after; prints one line labelled ``label``."""
    work = Path(tempfile.mkdtemp(prefix="follow-bench-"))
    try:
        row = latency(work, args, piece, rate, seconds, trigger)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"follow {label}: {row['records']:,} records in {row['units']} units, latency p50 {row['p50_s']:.2f}s "
          f"p99 {row['p99_s']:.2f}s", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipelines", default="s3j,ineq")
    ap.add_argument("--rate", type=int, default=1000, help="records/s per stream")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--trigger", default="1s")
    ap.add_argument("--selectivity", type=float, default=0.01, help="S3J's")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--goal", type=float, default=2.0, help="p99 latency goal, seconds")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "follow.md"))
    a = ap.parse_args()
    t0 = time.time()
    rows = [run_one(p, a) for p in a.pipelines.split(",")]
    lines = [
        "# Follow mode: per-record latency under a steady producer",
        "",
        f"Run {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on this machine (2 cores), `bench/follow.py --pipelines "
        f"{a.pipelines} --rate {a.rate} --seconds {a.seconds:g} --trigger {a.trigger}` "
        f"({(time.time() - t0) / 60:.1f} min). One follower per pipeline (`simjoin <pipeline> --follow --trigger "
        f"{a.trigger}`) on two Delta streams; once it has caught up, a producer appends {a.rate:,} records/s per "
        "stream with deltalake, a piece every 0.5 s, ts = the append's wall-clock time. Latency of a record = the "
        "commit time of the unit that published it - its ts (the poll interval, the unit's stages, the gate and "
        "publish).",
        "",
        "| pipeline | workload | records | units | p50 (s) | p99 (s) | max (s) | not published |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['pipeline']} | {r['what']} | {r['records']:,} | {r['units']} | {r['p50_s']:.2f} | "
                     f"{r['p99_s']:.2f} | {r['max_s']:.2f} | {r['unpublished']} |")
    lines += ["", f"Goal (issue 38): p99 <= {a.goal:g} s at 1,000 records/s per stream:", ""]
    for r in rows:
        lines.append(f"- {r['pipeline']}: p99 {r['p99_s']:.2f} s: {'met' if r['p99_s'] <= a.goal else 'missed'}")
    Path(a.out).write_text("\n".join(lines) + "\n")
    Path(a.out).with_suffix(".json").write_text(json.dumps(rows, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
