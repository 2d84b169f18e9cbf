"""Issue 42, part 2: S3J on Fashion-MNIST as a stream (``bench/real.py --parts s3j``).

The Fashion-MNIST images (784 pixels, 0-255, as the Debian package ships them) in file order as
one stream, image i at ts = T0 + i x 10 ms, self-joined (``simjoin s3j`` without ``--right``: each
unordered pair of distinct images once, as (smaller id, larger id)) in epoch-aligned sliding
windows ``[s, s + window)``, s a multiple of the slide: a pair in two overlapping windows is a pair
of each (the output's ``window_start`` tells them apart), and so it is for every engine here.
Angular and euclidean distance, t calibrated on three windows of the stream to about 0.1 % and 1 %
of a window's pairs (euclidean: the pixels are integers, so t = sqrt(k + 1/2) lies between two
possible distances and no pair sits on the boundary).

Ours: the stream appended to a Delta table in ``--s3j-commits`` commits, then ONE ``simjoin s3j``
process per (metric, selectivity) as a user runs it (``ctx.simjoin``: JVM start-up included, the
quality gate server warm as a recurring user finds it); pairs read from its Delta output, the
join's CPU seconds from its stats table (``worker`` rows), stage seconds from the task timing.
Anchors, per window (build + query + writing the same pairs, with distances and window_start, to
Delta with ``deltalake``, summed over the windows): faiss ``range_search`` (float32;
``IndexFlatL2`` with radius t^2, ``IndexFlatIP`` on unit vectors with cos(pi t)) and scikit-learn
``BallTree.query_radius`` (float64; angular as the chord 2 sin(pi t / 2) between unit vectors),
stopped at ``--s3j-balltree-cap`` seconds. Exact: every engine's pairs against a float64 numpy
reference per window (integer pixels: its dot products and squared distances are exact, the
formula is the pipeline kernel's), pair for pair; a difference is counted and its distance from t
is stated.
"""

from __future__ import annotations

import argparse
import math
import resource
import time

import numpy as np

NAME = "s3j"
TITLE = "S3J: Fashion-MNIST as a stream, self-join in sliding windows"
T0_US = 1_704_067_200_000_000  # 2024-01-01 00:00:00 UTC: in the past, a multiple of every whole-second slide
STEP_US = 10_000  # one image per 10 ms
METRICS = ("angular", "euclidean")
SELECTIVITIES = (0.001, 0.01)
PLOT_RUN = ("angular", 0.01)  # the run whose `simjoin report` plots are kept


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--s3j-images", type=int, default=0,
                    help="s3j: the first N images (0: 20,000; 2,000 with --quick)")
    ap.add_argument("--s3j-window", default="10s", help="s3j: window size")
    ap.add_argument("--s3j-slide", default="5s", help="s3j: slide")
    ap.add_argument("--s3j-commits", type=int, default=10, help="s3j: commits the stream is appended in")
    ap.add_argument("--s3j-unit-records", type=int, default=-1,
                    help="s3j: simjoin's --max-records-per-unit (-1: one commit's rows, a unit per commit, so "
                         "memory stays bounded; 0: the product default, the whole backlog one unit)")
    ap.add_argument("--s3j-balltree-cap", type=float, default=240.0, help="s3j: BallTree's cap per run, s")
    ap.add_argument("--s3j-timeout", type=float, default=1800.0, help="s3j: cap of one simjoin run, s")


# ---------------------------------------------------------------- windows and the exact reference

