"""Issue 42, part 1: set-similarity join on real data (``bench/real.py --parts ssj``).

Two datasets as they ship (``bench/real_data.py``), each written once to Delta (``id``, ``text``;
the write is stated, not timed: a user's data is already in Delta):

- ``gcide``: the GCIDE dictionary's definitions, one record per entry, as word sets (simjoin's
  default ``word`` tokenizer), Jaccard θ in ``--ssj-gcide-thetas``;
- ``wamerican``: the wamerican-huge English words with ``--tokenizer qgram:3``, Jaccard θ in
  ``--ssj-wamerican-thetas``.

Ours: ``simjoin ssj --no-incremental`` as a user runs it (a fresh process, JVM start included), one
fresh output per θ, timed end to end; its plan (``<output>_plan``), unit stats (``<output>_stats``)
and per-stage seconds (the warehouse's task-timing table).

Anchors (bench/ssj.py's, reused): SetSimilaritySearch.all_pairs (exact, single-threaded) in a
subprocess capped at ``--ssj-sss-cap``; its pair set must EQUAL ours, pair for pair. Over the cap:
"> cap", and bench/ssj.py's sampled oracle (every partner of ``--ssj-oracle-sample`` random records
by brute force) checks ours instead. Spark ML MinHashLSH (approximate, local[2], a subprocess capped
at ``--ssj-minhash-cap``) at the θ in ``--ssj-<data>-minhash-thetas``: its time, and its recall and
precision against our exact pairs.

The anchors tokenize as ``simjoin ssj`` does. Words: ``str.lower().split()`` (SetSimilaritySearch)
and Arrow's ``utf8_lower`` + ``utf8_split_whitespace`` (MinHashLSH's regex split and the oracle), the
product's. 3-grams: bench/ssj_anchor.py knows words only, so the anchors read a second table,
derived here with Arrow kernels independently of the product's numba tokenizer: each lower-cased
word's distinct character 3-grams (a word of 1-2 characters is one gram, itself), every distinct
gram written as an integer code, the codes of a record joined by spaces. Word-tokenizing that table
gives exactly the 3-gram sets; the derivation's seconds are added to both anchors' times.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

NAME = "ssj"
TITLE = "Set-similarity join: GCIDE definitions and wamerican words"
DATA = {"gcide": ("gcide", "definitions as word sets", None),
        "wamerican": ("wamerican-huge", "words as character 3-gram sets (`--tokenizer qgram:3`)", 3)}
STAGES = ("tokenize", "gate_tokens", "optimize", "join", "gate_pairs", "publish")


def floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",") if x.strip()]


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--ssj-gcide-thetas", default="0.5,0.7,0.9", help="ssj: Jaccard thresholds on gcide")
    ap.add_argument("--ssj-wamerican-thetas", default="0.7,0.8,0.9", help="ssj: Jaccard thresholds on wamerican")
    ap.add_argument("--ssj-gcide-minhash-thetas", default="0.7", help="ssj: MinHashLSH's θ on gcide (empty: none)")
    ap.add_argument("--ssj-wamerican-minhash-thetas", default="0.8",
                    help="ssj: MinHashLSH's θ on wamerican (empty: none)")
    ap.add_argument("--ssj-minhash-tables", type=int, default=3, help="ssj: MinHashLSH hash tables")
    ap.add_argument("--ssj-sss-cap", type=float, default=30.0,
                    help="ssj: SetSimilaritySearch's cap, s (raised to simjoin's own seconds at that θ when lower)")
    ap.add_argument("--ssj-minhash-prefix", type=int, default=10_000,
                    help="ssj: MinHashLSH also on the first N records, capped at --ssj-minhash-prefix-cap, for its "
                         "recall against our exact pairs among them (0: not)")
    ap.add_argument("--ssj-minhash-prefix-cap", type=float, default=150.0, help="ssj: that run's cap, s")
    ap.add_argument("--ssj-minhash-cap", type=float, default=30.0,
                    help="ssj: MinHashLSH's cap, s (raised to simjoin's own seconds at that θ when lower)")
    ap.add_argument("--ssj-cap", type=float, default=600.0, help="ssj: a simjoin ssj run is killed after this, s")
    ap.add_argument("--ssj-oracle-sample", type=int, default=200,
                    help="ssj: records the sampled oracle checks where SetSimilaritySearch passed its cap")
    ap.add_argument("--ssj-records", type=int, default=0, help="ssj: only the first N records of each (0: all)")
    ap.add_argument("--ssj-seed", type=int, default=7)


# --------------------------------------------------------------------------------------------------
# data


def qgram_codes(text: pa.ChunkedArray | pa.Array, q: int) -> tuple[pa.Array, int]:
    """Each string's distinct lower-cased character q-grams (a string of 1 to q - 1 characters is one
    gram, itself; an empty one has none), as the space-joined integer codes of the grams: (the
    strings, the number of distinct grams). Arrow kernels, one pass per gram position (no per-record
    Python)."""
    low = pc.utf8_lower(pc.fill_null(text, ""))
    if isinstance(low, pa.ChunkedArray):
        low = low.combine_chunks()
    n = len(low)
    nchar = pc.utf8_length(low).to_numpy(zero_copy_only=False).astype(np.int64)
    rows, grams = [], []
    short = np.flatnonzero((nchar > 0) & (nchar < q))
    rows.append(short)
    grams.append(low.take(pa.array(short)))
    for k in range(max(int(nchar.max(initial=0)) - q + 1, 0)):
        r = np.flatnonzero(nchar >= k + q)
        rows.append(r)
        grams.append(pc.utf8_slice_codeunits(low.take(pa.array(r)), k, k + q))
    row = np.concatenate(rows)
    enc = pc.dictionary_encode(pa.chunked_array(grams, type=pa.string()).combine_chunks())
    code = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    v = max(len(enc.dictionary), 1)
    key = np.sort(row * v + code)  # (record, gram) by record; then the distinct ones (np.sort: numpy's hashed
    key = key[np.r_[True, key[1:] != key[:-1]]]  # np.unique took 12 s on wamerican's 2.8M keys)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(np.bincount(key // v, minlength=n), out=offsets[1:])
    lists = pa.ListArray.from_arrays(pa.array(offsets), pc.cast(pa.array(key % v), pa.string()))
    return pc.binary_join(lists, " "), len(enc.dictionary)


def write_delta(path: Path, t: pa.Table) -> float:
    from deltalake import write_deltalake

    t0 = time.perf_counter()
    write_deltalake(str(path), t, mode="overwrite")
    return time.perf_counter() - t0


# --------------------------------------------------------------------------------------------------
# ours


def stage_seconds(warehouse: str, out: str) -> dict:
    """Per stage of the output's last CLI run: work seconds, and the first stage's process start (the
    Spark start-up is counted where it happened: see ``spark_start`` in the section's note)."""
    from deltalake import DeltaTable

    path = os.path.join(warehouse, "_simjoin", "task_timing")
    try:
        t = DeltaTable(path).to_pandas()
    except Exception:  # no table: the run recorded nothing
        return {}
    t = t[t["output"] == os.path.abspath(out)]
    if t.empty:
        return {}
    t = t[t["invocation"] == t.sort_values("started_at")["invocation"].iloc[-1]]
    st = {r.stage: round(float(r.work_s), 2) for r in t.itertuples()}
    st["process"] = round(float(t["process_s"].fillna(0).sum()), 2)
    st["startup"] = round(float(t["startup_s"].fillna(0).sum()), 2)
    return st


def run_ours(ctx, src: str, out: str, theta: float, q: int | None, cap: float) -> dict:
    args = ["ssj", "--input", src, "--output", out, "--threshold", str(theta), "--no-incremental"]
    if q:
        args += ["--tokenizer", f"qgram:{q}"]
    try:
        s, last = ctx.simjoin(args, timeout=cap)
    except subprocess.TimeoutExpired:
        return {"status": "cap"}
    import ssj as B

    plan = B.plan_info(out)
    stats = B.stats_info(out)
    stats.pop("unit_rows", None)
    return {"status": "ok", "seconds": round(s, 2), "summary": last, "pairs": B.pair_count(out), **plan, **stats,
            "stages": stage_seconds(os.environ["SIMJOIN_WAREHOUSE"], out)}


# --------------------------------------------------------------------------------------------------
# the run


def run(a: argparse.Namespace, ctx) -> dict:
    import real_data
    import ssj as B  # bench/ssj.py: the anchors' subprocesses, the pair keys, the oracle

    n_max = min(20_000, a.ssj_records or 20_000) if ctx.quick else a.ssj_records
    work = ctx.work / NAME
    logs = work / "logs"
    work.mkdir(parents=True, exist_ok=True)
    mh_args = SimpleNamespace(minhash_cap=a.ssj_minhash_cap, seed=a.ssj_seed, minhash_vectorizer="hashing",
                              minhash_features=1 << 20)
    thetas = {"gcide": floats(a.ssj_gcide_thetas), "wamerican": floats(a.ssj_wamerican_thetas)}
    mh_thetas = {"gcide": floats(a.ssj_gcide_minhash_thetas), "wamerican": floats(a.ssj_wamerican_minhash_thetas)}
    res: dict = {"datasets": [],
                 "args": {k: getattr(a, k) for k in vars(a) if k.startswith("ssj_")} | {"records_cap": n_max}}
    for name in ("gcide", "wamerican"):
        label, what, q = DATA[name]
        t0 = time.perf_counter()
        table = getattr(real_data, name)()
        if n_max:
            table = table.slice(0, n_max)
        load_s = time.perf_counter() - t0
        d = work / name
        src = d / "input"
        write_s = write_delta(src, table)
        ds = {"name": name, "label": label, "what": what, "q": q, "records": table.num_rows,
              "load_s": round(load_s, 1), "write_s": round(write_s, 1), "runs": [], "minhash": []}
        # the anchors' input: the records' token sets as words (3-grams: their integer codes)
        anchor_src, derive_s = str(src), 0.0
        if q:
            t0 = time.perf_counter()
            codes, ds["grams"] = qgram_codes(table.column("text"), q)
            derive_s = time.perf_counter() - t0
            anchor_src = str(d / "input_qgrams")
            write_delta(Path(anchor_src), pa.table({"id": table.column("id"), "text": codes}))
            ds["derive_s"] = round(derive_s, 2)
        del table
        t0 = time.perf_counter()
        tk = B.Tokens(anchor_src)
        ds["avg_tokens"] = round(tk.avg_len, 2)
        ds["vocab"] = tk.vocab_size
        ds["max_tokens"] = int(tk.lens.max(initial=0))
        print(f"ssj {name}: {tk.n:,} records (load {load_s:.1f}s, Delta write {write_s:.1f}s), avg "
              f"{tk.avg_len:.1f} distinct tokens, {tk.vocab_size:,} tokens", flush=True)
        exact: dict[float, np.ndarray] = {}
        plotted = False
        for theta in thetas[name]:
            out = str(d / f"pairs_{theta}")
            o = run_ours(ctx, str(src), out, theta, q, a.ssj_cap)
            r = {"theta": theta, "ours": o}
            if o["status"] != "ok":
                print(f"  θ={theta}: simjoin over its {a.ssj_cap:g}s cap", flush=True)
                ds["runs"].append(r)
                continue
            ours, rows_read = B.pair_keys(out, tk)
            r["duplicates"] = rows_read - len(ours)
            # a cap never under simjoin's own time: an anchor past it is slower than ours
            cap = float(max(a.ssj_sss_cap, np.ceil(o["seconds"])))
            s = B.run_sss(anchor_src, theta, cap, str(d / f"sss_{theta}"), logs)
            r["sss"] = {"status": s["status"], "cap": cap}
            if s["status"] == "ok":
                pr = s["pairs_arr"]
                ref = np.unique(tk.keys(pr[:, 0], pr[:, 1]))
                missing, extra = B.compare(ref, ours)
                r["sss"].update({"seconds": round(s["seconds"] + derive_s, 2),
                                 "join_s": round(s["join_seconds"], 2), "pairs": len(ref), "missing": missing,
                                 "extra": extra})
                if missing or extra:
                    r["sss"]["missing_ex"] = np.setdiff1d(ref, ours)[:5].tolist()
                    r["sss"]["extra_ex"] = np.setdiff1d(ours, ref)[:5].tolist()
            elif s["status"] != "cap":
                r["sss"]["stderr"] = s.get("stderr", "")[-500:]
            if s["status"] != "ok":
                r["oracle"] = B.oracle(tk, out, theta, a.ssj_oracle_sample, a.ssj_seed)
            r["exact"] = exact_ok(r)
            if theta in mh_thetas[name]:
                exact[theta] = ours
            if not plotted:
                r["plots"] = ctx.report(out, f"ssj_{name}_{theta}")
                plotted = True
            print(f"  θ={theta}: simjoin {o['seconds']:.1f}s {o['pairs']:,} pairs ({fplan(o)}; stages "
                  f"{fstages(o.get('stages', {}))}); SetSimilaritySearch "
                  f"{r['sss'].get('seconds', r['sss']['status'])}; {fcheck(r)}", flush=True)
            ds["runs"].append(r)
            for f in d.glob(f"sss_{theta}.*"):
                f.unlink()
        for theta in mh_thetas[name]:
            ex = exact.get(theta)
            ours_s = next((r["ours"].get("seconds") for r in ds["runs"] if r["theta"] == theta), None) or 0.0
            mh_args.minhash_cap = float(max(a.ssj_minhash_cap, np.ceil(ours_s)))
            m = B.run_minhash(anchor_src, theta, a.ssj_minhash_tables, mh_args, str(d / f"minhash_{theta}"), logs)
            r = {"theta": theta, "tables": a.ssj_minhash_tables, "status": m["status"], "cap": mh_args.minhash_cap,
                 "exact_pairs": None if ex is None else len(ex)}
            if m["status"] == "ok":
                found = np.unique(tk.keys(m["pairs_arr"][:, 0], m["pairs_arr"][:, 1]))
                hit = len(np.intersect1d(found, ex, assume_unique=True)) if ex is not None else None
                r.update({"seconds": round(m["seconds"] + derive_s, 2), "setup_s": round(m["setup_seconds"], 1),
                          "pairs": len(found),
                          "recall": hit / len(ex) if ex is not None and len(ex) else None,
                          "precision": hit / len(found) if hit is not None and len(found) else None})
            elif m["status"] != "cap":
                r["stderr"] = m.get("stderr", "")[-500:]
            if a.ssj_minhash_prefix and ex is not None:
                r["prefix"] = minhash_prefix(B, tk, anchor_src, theta, ex, a, mh_args, d, logs)
            print(f"  MinHashLSH θ={theta}: {r}", flush=True)
            ds["minhash"].append(r)
        tk.free_index()
        del tk, exact
        res["datasets"].append(ds)
        shutil.rmtree(d, ignore_errors=True)
    return res


# --------------------------------------------------------------------------------------------------
# the report


def exact_ok(r: dict) -> bool:
    if r.get("ours", {}).get("status") != "ok" or r.get("duplicates"):
        return False
    s = r.get("sss", {})
    if s.get("status") == "ok":
        return not (s["missing"] or s["extra"])
    o = r.get("oracle")
    return bool(o) and not (o["missing"] or o["extra"] or o["duplicates"])


def fcheck(r: dict) -> str:
    s, o = r.get("sss", {}), r.get("oracle")
    parts = []
    if s.get("status") == "ok":
        parts.append("equal, pair for pair" if not (s["missing"] or s["extra"])
                     else f"**NOT equal**: {s['missing']:,} missing, {s['extra']:,} extra")
    if r.get("duplicates"):
        parts.append(f"**{r['duplicates']:,} duplicate rows**")
    if o:
        ok = not (o["missing"] or o["extra"] or o["duplicates"])
        parts.append(f"oracle: {o['records']} records, {o['partners']:,} partners, "
                     + ("all found" if ok else f"**{o['missing']} missing, {o['extra']} extra**"))
    return "; ".join(parts) or "not checked"


def fs(x: float | None) -> str:
    return "–" if x is None else f"{x:,.1f}"


def fx(x: float) -> str:
    return f"{x:.1f}×" if x >= 1 else f"{x:.2f}×"


def fplan(o: dict) -> str:
    if o.get("t") is None:
        return "–"
    s = f"t={o['t']} n={o['n']} m={o['m']}"
    if o.get("split"):
        s += " split " + ",".join(f"{k}:{v}" for k, v in list(o["split"].items())[:4])
    return s


def fstages(st: dict) -> str:
    if not st:
        return "–"
    return " / ".join(fs(st.get(k)) for k in STAGES)


def minhash_prefix(B, tk, src: str, theta: float, ex: np.ndarray, a: argparse.Namespace, mh_args, d: Path,
                   logs: Path) -> dict:
    """MinHashLSH on the first ``--ssj-minhash-prefix`` records (ids 1..N, file order), capped at
    ``--ssj-minhash-prefix-cap``: its recall and precision against our exact pairs among them (a
    pair's key is (min rank) * n + max rank, ranks = id - 1, so a pair is among them iff its larger
    rank is below N)."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    n = min(a.ssj_minhash_prefix, tk.n)
    t = DeltaTable(src).to_pyarrow_table()
    sub_src = d / f"minhash_prefix_{theta}"
    write_delta(sub_src, t.filter(pc.less_equal(t.column("id"), n)))
    want = ex[(ex % np.int64(tk.n)) < n]
    cap, mh_args.minhash_cap = mh_args.minhash_cap, a.ssj_minhash_prefix_cap
    try:
        m = B.run_minhash(str(sub_src), theta, a.ssj_minhash_tables, mh_args, str(d / f"minhash_p_{theta}"), logs)
    finally:
        mh_args.minhash_cap = cap
    r: dict = {"records": n, "status": m["status"], "cap": a.ssj_minhash_prefix_cap, "exact_pairs": len(want)}
    if m["status"] == "ok":
        found = np.unique(tk.keys(m["pairs_arr"][:, 0], m["pairs_arr"][:, 1]))
        hit = len(np.intersect1d(found, want, assume_unique=True))
        r.update({"seconds": round(m["seconds"], 2), "pairs": len(found),
                  "recall": hit / len(want) if len(want) else None,
                  "precision": hit / len(found) if len(found) else None})
    return r


def headline(res: dict) -> list[dict]:
    out = []
    for ds in res["datasets"]:
        mh = {m["theta"]: m for m in ds["minhash"]}
        for r in ds["runs"]:
            o = r["ours"]
            if o["status"] != "ok":
                continue
            s = r.get("sss", {})
            anchors = [("SetSimilaritySearch", s.get("seconds") if s.get("status") == "ok" else None)]
            if r["theta"] in mh:
                m = mh[r["theta"]]
                pre = m.get("prefix") or {}
                rec = (f" (recall {m['recall']:.3f})" if m.get("recall") is not None else
                       f" (recall {pre['recall']:.3f} on the first {pre['records']:,})"
                       if pre.get("recall") is not None else "")
                anchors.append((f"MinHashLSH k={m['tables']}{rec}",
                                m.get("seconds") if m["status"] == "ok" else None))
            out.append({"part": "SSJ", "data": ds["label"],
                        "workload": f"{ds['what'].split(' (')[0]}, Jaccard ≥ {r['theta']}",
                        "pairs": o["pairs"], "exact": r["exact"], "ours_s": o["seconds"], "anchors": anchors})
    return out


def with_caps(res: dict) -> dict:
    """Results of a run before the caps were stored per anchor run: the option's cap."""
    ar = res["args"]
    for ds in res["datasets"]:
        for r in ds["runs"]:
            if "sss" in r:
                r["sss"].setdefault("cap", ar["ssj_sss_cap"])
        for m in ds["minhash"]:
            m.setdefault("cap", ar["ssj_minhash_cap"])
    return res


def section(res: dict) -> list[str]:
    res = with_caps(res)
    ar = res["args"]
    lines = [f"## {TITLE}", ""]
    for ds in res["datasets"]:
        lines.append(f"- **{ds['label']}**: {ds['records']:,} records, {ds['what']}: {ds['avg_tokens']:.1f} distinct "
                     f"tokens a record on average (at most {ds['max_tokens']:,}), {ds['vocab']:,} distinct tokens. "
                     f"Written once to Delta in {ds['write_s']:.1f} s (not timed below)"
                     + (f"; the anchors' 3-gram table derived in {ds['derive_s']:.1f} s (added to their times)."
                        if ds.get("q") else "."))
    lines += [
        "",
        "Ours: `simjoin ssj --no-incremental` (plus `--tokenizer qgram:3` on wamerican) as a fresh process, timed "
        "end to end: Python and JVM start, tokenize with the row rules, two quality gates, the optimizer's slice "
        "measurements, the distributed PPJoin, publish to Delta. SetSimilaritySearch: `all_pairs` (exact, one "
        f"thread), tokenize + join timed (its Delta read is not), killed at a cap: {ar['ssj_sss_cap']:g} s, or "
        "simjoin's own seconds at that θ when longer (past it, SetSimilaritySearch is the slower); its pair set "
        "is compared with ours pair for pair. Where it passed the cap, a sampled oracle "
        f"({ar['ssj_oracle_sample']} seeded records, every partner by brute force) checks ours. Stages: seconds of "
        "work per stage from the task-timing table (tokenize / token gate / optimize / join / pairs gate / "
        "publish; the gates run beside the next stage).",
        "",
        "| data | θ | pairs | equal to the exact anchor | simjoin s | SetSimilaritySearch s | speed-up | plan | "
        "stages s |",
        "|---|---:|---:|:--|---:|---:|---:|:--|:--|",
    ]
    for ds in res["datasets"]:
        for r in ds["runs"]:
            o = r["ours"]
            if o["status"] != "ok":
                lines.append(f"| {ds['name']} | {r['theta']} | – | – | > {ar['ssj_cap']:g} (killed) | – | – | – | – |")
                continue
            s = r.get("sss", {})
            if s.get("status") == "ok":
                sss, sp = fs(s["seconds"]), fx(s["seconds"] / o["seconds"])
            elif s.get("status") == "cap":
                sss, sp = f"> {s['cap']:g} (cap)", f"> {fx(s['cap'] / o['seconds'])}"
            else:
                sss, sp = s.get("status", "–"), "–"
            lines.append(f"| {ds['name']} | {r['theta']} | {o['pairs']:,} | {fcheck(r)} | {fs(o['seconds'])} | {sss} | "
                         f"{sp} | {fplan(o)} | {fstages(o.get('stages', {}))} |")
    mh = [(ds, m) for ds in res["datasets"] for m in ds["minhash"]]
    if mh:
        lines += ["", "Spark ML MinHashLSH (approximate): local[2] in a subprocess, the same tokens, HashingTF(binary, "
                  "2^20 features), `approxSimilarityJoin` at Jaccard distance 1 - θ; timed: tokenize + vectorize + "
                  "fit + join + collect (not the session start nor loading the input), killed at "
                  f"{ar['ssj_minhash_cap']:g} s or simjoin's own seconds when longer. Recall and precision against "
                  "our exact pair set (equal to "
                  "SetSimilaritySearch's where it finished).", "",
                  "| data | θ | hash tables | exact pairs (ours) | MinHashLSH pairs | recall | precision "
                  "| MinHashLSH s | simjoin s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for ds, m in mh:
            ours = next((r["ours"] for r in ds["runs"] if r["theta"] == m["theta"]), {})
            if m["status"] == "ok":
                t, found = fs(m["seconds"]), f"{m['pairs']:,}"
                rec = "–" if m.get("recall") is None else f"{m['recall']:.4f}"
                prec = "–" if m.get("precision") is None else f"{m['precision']:.4f}"
            else:
                t = f"> {m['cap']:g} (cap)" if m["status"] == "cap" else m["status"]
                found = rec = prec = "n/a"
            ex = "–" if m.get("exact_pairs") is None else f"{m['exact_pairs']:,}"
            lines.append(f"| {ds['name']} | {m['theta']} | {m['tables']} | {ex} | {found} | {rec} | {prec} | {t} | "
                         f"{fs(ours.get('seconds'))} |")
            pre = m.get("prefix")
            if pre:
                head = (f"| {ds['name']}, first {pre['records']:,} | {m['theta']} | {m['tables']} | "
                        f"{pre['exact_pairs']:,}")
                if pre["status"] == "ok":
                    rec = "–" if pre.get("recall") is None else f"{pre['recall']:.4f}"
                    prec = "–" if pre.get("precision") is None else f"{pre['precision']:.4f}"
                    lines.append(f"{head} | {pre['pairs']:,} | {rec} | {prec} | {fs(pre['seconds'])} | - |")
                else:
                    lines.append(f"{head} | n/a | n/a | n/a | > {pre['cap']:g} (cap) | - |")
    lines += ["", *reading(res)]
    return lines


def reading(res: dict) -> list[str]:
    """The note under the tables, from the measured numbers: who wins, by how much, and where the time went."""
    runs = [(ds, r) for ds in res["datasets"] for r in ds["runs"] if r["ours"]["status"] == "ok"]
    bad = [f"{ds['name']} θ={r['theta']}" for ds, r in runs if not r["exact"]]
    out = ["**Reading.** " + ("Exact everywhere: every pair set equals SetSimilaritySearch's pair for pair"
                              + (" (or, past its cap, passes the sampled oracle)." if any(
                                  r.get("oracle") for _, r in runs) else ".")
                              if not bad else f"**Not exact: {', '.join(bad)}** (see the table).")]
    for ds in res["datasets"]:
        rs = [r for r in ds["runs"] if r["ours"]["status"] == "ok"]
        if not rs:
            continue
        won, lost, capped = [], [], []
        for r in rs:
            s = r.get("sss", {})
            if s.get("status") == "ok":
                (won if s["seconds"] >= r["ours"]["seconds"] else lost).append(r)
            elif s.get("status") == "cap":
                capped.append(r)
        bits = []
        if won:
            bits.append("simjoin is faster than SetSimilaritySearch at θ = " + ", ".join(
                f"{r['theta']} ({fx(r['sss']['seconds'] / r['ours']['seconds'])})" for r in won))
        if capped:
            bits.append("SetSimilaritySearch passed its cap, so simjoin is faster, at θ = "
                        + ", ".join(f"{r['theta']} (simjoin {fs(r['ours']['seconds'])} s, SetSimilaritySearch "
                                    f"> {r['sss']['cap']:g} s: > {fx(r['sss']['cap'] / r['ours']['seconds'])})"
                                    for r in capped))
        if lost:
            bits.append("simjoin **loses** at θ = " + ", ".join(
                f"{r['theta']} ({fs(r['ours']['seconds'])} s against {fs(r['sss']['seconds'])} s: "
                f"{fx(r['ours']['seconds'] / r['sss']['seconds'])} slower, "
                f"{fs(r['ours']['seconds'] - r['sss']['seconds'])} s more)" for r in lost))
        line = f"- **{ds['label']}**: " + "; ".join(bits) + "."
        # where simjoin's time goes: the fixed part (process, JVM, tokenize, gates, optimizer, publish) vs the join
        st = [(r, r["ours"].get("stages") or {}) for r in rs]
        st = [(r, s) for r, s in st if "join" in s]
        if st:
            def fixed(r, s):
                return r["ours"]["seconds"] - s["join"]
            line += (" Of simjoin's seconds, the join stage (the PPJoin units) takes "
                     + ", ".join(f"{fs(s['join'])} s at θ={r['theta']}" for r, s in st)
                     + "; the rest (process and JVM start, tokenize, gates, optimizer, publish) "
                     + ", ".join(f"{fs(fixed(r, s))} s" for r, s in st)
                     + f", of which tokenize (with the JVM start in it) {fs(st[0][1].get('tokenize'))} s and "
                       f"optimize {fs(st[0][1].get('optimize'))} s at θ={st[0][0]['theta']}.")
            if lost:
                r = lost[0]
                s = r["ours"].get("stages") or {}
                line += (f" SetSimilaritySearch has none of that fixed cost: its whole run at θ={r['theta']} "
                         f"({fs(r['sss']['seconds'])} s) is shorter than simjoin's run outside its join stage "
                         f"({fs(fixed(r, s) if 'join' in s else None)} s)." if "join" in s
                         and r["sss"]["seconds"] < fixed(r, s) else
                         f" SetSimilaritySearch's join at θ={r['theta']} takes {fs(r['sss']['join_s'])} s.")
        out.append(line)
    for ds in res["datasets"]:
        for m in ds["minhash"]:
            ours = next((r["ours"] for r in ds["runs"] if r["theta"] == m["theta"]), {})
            if m["status"] == "ok" and m.get("recall") is not None:
                cmp = (f"{fx(m['seconds'] / ours['seconds'])} simjoin's time" if ours.get("seconds") else "")
                out.append(f"- **MinHashLSH on {ds['label']}, θ={m['theta']}**: {fs(m['seconds'])} s ({cmp}), recall "
                           f"{m['recall']:.3f} (misses {m['exact_pairs'] - round(m['recall'] * m['exact_pairs']):,} "
                           f"of {m['exact_pairs']:,} pairs), precision {m['precision']:.3f}.")
            elif m["status"] == "cap":
                out.append(f"- **MinHashLSH on {ds['label']}, θ={m['theta']}**: past its {m['cap']:g} s cap "
                           f"(simjoin {fs(ours.get('seconds'))} s, exact, end to end).")
            pre = m.get("prefix")
            if pre and pre["status"] == "ok" and pre.get("recall") is not None:
                miss = pre["exact_pairs"] - round(pre["recall"] * pre["exact_pairs"])
                vs = ("longer than" if ours.get("seconds") and pre["seconds"] > ours["seconds"] else "against")
                out.append(f"  On the first {pre['records']:,} records it takes {fs(pre['seconds'])} s for recall "
                           f"{pre['recall']:.3f} (misses {miss:,} of {pre['exact_pairs']:,} pairs) and precision "
                           f"{pre['precision']:.3f}: {vs} simjoin's {fs(ours.get('seconds'))} s for all "
                           f"{ds['records']:,} records, exactly.")
            elif pre:
                out.append(f"  On the first {pre['records']:,} records too it passes its {pre['cap']:g} s cap.")
    return out
