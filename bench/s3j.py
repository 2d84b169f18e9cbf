"""S3J benchmark (Siachamis et al., DEBS'23, Table 2 setting): uniform 2-D, two streams,
5 windows of 10k + 10k records, parallelism 5, angular distance; selectivities 1 %, 0.5 %,
0.1 % (pairs / (|L| x |R|) per window; t calibrated on a sample).

Runs the pure core (``simjoin.core.metric``: ``s3j_join_window`` and ``clusterjoin_window``),
not the Spark pipeline. The Spark tasks call the same core functions - workset formulation
per space partition and window (``formulate_partition_window``, driven over a micro-batch by
``formulate_partition_microbatch``) and the per-worker window join (``join_worker_window``) -
and their exactness is tested in tests/spark/test_s3j.py. Anchors in the same table: the paper's
Table 2 values, and scikit-learn ``BallTree.query_radius`` per window on the same data
(unit vectors, chord radius 2 sin(pi t / 2) - the same angular ball; wall-time ratio).

Duplication ratio (paper Section 9.1): average copies of a record at the join =
(inner + outlier + outer rows routed to worksets) / records of the window, summed over the
windows. The core cuts each workset's outer set to its members' reach in the window
(t + member radius, never above the paper's 2t; no outer copies to persisted worksets without
members in the window) - exact, since outer rows only probe members. The Spark layer uses the
same bound; it stays exact across micro-batches because each formulation task gets the window's
earlier rows (``PartitionState``).

Usage: .venv/bin/python bench/s3j.py [--records 10000] [--windows 5] [--out bench/results/s3j.md]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from simjoin.core.metric import clusterjoin_window, pairwise, s3j_join_window

PAPER_S3J = {0.01: 1.77, 0.005: 1.95, 0.001: 5.82}  # Table 2, comparisons ratio, p = 5
PAPER_DUP = "1.92-1.97"
PAPER_CJ = "9.70-24.51"


def calibrate(sel: float, rng: np.random.Generator) -> float:
    A, B = rng.uniform(-1, 1, (3000, 2)), rng.uniform(-1, 1, (3000, 2))
    return float(np.quantile(pairwise("angular", A, B), sel))


def balltree_seconds(XL: np.ndarray, XR: np.ndarray, t: float) -> tuple[float, int]:
    from sklearn.neighbors import BallTree

    t0 = time.perf_counter()
    U = XR / np.linalg.norm(XR, axis=1, keepdims=True)
    Q = XL / np.linalg.norm(XL, axis=1, keepdims=True)
    tree = BallTree(U)
    cnt = tree.query_radius(Q, r=2 * math.sin(math.pi * t / 2), count_only=True)
    return time.perf_counter() - t0, int(cnt.sum())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--workers", type=int, default=5)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "s3j.md"))
    a = ap.parse_args()
    rng = np.random.default_rng(7)
    n, W, P = a.records, a.windows, a.workers
    # Two streams with different seeds (the authors' generators gave both the same seed).
    data = [(rng.uniform(-1, 1, (n, 2)), rng.uniform(-1, 1, (n, 2))) for _ in range(W)]
    rows, raw = [], []
    for sel in (0.01, 0.005, 0.001):
        t = calibrate(sel, np.random.default_rng(11))
        res = {}
        for algo in ("s3j", "clusterjoin"):
            state, lat, comps, pairs, copies, recs = None, [], 0, 0, 0, 0
            for XL, XR in data:
                X = np.concatenate([XL, XR])
                ids = np.concatenate([np.arange(n), np.arange(n)])
                side = np.concatenate([np.zeros(n, np.int8), np.ones(n, np.int8)])
                t0 = time.perf_counter()
                if algo == "s3j":
                    r = s3j_join_window(X, ids, side, "angular", t, n_workers=P, centroid_state=state)
                    state = r.centroid_state
                else:
                    r = clusterjoin_window(X, ids, side, "angular", t, n_workers=P)
                lat.append(time.perf_counter() - t0)
                comps += r.stats.distance_computations
                pairs += r.stats.result_pairs
                copies += r.stats.copies
                recs += r.stats.n_records
            res[algo] = {"dup": copies / recs, "cr": comps / max(pairs, 1), "pairs": pairs,
                         "pps": pairs / sum(lat), "p99": float(np.percentile(lat, 99)), "secs": sum(lat)}
        bt = [balltree_seconds(XL, XR, t) for XL, XR in data]
        bt_secs = sum(s for s, _ in bt)
        achieved = res["s3j"]["pairs"] / (W * n * n)
        raw.append({"selectivity": sel, "t": t, "achieved": achieved, **{k: v for k, v in res.items()},
                    "balltree_seconds": bt_secs, "balltree_pairs": sum(c for _, c in bt)})
        for algo in ("s3j", "clusterjoin"):
            r_ = res[algo]
            paper = f"{PAPER_S3J[sel]:.2f} / dup {PAPER_DUP}" if algo == "s3j" else f"{PAPER_CJ} (range)"
            rows.append(f"| {sel:.1%} | {t:.5f} | {algo} | {r_['dup']:.3f} | {r_['cr']:.3f} | {paper} | "
                        f"{r_['pairs']:,} | {r_['pps']:,.0f} | {r_['p99']:.3f} | {r_['secs'] / bt_secs:.2f} |")
        print(rows[-2], rows[-1], sep="\n", flush=True)
    head = ("| selectivity | t (angular) | algorithm | duplication ratio | comparisons ratio | paper Table 2 | "
            "pairs | pairs/s | p99 window latency (s) | wall time / BallTree |\n"
            "|---|---|---|---|---|---|---|---|---|---|")
    goals = []
    for r in raw:
        s, c = r["s3j"], r["clusterjoin"]
        goals.append(f"- {r['selectivity']:.1%}: S3J comparisons ratio {s['cr']:.2f} <= paper "
                     f"{PAPER_S3J[r['selectivity']]:.2f}: {'yes' if s['cr'] <= PAPER_S3J[r['selectivity']] else 'NO'}; "
                     f"duplication {s['dup']:.2f} <= 2.0: {'yes' if s['dup'] <= 2.0 else 'NO'}; "
                     f"S3J < ClusterJoin ({c['cr']:.2f}): {'yes' if s['cr'] < c['cr'] else 'NO'}; "
                     f"BallTree found {r['balltree_pairs']:,} pairs (inclusive radius) vs {s['pairs']:,}")
    text = (f"# S3J benchmark\n\n{__doc__}\nSetting: {W} windows x ({n:,} + {n:,}) records, uniform 2-D, "
            f"p = {P}, ClusterJoin V = 500, angular, strict `<`. Latency = wall time to join one window "
            f"(core, one process, sequential workers). Machine: 2 cores.\n\n{head}\n" + "\n".join(rows)
            + "\n\n## Goals\n\n" + "\n".join(goals) + "\n")
    Path(a.out).write_text(text)
    Path(a.out).with_suffix(".json").write_text(json.dumps(raw, indent=1))
    print(f"bench s3j: wrote {a.out}")


if __name__ == "__main__":
    main()