def windows(ts: np.ndarray, size_us: int, slide_us: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every epoch-aligned window [s, s + size) holding an image (ts ascending): (start, first, end)
    row ranges."""
    first = (int(ts[0]) - size_us) // slide_us + 1
    starts = np.arange(first, int(ts[-1]) // slide_us + 1, dtype=np.int64) * slide_us
    lo, hi = np.searchsorted(ts, starts), np.searchsorted(ts, starts + size_us)
    keep = hi > lo
    return starts[keep], lo[keep], hi[keep]


def _gram(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    G = X @ X.T  # integer pixels: every product and partial sum is an exact integer in float64
    return G, np.diag(G).copy()


def dist_matrix(metric: str, X: np.ndarray) -> np.ndarray:
    """All distances of a window's images, float64, with the pipeline kernel's formula."""
    G, sq = _gram(X)
    if metric == "euclidean":
        return np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2 * G, 0))
    n = np.sqrt(sq)
    return np.arccos(np.clip(G / (n[:, None] * n[None, :]), -1.0, 1.0)) / math.pi


def paired_dist(metric: str, A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """d(A[k], B[k]) with the same formula (exact dot products for integer pixels)."""
    if metric == "euclidean":
        return np.sqrt(np.einsum("ij,ij->i", A - B, A - B))
    dot = np.einsum("ij,ij->i", A, B)
    na, nb = np.sqrt(np.einsum("ij,ij->i", A, A)), np.sqrt(np.einsum("ij,ij->i", B, B))
    return np.arccos(np.clip(dot / (na * nb), -1.0, 1.0)) / math.pi


def calibrate(metric: str, X: np.ndarray, win: tuple, sels: tuple[float, ...]) -> dict[float, float]:
    """t per selectivity: the quantile of the pair distances of three windows (first full, middle,
    last full). Euclidean: t^2 is an integer + 1/2, between two possible squared distances."""
    _, lo, hi = win
    full = np.flatnonzero(hi - lo == (hi - lo).max())
    ds = []
    for k in sorted({int(full[0]), int(full[len(full) // 2]), int(full[-1])}):
        D = dist_matrix(metric, X[lo[k]:hi[k]])
        ds.append(D[np.triu_indices(D.shape[0], 1)])
    d = np.concatenate(ds)
    if metric == "euclidean":
        return {s: math.sqrt(math.floor(float(np.quantile(d * d, s))) + 0.5) for s in sels}
    return {s: float(np.quantile(d, s)) for s in sels}


def reference(metric: str, t: float, X: np.ndarray, win: tuple, n: int) -> dict:
    """The exact pairs (d < t, i < j) of every window, as sorted keys (window, left, right)
    encoded in one int64, with their distances; and how many pairs lie within 1e-9 of t."""
    starts, lo, hi = win
    keys, dist, near = [], [], 0
    for k in range(len(starts)):
        D = dist_matrix(metric, X[lo[k]:hi[k]])
        i, j = np.nonzero(np.triu(t > D, 1))
        keys.append(_key(k, lo[k] + i, lo[k] + j, n))
        dist.append(D[i, j])
        near += int(np.count_nonzero(np.triu(np.abs(D - t) <= 1e-9, 1)))
    key = np.concatenate(keys)
    o = np.argsort(key, kind="stable")
    return {"key": key[o], "dist": np.concatenate(dist)[o], "near_t": near}


def _key(w, left: np.ndarray, right: np.ndarray, n: int) -> np.ndarray:
    return (np.asarray(w, np.int64) * n + np.asarray(left, np.int64)) * n + np.asarray(right, np.int64)


def compare(metric: str, t: float, got: np.ndarray, ref: dict, X: np.ndarray, n: int) -> dict:
    """``got`` (keys, any order) against the reference: missing and extra pairs, and the largest
    |d - t| of a differing pair (its exact distance)."""
    g = np.unique(got)
    missing = np.setdiff1d(ref["key"], g, assume_unique=True)
    extra = np.setdiff1d(g, ref["key"], assume_unique=True)
    diff = np.concatenate([missing, extra])
    gap = None
    if diff.size:
        left, right = (diff // n) % n, diff % n
        gap = float(np.abs(paired_dist(metric, X[left], X[right]) - t).max())
    return {"pairs": int(got.size), "duplicates": int(got.size - g.size), "missing": int(missing.size),
            "extra": int(extra.size), "max_gap": gap,
            "exact": bool(got.size == g.size and missing.size == 0 and extra.size == 0)}


# ---------------------------------------------------------------- anchors

def _write_pairs(path: str, ids_l: np.ndarray, ids_r: np.ndarray, d: np.ndarray, start_us: int) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    ws = pa.array(np.full(ids_l.size, start_us, np.int64)).cast(pa.timestamp("us", tz="UTC"))
    write_deltalake(path, pa.table({"left_id": pa.array(ids_l, pa.int64()), "right_id": pa.array(ids_r, pa.int64()),
                                    "distance": pa.array(d, pa.float64()), "window_start": ws}), mode="append")


def faiss_window(metric: str, t: float, Xw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """faiss range_search of a window against itself: local (i, j), i < j, and the distance."""
    import faiss

    A = np.ascontiguousarray(Xw, dtype=np.float32)
    if metric == "euclidean":
        index, radius = faiss.IndexFlatL2(A.shape[1]), t * t  # L2 range: squared distance < radius
    else:
        A /= np.linalg.norm(A, axis=1, keepdims=True)
        index, radius = faiss.IndexFlatIP(A.shape[1]), math.cos(math.pi * t)  # IP range: similarity > radius
    index.add(A)
    lims, D, J = index.range_search(A, radius)
    i = np.repeat(np.arange(A.shape[0], dtype=np.int64), np.diff(lims).astype(np.int64))
    keep = i < J
    D = D[keep].astype(np.float64)
    d = np.sqrt(np.maximum(D, 0)) if metric == "euclidean" else np.arccos(np.clip(D, -1, 1)) / math.pi
    return i[keep], J[keep].astype(np.int64), d


def balltree_window(metric: str, t: float, Xw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BallTree query_radius of a window against itself: local (i, j), i < j, and the distance."""
    from sklearn.neighbors import BallTree

    if metric == "euclidean":
        A, r = Xw, t
    else:  # unit vectors, the chord of angle pi t (what bench/s3j.py's anchor does)
        A, r = Xw / np.linalg.norm(Xw, axis=1, keepdims=True), 2 * math.sin(math.pi * t / 2)
    ind, dist = BallTree(A).query_radius(A, r=r, return_distance=True)
    counts = np.fromiter(map(len, ind), np.int64, len(ind))
    i = np.repeat(np.arange(A.shape[0], dtype=np.int64), counts)
    j = np.concatenate(ind).astype(np.int64)
    d = np.concatenate(dist)
    keep = j > i
    d = d[keep] if metric == "euclidean" else 2 * np.arcsin(np.clip(d[keep] / 2, 0, 1)) / math.pi
    return i[keep], j[keep], d


def anchor(fn, metric: str, t: float, X: np.ndarray, win: tuple, n: int, path: str, cap: float | None) -> dict:
    """One anchor over every window: build + query + Delta write, summed; stopped after the window
    that passes ``cap`` seconds."""
    starts, lo, hi = win
    keys, query_s, total_s = [], 0.0, 0.0
    for k in range(len(starts)):
        t0 = time.perf_counter()
        i, j, d = fn(metric, t, X[lo[k]:hi[k]])
        t1 = time.perf_counter()
        _write_pairs(path, lo[k] + i, lo[k] + j, d, int(starts[k]))
        query_s += t1 - t0
        total_s += time.perf_counter() - t0
        keys.append(_key(k, lo[k] + i, lo[k] + j, n))
        if cap is not None and total_s > cap and k + 1 < len(starts):
            return {"seconds": None, "query_s": query_s, "capped_after": total_s, "windows_done": k + 1}
    return {"seconds": total_s, "query_s": query_s, "keys": np.concatenate(keys)}


# ---------------------------------------------------------------- ours

def ours_pairs(out: str, starts: np.ndarray, n: int) -> np.ndarray:
    """The CLI output's pairs as keys (a window_start that is no reference window: key -1)."""
    from deltalake import DeltaTable

    return ours_pairs_of(DeltaTable(out).to_pyarrow_table(columns=["left_id", "right_id", "window_start"]), starts, n)


def ours_pairs_of(tb, starts: np.ndarray, n: int) -> np.ndarray:
    ws = tb["window_start"].to_numpy().astype("datetime64[us]").astype(np.int64)
    k = np.minimum(np.searchsorted(starts, ws), len(starts) - 1)
    key = _key(k, tb["left_id"].to_numpy(), tb["right_id"].to_numpy(), n)
    return np.where(starts[k] == ws, key, -1)


def ours_stats(out: str, warehouse: str) -> dict:
    """From the stats table: join CPU seconds (``worker`` rows), copies and distance computations
    (``window`` rows); from the task timing: each stage's seconds of the last run on ``out``."""
    from deltalake import DeltaTable

    st = DeltaTable(f"{out}_stats").to_pandas()
    wk, w = st[st["level"] == "worker"], st[st["level"] == "window"]
    res = {"kernel_s": float(wk["seconds"].sum()), "records": int(w["records"].sum()),
           "copies": int(w["copies"].sum()), "distance_computations": int(w["distance_computations"].sum()),
           "centroid_distance_computations": int(w["centroid_distance_computations"].sum()),
           "stats_pairs": int(w["result_pairs"].sum()), "stages": {}}
    try:
        tt = DeltaTable(f"{warehouse}/_simjoin/task_timing").to_pandas()
        tt = tt[tt["output"].astype(str).str.rstrip("/") == out.rstrip("/")]
        if len(tt):
            last = tt[tt["invocation"] == tt.sort_values("started_at")["invocation"].iloc[-1]]
            secs = last["work_s"].astype(float) + last["startup_s"].astype(float)
            res["stages"] = {str(k): float(v) for k, v in secs.groupby(last["stage"]).sum().items()}  # all units
    except Exception as e:  # the timing table is a report's aid; its absence is stated, not fatal
        res["stages_error"] = str(e)[:200]
    return res


def state_bytes(out: str) -> tuple[int, int]:
    """(bytes written under the run's state folder, expired files included; bytes its state tables
    keep: their live files)."""
    from pathlib import Path

    from deltalake import DeltaTable

    p = Path(f"{out}_state")
    if not p.exists():
        return 0, 0
    written = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    kept = 0
    for d in p.iterdir():
        if (d / "_delta_log").is_dir():
            adds = DeltaTable(str(d)).get_add_actions(flatten=True)
            kept += int(np.asarray(adds.column("size_bytes")).sum())
    return written, kept


def run(a: argparse.Namespace, ctx) -> dict:
    import real_data
    import s3j as B  # bench/s3j.py: write_piece

    from simjoin.config import parse_duration
    from simjoin.quality import gate_server

    real_data.need("faiss", "faiss-cpu")
    real_data.need("sklearn", "scikit-learn")
    X = real_data.fashion_mnist()
    total = X.shape[0]
    n = a.s3j_images or (2_000 if ctx.quick else 20_000)
    X = np.ascontiguousarray(X[:n])
    size_us, slide_us = round(parse_duration(a.s3j_window) * 1e6), round(parse_duration(a.s3j_slide) * 1e6)
    ts = T0_US + np.arange(n, dtype=np.int64) * STEP_US
    win = windows(ts, size_us, slide_us)
    starts, lo, hi = win
    work = ctx.work / NAME
    stream = str(work / "stream")
    commits = np.array_split(np.arange(n, dtype=np.int64), max(1, a.s3j_commits))
    for part in commits:
        B.write_piece(stream, part, ts[part], X[part])
    per_unit = max(len(c) for c in commits) if a.s3j_unit_records < 0 else a.s3j_unit_records
    unit_args = ["--max-records-per-unit", str(per_unit)] if per_unit else []
    print(f"s3j: {n:,} of {total:,} images, {len(starts)} windows of up to {int((hi - lo).max()):,} images "
          f"({a.s3j_window} / {a.s3j_slide}), {a.s3j_commits} commits", flush=True)
    # untimed: the gate server a recurring user's runs find up, one small CLI run (numba's cached
    # kernels, the file system cache), and each anchor's first call (imports, BLAS/OpenMP threads)
    gate_server.start()
    conn = gate_server.connect(180)
    if conn is not None:
        conn.close()
    warm = min(n, 300)
    B.write_piece(str(work / "warm-in"), np.arange(warm, dtype=np.int64), ts[:warm], X[:warm])
    ctx.simjoin(["s3j", "--left", str(work / "warm-in"), "--output", str(work / "warm-out"), "--metric", "angular",
                 "--threshold", "0.1", "--window", a.s3j_window, "--slide", a.s3j_slide], a.s3j_timeout)
    for fn in (faiss_window, balltree_window):
        fn("angular", 0.1, X[:warm])
    rows = []
    for metric in METRICS:
        ts_ = calibrate(metric, X, win, SELECTIVITIES)
        for sel in SELECTIVITIES:
            t = ts_[sel]
            tag = f"{metric}_{sel}"
            ref = reference(metric, t, X, win, n)
            out = str(work / tag / "pairs")
            cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            secs, last = ctx.simjoin(["s3j", "--left", stream, "--output", out, "--metric", metric, "--threshold",
                                      repr(t), "--window", a.s3j_window, "--slide", a.s3j_slide, *unit_args],
                                     a.s3j_timeout)
            cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            got = ours_pairs(out, starts, n)
            ours = {"seconds": secs, "summary": last, **compare(metric, t, got, ref, X, n),
                    "cpu_s": cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime,
                    **ours_stats(out, str(ctx.warehouse))}
            ours["state_written"], ours["state_kept"] = state_bytes(out)
            # our distances against the reference's, on the pairs both have
            from deltalake import DeltaTable

            tb = DeltaTable(out).to_pyarrow_table(columns=["left_id", "right_id", "window_start", "distance"])
            dcol = tb["distance"].to_numpy(zero_copy_only=False).astype(np.float64)  # null: an inner x inner
            got = ours_pairs_of(tb, starts, n)  # pair emitted without a distance (--exact-distances off)
            pos = np.searchsorted(ref["key"], got)
            ok = (pos < ref["key"].size) & (ref["key"][np.minimum(pos, ref["key"].size - 1)] == got) & ~np.isnan(dcol)
            ours["no_distance"] = int(np.isnan(dcol).sum())
            ours["max_distance_error"] = float(np.abs(dcol[ok] - ref["dist"][pos[ok]]).max()) if ok.any() else None
            anchors = {}
            for name, fn, cap in (("faiss", faiss_window, None), ("balltree", balltree_window, a.s3j_balltree_cap)):
                r = anchor(fn, metric, t, X, win, n, str(work / tag / name), cap)
                keys = r.pop("keys", None)
                anchors[name] = {**r, **(compare(metric, t, keys, ref, X, n) if keys is not None else {})}
            plots = ctx.report(out, f"s3j_{metric}_{sel}") if (metric, sel) == PLOT_RUN else []
            row = {"metric": metric, "selectivity": sel, "t": t, "ref_pairs": int(ref["key"].size),
                   "near_t": ref["near_t"], "window_pairs": int(((hi - lo) * (hi - lo - 1) // 2).sum()),
                   "ours": ours, "anchors": anchors, "plots": plots}
            rows.append(row)
            fa, bt = anchors["faiss"], anchors["balltree"]
            print(f"  {metric} {sel:.1%} t={t:.6g}: ours {secs:.1f}s {ours['pairs']:,} pairs exact {ours['exact']}"
                  f" (kernel {ours['kernel_s']:.1f}s, dup {ours['copies'] / max(ours['records'], 1):.1f}, "
                  f"stages {', '.join(f'{k} {v:.0f}' for k, v in ours['stages'].items())}); "
                  f"faiss {fa['seconds']:.1f}s {fa.get('pairs')} (-{fa.get('missing')} +{fa.get('extra')}); "
                  f"balltree {bt['seconds'] if bt['seconds'] is None else round(bt['seconds'], 1)}s "
                  f"{bt.get('pairs')} (-{bt.get('missing')} +{bt.get('extra')})", flush=True)
    return {"rows": rows, "images": n, "total_images": total, "windows": len(starts),
            "window_images": int((hi - lo).max()),
            "args": {"window": a.s3j_window, "slide": a.s3j_slide, "commits": a.s3j_commits, "unit_records": per_unit,
                     "balltree_cap": a.s3j_balltree_cap, "images": n}}


# ---------------------------------------------------------------- report

def _sel(s: float) -> str:
    return f"{s:.1%}"


def _agree(r: dict) -> str:
    if r.get("pairs") is None:
        return "-"
    if r["exact"]:
        return "yes"
    gap = f", all within {r['max_gap']:.2g} of t" if r.get("max_gap") is not None else ""
    return f"NO (-{r['missing']:,} +{r['extra']:,}{gap})"


def headline(res: dict) -> list[dict]:
    out = []
    for r in res["rows"]:
        out.append({"part": "S3J", "data": f"Fashion-MNIST ({res['images']:,} images)",
                    "workload": f"self-join, {r['metric']} {_sel(r['selectivity'])}, "
                                f"{res['args']['window']}/{res['args']['slide']} windows",
                    "pairs": r["ours"]["pairs"], "exact": r["ours"]["exact"], "ours_s": r["ours"]["seconds"],
                    "anchors": [("faiss + Delta", r["anchors"]["faiss"]["seconds"]),
                                ("BallTree + Delta", r["anchors"]["balltree"]["seconds"])]})
    return out


def section(res: dict) -> list[str]:
    ar = res["args"]
    n, total = res["images"], res["total_images"]
    prefix = "all" if n == total else f"the first {n:,} of the {total:,}"
    lines = [f"## {TITLE} (`dataset-fashion-mnist`, {prefix} images)", "",
             f"{prefix.capitalize()} images in file order, one per 10 ms (a stream of {n / 100:.0f} s), appended to "
             f"Delta in {ar['commits']} commits; one stream self-joined (each unordered pair of distinct images "
             f"once per window) in sliding windows of {ar['window']} sliding by {ar['slide']} ({res['windows']} "
             f"windows of up to {res['window_images']:,} images; every image is in two windows, and a pair in "
             "both is a pair of each). t: the 0.1 % and 1 % quantile of the pair distances of three windows "
             "(euclidean: moved to sqrt(k + 1/2), k an integer, between two possible distances of integer pixels). "
             + ("" if n == total else
                "Size: this prefix keeps the part's four runs of each engine within about 10 minutes on this "
                "2-core machine (simjoin's time grows with the images times the images of a window: each record is "
                "copied into more worksets as its window holds more neighbours). One unit per commit "
                "(`--max-records-per-unit`): the whole backlog as one unit held every window's worksets at once, "
                "and at 10,000 images the kernel's OOM killer ended the run at 16.5 GB. ")
             +
             "Ours: ONE `simjoin s3j` process per row, end to end (JVM start-up included; its quality gate "
             "server warm). Anchors per window, build + query + writing the same pairs to Delta with "
             "`deltalake`, summed: faiss `range_search` (float32, exhaustive `IndexFlatL2`/`IndexFlatIP`) and "
             f"scikit-learn `BallTree.query_radius` (float64; stopped at {ar['balltree_cap']:.0f} s). *= exact*: "
             "pair for pair against a float64 numpy reference per window (the pipeline kernel's formula; exact "
             "dot products on integer pixels); a difference is counted (-missing +extra) with its distance "
             "from t. *kernel*: the join tasks' CPU seconds (stats table); *dup*: record copies at the join "
             "per record; *dist*: distance computations / the windows' pairs.", "",
             "| metric | sel. | t | pairs | = exact | ours s | kernel s | dup | dist | faiss + Delta s | "
             "faiss pairs, = exact | BallTree + Delta s | BallTree pairs, = exact |",
             "|---|---:|---:|---:|:-:|---:|---:|---:|---:|---:|---|---:|---|"]
    for r in res["rows"]:
        o, fa, bt = r["ours"], r["anchors"]["faiss"], r["anchors"]["balltree"]
        bts = f"{bt['seconds']:.1f}" if bt["seconds"] is not None else \
            f"> {bt['capped_after']:.0f} (cap, {bt['windows_done']} of {res['windows']} windows)"
        btp = f"{bt['pairs']:,}, {_agree(bt)}" if bt.get("pairs") is not None else "-"
        lines.append(f"| {r['metric']} | {_sel(r['selectivity'])} | {r['t']:.6g} | {o['pairs']:,} | {_agree(o)} | "
                     f"{o['seconds']:.1f} | {o['kernel_s']:.1f} | {o['copies'] / max(o['records'], 1):.1f} | "
                     f"{o['distance_computations'] / max(r['window_pairs'], 1):.1%} | {fa['seconds']:.1f} | "
                     f"{fa['pairs']:,}, {_agree(fa)} | {bts} | {btp} |")
    lines += ["", *_reading(res)]
    return lines


def _reading(res: dict) -> list[str]:
    rows = res["rows"]
    done = [r for r in rows if r["anchors"]["balltree"]["seconds"] is not None]
    vs_fa = [r["ours"]["seconds"] / r["anchors"]["faiss"]["seconds"] for r in rows]
    vs_bt = [r["ours"]["seconds"] / r["anchors"]["balltree"]["seconds"] for r in done]
    fa_off = sum(r["anchors"]["faiss"]["missing"] + r["anchors"]["faiss"]["extra"] for r in rows)
    fa_gap = max([r["anchors"]["faiss"]["max_gap"] or 0.0 for r in rows])
    ours_ok = all(r["ours"]["exact"] for r in rows)
    near = sum(r["near_t"] for r in rows)
    errs = [e for r in rows if (e := r["ours"].get("max_distance_error")) is not None and not math.isnan(e)]
    fq = [r["anchors"]["faiss"]["query_s"] for r in rows]
    jd = [r["ours"]["distance_computations"] / max(r["window_pairs"], 1) for r in rows]
    wins = {min((("simjoin", r["ours"]["seconds"]), ("faiss", r["anchors"]["faiss"]["seconds"]),
                 ("BallTree", r["anchors"]["balltree"]["seconds"] or math.inf)), key=lambda x: x[1])[0] for r in rows}
    who = f"{wins.pop()} is fastest in every row" if len(wins) == 1 else \
        f"the fastest differs by row ({', '.join(sorted(wins))})"
    text = (f"Reading: {who}; simjoin takes {min(vs_fa):.0f}-{max(vs_fa):.0f}x faiss + Delta's time"
            + (f" and {min(vs_bt):.1f}-{max(vs_bt):.1f}x BallTree + Delta's" if vs_bt else "")
            + f". simjoin's pairs are {'exactly the reference in every row' if ours_ok else 'NOT the reference'}"
            + (f" (its distances within {max(errs):.1g} of the reference's, "
               f"{sum(r['ours'].get('no_distance', 0) for r in rows):,} inner x inner pairs without one; "
               if errs else " (its distances not compared in this run; ")
            + f"{near} pair(s) of any row lie within 1e-9 of t); faiss's float32 differs from the float64 reference "
            f"in {fa_off} pair(s) in all" + (f", each within {fa_gap:.1g} of t (rounding at the boundary, not a "
                                             "missed neighbourhood)" if fa_off else "") + ". "
            "Why simjoin loses: faiss computes all of a window's distances as one float32 BLAS product (one "
            f"window of {res['window_images']:,} images is ~{res['window_images'] ** 2 * 784 * 2 / 1e9:.1f} "
            f"GFLOP; faiss's queries took {min(fq):.1f}-{max(fq):.1f} s for all {res['windows']} windows). S3J "
            f"prunes the pair distances (the join computes {min(jd):.1%}-{max(jd):.1%} of the windows' pairs), "
            "but in 784 dimensions it pays more than that saves: the workset formulation's centroid distances, "
            "the record copies into worksets, the join state it writes and the process's fixed costs (per row "
            "below, from the stats table and the task timing).")
    out = [text, ""]
    for r in rows:
        o, fa, bt = r["ours"], r["anchors"]["faiss"], r["anchors"]["balltree"]
        st = o.get("stages", {})
        top = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(st.items(), key=lambda kv: -kv[1])[:3])
        other = o["seconds"] - sum(st.values())
        wp = max(r["window_pairs"], 1)
        line = (f"- {r['metric']} {_sel(r['selectivity'])}: ours {o['seconds']:.1f} s = "
                f"{o['seconds'] / fa['seconds']:.0f}x faiss's {fa['seconds']:.1f} s")
        if bt["seconds"] is not None:
            line += (f", {o['seconds'] / bt['seconds']:.1f}x BallTree's {bt['seconds']:.1f} s (its query "
                     f"{bt['query_s']:.1f} s)")
        if o.get("cpu_s") is not None:
            line += f"; simjoin's process used {o['cpu_s']:.1f} CPU s (user + system) in its {o['seconds']:.1f} s"
        line += (f". Stages: {top or 'no stage timing'}"
                 + (f", outside the stages (process start, imports) {other:.1f} s" if st else "")
                 + f". The join's CPU {o['kernel_s']:.1f} s for {o['distance_computations']:,} pair distances "
                 f"({o['distance_computations'] / wp:.1%} of the windows' {r['window_pairs']:,} pairs), but the "
                 f"workset formulation adds {o['centroid_distance_computations']:,} centroid distances (together "
                 f"{(o['distance_computations'] + o['centroid_distance_computations']) / wp:.0%} of brute force) "
                 f"and copies each record {o['copies'] / max(o['records'], 1):.1f} times into worksets; "
                 f"{o['state_written'] / 1e9:.2f} GB written under `_state` (784 doubles a copy), of which the "
                 f"state tables keep {o['state_kept'] / 1e9:.2f} GB after the windows the run closed expire.")
        out.append(line)
    return out
