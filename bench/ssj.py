"""Benchmark: `simjoin ssj` end to end (CLI, Spark start-up included) vs SetSimilaritySearch.all_pairs.

Zipf token sets from `simjoin generate sets` at 50k and 200k records, θ in {0.6, 0.8, 0.9}.
The anchor runs in the same benchmark run on the same sets; the pair sets must be identical.
Writes bench/results/ssj.md (markdown table) and bench/results/ssj.json.

    .venv/bin/python bench/ssj.py [--sizes 50000,200000] [--thetas 0.6,0.8,0.9]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def sh(args: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{' '.join(args)} failed:\n{p.stderr[-3000:]}")
    return time.perf_counter() - t0, p.stdout.strip().splitlines()[-1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="50000,200000")
    ap.add_argument("--thetas", default="0.6,0.8,0.9")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    from deltalake import DeltaTable
    from SetSimilaritySearch import all_pairs

    work = Path(tempfile.mkdtemp(prefix="simjoin-bench-ssj-"))
    # the install step's one-time JVM class-data archive (a no-op when it is there already)
    print(sh([str(BIN / "simjoin"), "cache-jvm"])[1], flush=True)
    rows = []
    for n in [int(x) for x in a.sizes.split(",")]:
        src = str(work / f"sets{n}")
        sh([str(BIN / "simjoin"), "generate", "sets", "--out", src, "--rows", str(n), "--seed", str(a.seed)])
        t = DeltaTable(src).to_pyarrow_table()
        ids = t.column("id").to_pylist()
        sets = [sorted(set(x.lower().split())) for x in t.column("text").to_pylist()]
        avg = sum(map(len, sets)) / len(sets)
        for theta in [float(x) for x in a.thetas.split(",")]:
            out = str(work / f"pairs{n}_{theta}")
            ours_s, summary = sh([str(BIN / "simjoin"), "ssj", "--input", src, "--output", out,
                                  "--threshold", str(theta)])
            pt = DeltaTable(out).to_pyarrow_table()
            ours = set(zip(pt.column("left_id").to_pylist(), pt.column("right_id").to_pylist()))
            st = DeltaTable(out + "_stats").to_pyarrow_table().to_pydict()
            walls = [w for w in st["wall_seconds"] if w > 0]
            skew = max(walls) / min(walls) if walls else float("nan")
            t0 = time.perf_counter()
            ref = {(min(ids[x], ids[y]), max(ids[x], ids[y])) for x, y, _ in all_pairs(sets, "jaccard", theta)}
            anchor_s = time.perf_counter() - t0
            same = ours == ref
            row = {"records": n, "avg_len": round(avg, 1), "theta": theta, "pairs": len(ref), "identical": same,
                   "simjoin_s": round(ours_s, 1), "setsimilaritysearch_s": round(anchor_s, 1),
                   "speedup": round(anchor_s / ours_s, 2), "units": len(walls),
                   "slowest_over_fastest_unit": round(skew, 1), "summary": summary}
            print(json.dumps(row), flush=True)
            rows.append(row)
            if not same:
                raise SystemExit(f"pair sets differ at n={n} θ={theta}: {len(ref - ours)} missing, "
                                 f"{len(ours - ref)} extra")
    write_results(rows)


def write_results(rows: list[dict]) -> None:
    res = ROOT / "bench" / "results"
    res.mkdir(parents=True, exist_ok=True)
    (res / "ssj.json").write_text(json.dumps(rows, indent=1))
    lines = [
        "# Set-similarity join: simjoin vs SetSimilaritySearch",
        "",
        "`simjoin ssj` end to end (CLI process incl. Spark start-up, tokenize, quality gates, optimizer,",
        "join, publish to Delta) against `SetSimilaritySearch.all_pairs` (exact, single-threaded) on the",
        "same Zipf token sets from `simjoin generate sets`, in the same run, on this 2-core machine.",
        "Pair sets are identical in every row.",
        "",
        "| records | avg len | θ | pairs | identical | simjoin s | SetSimilaritySearch s | speedup | units | slowest/fastest unit |",
        "|---:|---:|---:|---:|:-:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['records']:,} | {r['avg_len']} | {r['theta']} | {r['pairs']:,} | {'yes' if r['identical'] else 'NO'} "
                     f"| {r['simjoin_s']} | {r['setsimilaritysearch_s']} | {r['speedup']}× | {r['units']} "
                     f"| {r['slowest_over_fastest_unit']} |")
    lines += ["", "Goal (issue): ≥ 5× faster than SetSimilaritySearch at 200k records and θ=0.6, "
              "no slower at θ=0.8.", "",
              "simjoin's time has a floor of about 18 s on this machine whatever the threshold: Python and "
              "Spark start-up (about 3.5 s with the JVM class-data archive of `simjoin cache-jvm`), the first "
              "(cold) Spark jobs, two Great Expectations gates and the Delta commits of seven tables. "
              "The join itself takes a few seconds at 200k records, so the floor decides the small and "
              "high-threshold rows; SetSimilaritySearch's time grows much faster with the records and "
              "with lower thresholds.", ""]
    (res / "ssj.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
