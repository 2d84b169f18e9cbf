"""Benchmark: one `simjoin ineq` micro-batch as a user runs it, against a fresh DuckDB process.

Workload (issue 38's first goal): two streams, Q1 ``l.a < r.a AND l.b > r.b`` on correlated data
(a uniform in [0, 75000), b = a + N(0, 2), as ``simjoin generate ineq --dist correlated``), a 10 s
time window; each micro-batch appends 25,000 tuples per stream spread over the next 10 s.

Per micro-batch, after its rows are appended to both Delta inputs (not timed):

* **ours (in process):** ``simjoin ineq --left L --right R --output O --where Q1 --window 10s``, one
  process, timed from its start to its exit (the default: a unit under ``SIMJOIN_LOCAL_UNIT_ROWS``
  runs on the in-process executor);
* **ours (Spark):** the same command on another output with ``SIMJOIN_LOCAL_UNIT_ROWS=0`` (every
  unit on the Spark executor, the JVM start included);
* **anchor:** a fresh Python process that imports DuckDB and deltalake, reads both inputs' rows of
  the window (``ts >= start - W``) with deltalake, joins the micro-batch in DuckDB (IEJoin on the
  two inequalities, the window as a band, at least one tuple new) and appends the pairs to a Delta
  table with deltalake.

The pairs of each micro-batch (those whose later tuple is in it) must be the same in all three.
Goal: the median of micro-batches 2-4 within 5x of the anchor.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/ineq_microbatch.py [--batches 4] [--rows 25000]

Writes bench/results/ineq_microbatch.md and .json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
Q1 = "l.a < r.a AND l.b > r.b"
W_S = 10

ANCHOR = r'''
import sys, time
t0 = time.perf_counter()
import duckdb, pyarrow as pa
from deltalake import DeltaTable, write_deltalake
left, right, out, start_us, end_us, w_us = sys.argv[1:7]
start_us, end_us, w_us = int(start_us), int(end_us), int(w_us)
lo = pa.scalar(start_us - w_us, pa.timestamp("us", tz="UTC"))
def read(p):
    t = DeltaTable(p).to_pyarrow_table(columns=["id", "ts", "a", "b"], filters=[("ts", ">=", lo)])
    return t.append_column("us", t.column("ts").cast(pa.int64()))
L, R = read(left), read(right)
con = duckdb.connect()
con.execute("SET threads TO 2")
q = f"""SELECT l.id AS left_id, r.id AS right_id, greatest(l.ts, r.ts) AS ts FROM L l JOIN R r
        ON l.a < r.a AND l.b > r.b AND (r.us - l.us) < {w_us} AND (l.us - r.us) < {w_us}
        WHERE greatest(l.us, r.us) >= {start_us} AND greatest(l.us, r.us) < {end_us}"""
pairs = con.execute(q).to_arrow_table()
write_deltalake(out, pairs, mode="append")
print(pairs.num_rows, time.perf_counter() - t0)
'''


def stream(rng: np.random.Generator, n: int, k: int, base: int) -> pa.Table:
    a = np.round(rng.uniform(0, 75_000, n) * 1024) / 1024
    b = a + rng.normal(0, 2, n)
    us = np.sort(rng.integers(0, W_S * 1_000_000, n)) + k * W_S * 1_000_000
    ts = pa.array(int(T0.timestamp() * 1_000_000) + us).cast(pa.timestamp("us", tz="UTC"))
    return pa.table({"id": pa.array(np.arange(n, dtype=np.int64) + base + k * n), "ts": ts, "a": a, "b": b})


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    secs = time.perf_counter() - t0
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed:\n{p.stderr[-3000:]}")
    return secs, p.stdout.strip().splitlines()[-1]


def pairs_of(path: str, start_us: int, end_us: int) -> set[tuple[int, int]]:
    from deltalake import DeltaTable

    t = DeltaTable(path).to_pyarrow_table()
    us = np.asarray(t.column("ts").cast(pa.int64()).to_numpy(), np.int64)
    m = (us >= start_us) & (us < end_us)
    return set(zip(np.asarray(t.column("left_id"))[m].tolist(), np.asarray(t.column("right_id"))[m].tolist(),
                   strict=True))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--rows", type=int, default=25_000)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    from deltalake import write_deltalake

    rng = np.random.default_rng(a.seed)
    work = Path(tempfile.mkdtemp(prefix="ineq-mb-"))
    left, right = str(work / "left"), str(work / "right")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    rows = []
    t_start = time.time()
    for k in range(a.batches):
        write_deltalake(left, stream(rng, a.rows, k, 0), mode="append")
        write_deltalake(right, stream(rng, a.rows, k, 10_000_000), mode="append")
        start_us = int(T0.timestamp() * 1_000_000) + k * W_S * 1_000_000
        end_us = start_us + W_S * 1_000_000
        got = {}
        for name, extra in (("ours", {}), ("spark", {"SIMJOIN_LOCAL_UNIT_ROWS": "0"})):
            cmd = [str(BIN / "simjoin"), "ineq", "--left", left, "--right", right, "--output", str(work / name),
                   "--where", Q1, "--window", f"{W_S}s"]
            got[name], _ = timed(cmd, {**env, **extra})
        anchor_s, _ = timed([sys.executable, "-c", ANCHOR, left, right, str(work / "duck"), str(start_us),
                                str(end_us), str(W_S * 1_000_000)], env)
        ref = pairs_of(str(work / "duck"), start_us, end_us)
        same = all(pairs_of(str(work / n), start_us, end_us) == ref for n in ("ours", "spark"))
        rows.append({"batch": k + 1, "new": 2 * a.rows, "pairs": len(ref), "identical": same, "ours_s": got["ours"],
                     "spark_s": got["spark"], "anchor_s": anchor_s})
        print(json.dumps(rows[-1]), flush=True)
    steady = rows[1:]
    med = {k: statistics.median(r[k] for r in steady) for k in ("ours_s", "spark_s", "anchor_s")}
    lines = [
        "# ineq: one micro-batch as a user runs it, against a fresh DuckDB process",
        "",
        f"Run {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on this machine (2 cores), "
        f"`{Path(sys.executable).name} bench/ineq_microbatch.py --batches {a.batches} --rows {a.rows}` "
        f"({(time.time() - t_start) / 60:.1f} min). Two streams, `{Q1}`, correlated data (b = a + N(0, 2)), "
        f"W = {W_S} s, {a.rows:,} tuples per stream per micro-batch over the next {W_S} s. Every time is one whole "
        "process, from its start to its exit. ours = `simjoin ineq` (in-process executor); Spark = the same "
        "command with `SIMJOIN_LOCAL_UNIT_ROWS=0` (every unit on the Spark executor, JVM start included); "
        "anchor = a fresh Python process: deltalake read of the window, DuckDB join, deltalake append. "
        "Our gate runs in the warm gate server (`simjoin.quality.gate_server`): micro-batch 1 starts it (and "
        "waits for its Great Expectations import), 2-4 find it warm, as a recurring micro-batch does.",
        "",
        "| micro-batch | new tuples | pairs | identical | ours s | Spark executor s | anchor s | ours / anchor "
        "| Spark / ours |",
        "|---:|---:|---:|:-:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['batch']} | {r['new']:,} | {r['pairs']:,} | {'yes' if r['identical'] else 'NO'} | "
                     f"{r['ours_s']:.2f} | {r['spark_s']:.2f} | {r['anchor_s']:.2f} | "
                     f"{r['ours_s'] / r['anchor_s']:.1f}x | {r['spark_s'] / r['ours_s']:.1f}x |")
    ratio = med["ours_s"] / med["anchor_s"]
    lines += ["", f"Median of micro-batches 2-{a.batches}: ours {med['ours_s']:.2f} s, Spark executor "
              f"{med['spark_s']:.2f} s, anchor {med['anchor_s']:.2f} s: ours / anchor = {ratio:.1f}x "
              f"(goal <= 5x: {'met' if ratio <= 5 else 'missed'}); Spark / in-process = "
              f"{med['spark_s'] / med['ours_s']:.1f}x (goal <= 1.5x: "
              f"{'met' if med['spark_s'] <= 1.5 * med['ours_s'] else 'missed'})."]
    out = ROOT / "bench" / "results"
    (out / "ineq_microbatch.md").write_text("\n".join(lines) + "\n")
    (out / "ineq_microbatch.json").write_text(json.dumps({"rows": rows, "median": med}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
