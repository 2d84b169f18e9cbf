"""Benchmark: the Airflow plugin's pages on a 100M-row output (issue 41: "a 100M-row table opens
in about a second").

A pair table of ``--rows`` rows (left_id, right_id, score, ts; ``--commits`` appends, as a
stream's units make it) is written with deltalake under a fresh warehouse, a small quarantine
beside it. Then `airflow standalone` starts there (the plugin found by its entry point, as
``make airflow`` runs it), and every page is fetched over HTTP with a JWT, as the UI's iframe
fetches it: the first request of a page and the median of ``--repeat`` more. Anchor, in the same
run: DuckDB's ``delta_scan`` of the same table for the same page (``LIMIT``/``OFFSET``, the filter,
``count(*)``) in a fresh process, as a user would check a table without us.

Writes bench/results/ui.md and bench/results/ui.json.

    .venv/bin/python bench/ui.py [--rows 100000000] [--commits 10]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def write(path: str, rows: int, commits: int, seed: int) -> None:
    from deltalake import CommitProperties, write_deltalake

    rng = np.random.default_rng(seed)
    per = rows // commits
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    for c in range(commits):
        n = per if c < commits - 1 else rows - per * (commits - 1)
        left = np.sort(rng.integers(0, rows // 4, n, dtype=np.int64))  # a unit's pairs, by left id
        t = pa.table({"left_id": left, "right_id": rng.integers(0, rows // 4, n, dtype=np.int64),
                      "score": rng.random(n),
                      "ts": pa.array(np.int64(t0.timestamp() * 1e6) + np.arange(n, dtype=np.int64) + c * n,
                                     pa.int64()).cast(pa.timestamp("us", tz="UTC"))})
        write_deltalake(path, t, mode="append", description="simjoin.owner=s2j",
                        commit_properties=CommitProperties(custom_metadata={"userMetadata":
                                                                            json.dumps({"unit": c})}))
        print(f"  commit {c}: {n:,} rows", flush=True)


def fetch(stack, path: str) -> tuple[float, int, int]:
    req = urllib.request.Request(stack.url + path, headers={"Authorization": f"Bearer {stack.token()}"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        body = r.read()
        status = r.status
    return time.perf_counter() - t0, status, len(body)


def duck(sql: str, table: str) -> float:
    """One fresh process: the table's files from its Delta log (deltalake; DuckDB's delta extension
    is not served here), then DuckDB runs ``sql`` over them (``{files}``); its wall seconds."""
    code = ("import duckdb; from deltalake import DeltaTable; "
            f"files = DeltaTable({table!r}).file_uris(); c = duckdb.connect(); "
            f"c.execute({sql!r}.replace('{{files}}', repr(files))).fetchall()")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-500:])
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000_000)
    ap.add_argument("--commits", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-duckdb", action="store_true")
    a = ap.parse_args()
    from jobs.tools.airflow_stack import Stack, free_port

    work = Path(tempfile.mkdtemp(prefix="ui-bench-"))
    wh = work / "warehouse"
    out = wh / "s2j" / "pairs"
    t0 = time.perf_counter()
    print(f"writing {a.rows:,} rows in {a.commits} commits to {out}", flush=True)
    write(str(out), a.rows, a.commits, a.seed)
    write_s = time.perf_counter() - t0
    from deltalake import DeltaTable

    dtab = DeltaTable(str(out))
    one = int(dtab.to_pyarrow_dataset().head(1).column("left_id")[0].as_py())
    size = sum(int(x) for x in dtab.get_add_actions(flatten=True).column("size_bytes").to_pylist())
    pages = {
        "warehouse tables (nav)": "/simjoin/",
        "table: first page": "/simjoin/table?path=s2j/pairs",
        "table: page 1,000 (offset 49,950)": "/simjoin/table?path=s2j/pairs&offset=49950",
        "table: time travel to version 0": "/simjoin/table?path=s2j/pairs&version=0",
        "table: filter left_id = one id": f"/simjoin/table?path=s2j/pairs&column=left_id&value={one}",
        "table: rows of the last commit": f"/simjoin/table?path=s2j/pairs&versions={a.commits - 1}",
        "download: 100,000 rows as CSV": "/simjoin/download?path=s2j/pairs&format=csv",
        "download: 100,000 rows as Parquet": "/simjoin/download?path=s2j/pairs&format=parquet",
    }
    scan = "read_parquet({files})"
    anchors = {
        "table: first page": f"SELECT * FROM {scan} LIMIT 50",
        "table: page 1,000 (offset 49,950)": f"SELECT * FROM {scan} LIMIT 50 OFFSET 49950",
        "table: filter left_id = one id": f"SELECT * FROM {scan} WHERE left_id = {one} LIMIT 50",
        "download: 100,000 rows as CSV": f"COPY (SELECT * FROM {scan} LIMIT 100000) TO '{work}/x.csv' (HEADER)",
        "row count": f"SELECT count(*) FROM {scan}",
    }
    res: dict = {"rows": a.rows, "commits": a.commits, "repeat": a.repeat, "bytes": size, "write_s": write_s,
                 "started": dt.datetime.now(dt.UTC).isoformat(), "pages": {}, "duckdb": {}}
    s = Stack(home=str(work / "home"), api_port=free_port(), warm=False, warehouse=str(wh))
    try:
        s.start(timeout=300)
        for name, path in pages.items():
            first = fetch(s, path)
            assert first[1] == 200, (name, first)
            more = [fetch(s, path)[0] for _ in range(a.repeat)]
            res["pages"][name] = {"path": path, "first_s": first[0], "median_s": statistics.median(more),
                                  "bytes": first[2]}
            print(f"{name}: first {first[0]:.2f} s, median {statistics.median(more):.2f} s", flush=True)
    finally:
        s.stop()
    if not a.no_duckdb:
        for name, sql in anchors.items():
            res["duckdb"][name] = statistics.median(duck(sql, str(out)) for _ in range(3))
            print(f"duckdb {name}: {res['duckdb'][name]:.2f} s", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    report(res)


def report(res: dict) -> None:
    lines = [
        "# The Airflow plugin's pages on a 100M-row output (`bench/ui.py`)", "",
        f"Run {res['started'][:16]}Z on this machine (2 cores). One pair table of {res['rows']:,} rows "
        f"(left_id, right_id, score, ts) in {res['commits']} commits, {res['bytes'] / 2**20:,.0f} MiB of Parquet, "
        "written with deltalake under a fresh warehouse. `airflow standalone` serves the plugin (found by its "
        "entry point, as `make airflow` runs it); every page is fetched over HTTP with a JWT, as the UI's iframe "
        f"fetches it. First = the first request of that page; median = of {res['repeat']} more. Anchor: DuckDB "
        "over the same table's Parquet files (listed by deltalake; DuckDB's delta extension is not served "
        "here) for the same rows, in a fresh process (imports, listing, query), median of 3.", "",
        "| page | first (s) | median (s) | HTML/bytes | DuckDB, fresh process (s) |", "|---|---:|---:|---:|---:|"]
    for name, r in res["pages"].items():
        d = res["duckdb"].get(name)
        lines.append(f"| {name} | {r['first_s']:.2f} | {r['median_s']:.2f} | {r['bytes']:,} | "
                     f"{'' if d is None else f'{d:.2f}'} |")
    if "row count" in res["duckdb"]:
        lines += ["", f"DuckDB's `count(*)` of the table: {res['duckdb']['row count']:.2f} s; the plugin takes "
                  "every count from the Delta log's file statistics, reading no data file."]
    lines += ["", "Goal (issue 41): a 100M-row table opens in about a second."]
    out = ROOT / "bench" / "results"
    (out / "ui.md").write_text("\n".join(lines) + "\n")
    (out / "ui.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
