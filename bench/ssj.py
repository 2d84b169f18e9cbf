"""Benchmark (issue 16, set-similarity join at ten million records): `simjoin ssj` end to end against
SetSimilaritySearch.all_pairs (exact) and Spark ML MinHashLSH (approximate).

For every family and size, ``simjoin generate sets`` writes the token sets once (family zipf: the
default lengths; aol: ``--lengths aol``; long: ``--lengths long``; near-duplicates: ``--dist
near-duplicates``); then for every θ ``simjoin ssj`` runs as a subprocess, timed end to end (what a
user waits: Python and Spark start-up, tokenize, quality gates, optimizer, join, publish to Delta).
From its Delta tables: the pairs, the plan (t, n, m, split modgroups) and the per-unit stats
(wall-time spread slowest/fastest over the units with records, candidates per unit).

Exactness: SetSimilaritySearch.all_pairs runs in a subprocess (``bench/ssj_anchor.py``) capped at
``--sss-cap`` seconds; a run over the cap is killed and reported as "> cap" (and not tried at the larger
sizes of that family and θ). Its pair set must equal simjoin's. Where it did not finish, a sampled
oracle checks simjoin instead: ``--oracle-sample`` seeded random records, each with ALL its partners
found by brute force (a token -> records index, overlap counts, Jaccard >= θ), against simjoin's
pairs involving them.

MinHashLSH (Spark ML, local[2], in a subprocess capped at ``--minhash-cap``) at ``--minhash-size``
records: its time, recall and precision against simjoin's exact pair set.

Writes <results>/ssj.md, ssj.json and ssj_scaling.png after every row (an interrupted run leaves
its partial results).

    .venv/bin/python bench/ssj.py [--sizes 200000,1000000,3000000,10000000] [--thetas 0.6,0.8,0.9]
        [--families zipf,aol,near-duplicates] [--results bench/results] [--keep-work]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ANCHOR = Path(__file__).resolve().parent / "ssj_anchor.py"
TIMED_OUT = 3  # ssj_anchor's exit status when its cap fired
def universe_flags(fam: str, rows: int, per_row: float) -> list[str]:
    """A vocabulary that grows with the records (aol and long have their own, larger ones)."""
    if per_row <= 0 or fam not in ("zipf", "near-duplicates"):
        return []
    return ["--universe", str(max(20_000, int(rows * per_row)))]


FAMILIES = {
    "zipf": [],
    "aol": ["--lengths", "aol"],
    "long": ["--lengths", "long"],
    "near-duplicates": ["--dist", "near-duplicates"],
}
EPS = 1e-12
GOALS = {"zipf_10m_theta06_s": 600.0, "speedup_06": 40.0, "speedup_08": 30.0, "spread": 1.5, "growth_1m_10m": 12.0}


def log(msg: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {msg}", flush=True)


def floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",") if x.strip()]


def ints(s: str) -> list[int]:
    return [int(float(x)) for x in s.split(",") if x.strip()]


# --------------------------------------------------------------------------------------------------
# subprocesses


@dataclass
class Proc:
    rc: int | None  # None: killed at the hard timeout
    seconds: float
    stdout: str
    stderr: str


def run(args: list[str], timeout: float | None = None, log_path: Path | None = None,
        env: dict[str, str] | None = None) -> Proc:
    """Run ``args`` in its own process group (so a JVM it starts goes with it); kill the group at
    ``timeout`` seconds. Output goes to files (``log_path`` if given)."""
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="ssj-bench-proc-"))
    out_p, err_p = tmp / "stdout", tmp / "stderr"
    with open(out_p, "w") as out, open(err_p, "w") as err:
        p = subprocess.Popen(args, stdout=out, stderr=err, cwd=ROOT, start_new_session=True, env=env)
        try:
            rc: int | None = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        # whatever the child left in its group (a JVM after a cap exit, or everything at the timeout)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        if rc is None:
            p.wait()
    seconds = time.perf_counter() - t0
    stdout, stderr = out_p.read_text(errors="replace"), err_p.read_text(errors="replace")
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(f"$ {' '.join(args)}\n--- stdout\n{stdout}\n--- stderr\n{stderr}")
    shutil.rmtree(tmp, ignore_errors=True)
    return Proc(rc, seconds, stdout, stderr)


def must(p: Proc, what: str) -> Proc:
    if p.rc != 0:
        raise SystemExit(f"{what} failed (status {p.rc}):\n{p.stderr[-3000:]}")
    return p


def last_line(s: str) -> str:
    lines = s.strip().splitlines()
    return lines[-1] if lines else ""


# --------------------------------------------------------------------------------------------------
# the input: tokens as int32 CSR (the oracle's brute force), ids and pair keys


def _split(text: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """simjoin's word tokenizer without the dedupe: (row of every token, the tokens), empty ones dropped."""
    sp = pc.utf8_split_whitespace(pc.utf8_lower(pc.fill_null(text, "")))
    if isinstance(sp, pa.ChunkedArray):
        sp = sp.combine_chunks()
    offs = sp.offsets.to_numpy().astype(np.int64)
    values = sp.values.slice(int(offs[0]), int(offs[-1] - offs[0]))
    row = np.repeat(np.arange(len(sp), dtype=np.int64), np.diff(offs))
    keep = pc.not_equal(values, "").to_numpy(zero_copy_only=False)
    return row[keep], values.filter(pa.array(keep))


class Tokens:
    """The input's distinct tokens per record as int32 ids (records in table order), built in chunks
    with Arrow kernels (no per-record Python); the token -> records index is built on first use."""

    CHUNK = 1_000_000

    def __init__(self, path: str) -> None:
        from deltalake import DeltaTable

        t = DeltaTable(path).to_pyarrow_table(columns=["id", "text"])
        self.ids = t.column("id").to_numpy().astype(np.int64)
        self.n = len(self.ids)
        self.sorted_ids = np.sort(self.ids)
        if self.n and np.any(self.sorted_ids[1:] == self.sorted_ids[:-1]):
            raise SystemExit(f"{path}: ids are not unique")
        text = t.column("text")
        del t
        parts = [pc.unique(_split(text.slice(o, self.CHUNK))[1]) for o in range(0, self.n, self.CHUNK)]
        vocab = pc.unique(pa.chunked_array(parts, type=pa.string())) if parts else pa.array([], pa.string())
        self.vocab_size = V = max(len(vocab), 1)
        toks, lens = [], []
        for o in range(0, self.n, self.CHUNK):
            chunk = text.slice(o, self.CHUNK)
            row, vals = _split(chunk)
            tok = pc.index_in(vals, value_set=vocab).to_numpy().astype(np.int64)
            key = np.unique(row * V + tok)  # distinct (row, token), sorted by row
            toks.append((key % V).astype(np.int32))
            lens.append(np.bincount(key // V, minlength=len(chunk)).astype(np.int32))
        self.tok = np.concatenate(toks) if toks else np.zeros(0, np.int32)
        self.lens = np.concatenate(lens) if lens else np.zeros(0, np.int32)
        self.ptr = np.zeros(self.n + 1, np.int64)
        np.cumsum(self.lens, out=self.ptr[1:])
        self.post: np.ndarray | None = None
        self.tok_ptr: np.ndarray | None = None

    @property
    def avg_len(self) -> float:
        return float(self.lens.mean()) if self.n else 0.0

    def rank(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.sorted_ids, ids)

    def keys(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """One int64 per unordered pair of ids."""
        ra, rb = self.rank(np.asarray(a, np.int64)), self.rank(np.asarray(b, np.int64))
        return np.minimum(ra, rb) * np.int64(self.n) + np.maximum(ra, rb)

    def _index(self) -> None:
        if self.post is not None:
            return
        rec = np.repeat(np.arange(self.n, dtype=np.int32), self.lens)
        order = np.argsort(self.tok, kind="stable")
        self.post = rec[order]
        del order, rec
        self.tok_ptr = np.zeros(self.vocab_size + 1, np.int64)
        np.cumsum(np.bincount(self.tok, minlength=self.vocab_size), out=self.tok_ptr[1:])

    def partners(self, i: int, theta: float) -> np.ndarray:
        """Positions of ALL records j != i with Jaccard(i, j) >= θ: brute force over every record sharing
        a token with i (overlap = number of shared tokens)."""
        self._index()
        assert self.post is not None and self.tok_ptr is not None
        toks = self.tok[self.ptr[i]:self.ptr[i + 1]]
        if len(toks) == 0:
            return np.zeros(0, np.int64)
        g = np.concatenate([self.post[self.tok_ptr[t]:self.tok_ptr[t + 1]] for t in toks])
        cnt = np.bincount(g, minlength=self.n)
        cand = np.flatnonzero(cnt)
        o = cnt[cand].astype(np.float64)
        jac = o / (len(toks) + self.lens[cand].astype(np.float64) - o)
        cand = cand[(jac >= theta - EPS) & (cand != i)]
        return cand

    def free_index(self) -> None:
        self.post = self.tok_ptr = None


def pair_count(path: str) -> int:
    from deltalake import DeltaTable

    return DeltaTable(path).to_pyarrow_dataset().count_rows()


def pair_keys(path: str, tk: Tokens, filt=None) -> tuple[np.ndarray, int]:
    """(the distinct pair keys of a pairs table, the number of rows), streamed in batches."""
    from deltalake import DeltaTable

    ds = DeltaTable(path).to_pyarrow_dataset()
    parts, rows = [], 0
    for b in ds.to_batches(columns=["left_id", "right_id"], filter=filt):
        rows += b.num_rows
        parts.append(tk.keys(b.column(0).to_numpy(), b.column(1).to_numpy()))
    k = np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
    return k, rows


def compare(ref: np.ndarray, ours: np.ndarray) -> tuple[int, int]:
    """(missing from ours, extra in ours); both arrays distinct keys."""
    return (len(np.setdiff1d(ref, ours, assume_unique=True)), len(np.setdiff1d(ours, ref, assume_unique=True)))


def oracle(tk: Tokens, pairs_path: str, theta: float, sample: int, seed: int) -> dict:
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    pos = np.sort(rng.choice(tk.n, size=min(sample, tk.n), replace=False))
    ref = []
    for i in pos:
        j = tk.partners(int(i), theta)
        ref.append(tk.keys(np.full(len(j), tk.ids[i]), tk.ids[j]))
    ref_k = np.unique(np.concatenate(ref)) if ref else np.zeros(0, np.int64)
    s = pa.array(tk.ids[pos])
    ours, rows = pair_keys(pairs_path, tk, filt=pc.field("left_id").isin(s) | pc.field("right_id").isin(s))
    missing, extra = compare(ref_k, ours)
    return {"records": len(pos), "partners": len(ref_k), "missing": missing, "extra": extra,
            "duplicates": rows - len(ours), "seconds": round(time.perf_counter() - t0, 1)}


# --------------------------------------------------------------------------------------------------
# simjoin's plan and stats


def plan_info(out: str) -> dict:
    from deltalake import DeltaTable

    p = DeltaTable(out + "_plan").to_pyarrow_table().to_pydict()
    rows = [dict(zip(p, v)) for v in zip(*p.values())]
    units = [r for r in rows if r["kind"] == "unit"]
    chosen = [r for r in rows if r["kind"] == "candidate" and r.get("verdict") == "chosen"]
    n = units[0]["n"] if units else None
    m = units[0]["m"] if units else None
    t = chosen[0]["t"] if chosen else None
    node_mod = {}
    for r in units:
        node_mod[r["node"]] = r["mod"]
    split = {int(k): int(v) for k, v in sorted(node_mod.items()) if m is not None and v is not None and v != m}
    return {"units": len(units), "t": t, "n": n, "m": m, "split": split}


def stats_info(out: str) -> dict:
    from deltalake import DeltaTable

    s = DeltaTable(out + "_stats").to_pyarrow_table().to_pydict()
    rows = [dict(zip(s, v)) for v in zip(*s.values())]
    busy = [r for r in rows if (r["records_indexed"] or 0) + (r["records_probed"] or 0) > 0]
    walls = [r["wall_seconds"] for r in busy if r["wall_seconds"] and r["wall_seconds"] > 0]
    # the spread of the units' CPU seconds (their own work): on 2 cores a unit's wall time also holds
    # whatever ran beside it (the background quality gate, the other slot's Python worker)
    cpus = [r["cpu_seconds"] for r in busy if r.get("cpu_seconds")]
    cands = [r["candidates"] or 0 for r in busy]
    return {"units_with_records": len(busy),
            "spread": (round(max(cpus) / min(cpus), 2) if cpus
                       else round(max(walls) / min(walls), 2) if walls else None),
            "wall_spread": round(max(walls) / min(walls), 2) if walls else None,
            "unit_wall_max_s": round(max(walls), 2) if walls else None,
            "cand_max": max(cands) if cands else None,
            "cand_mean": round(sum(cands) / len(cands), 1) if cands else None,
            # per unit, for fitting the optimizer's cost weights to what the units really took
            "unit_rows": [{k: r.get(k) for k in ("unit", "node", "modgroup", "records_indexed", "records_probed",
                                                 "candidates", "verified", "results", "est_cost", "wall_seconds",
                                                 "cpu_seconds")} for r in busy]}


def fmt_plan(r: dict) -> str:
    if r.get("t") is None and r.get("n") is None:
        return "–"
    s = f"t={r['t']} n={r['n']} m={r['m']}"
    if r.get("split"):
        items = [f"{k}:{v}" for k, v in r["split"].items()]
        s += " split " + (",".join(items) if len(items) <= 6 else ",".join(items[:6]) + f",… ({len(items)} nodes)")
    return s


def rm_outputs(work: Path, stem: str) -> None:
    for p in work.glob(stem + "*"):
        shutil.rmtree(p, ignore_errors=True)


# --------------------------------------------------------------------------------------------------
# results


def machine() -> str:
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem = float("nan")
    return (f"{os.cpu_count()} cores, {mem:.0f} GiB RAM, {platform.system()} {platform.machine()}, "
            f"Python {platform.python_version()}")


def fnum(x, nd=1) -> str:
    if x is None:
        return "–"
    if isinstance(x, float) and math.isnan(x):
        return "–"
    return f"{x:,.{nd}f}" if isinstance(x, float) else f"{x:,}"


def fsss(r: dict) -> str:
    st = r["sss_status"]
    if st == "ok":
        return fnum(r["sss_s"])
    if st == "cap":
        return f"> {r['sss_cap']:,g} (cap)"
    if st == "skipped":
        return "skipped (capped at smaller size)"
    return st


def fx(x: float) -> str:
    """A speed ratio: 41.3×, 1.6×, 0.13×."""
    return f"{x:.1f}×" if x >= 1 else f"{x:.2g}×"


def fspeed(r: dict) -> str:
    if r.get("simjoin_s") is None:
        return "–"
    if r["sss_status"] == "ok":
        return fx(r["sss_s"] / r["simjoin_s"])
    if r["sss_status"] == "cap":
        return f"> {fx(r['sss_cap'] / r['simjoin_s'])}"
    return "–"


def fcheck(r: dict) -> str:
    parts = []
    if r.get("sss_status") == "ok":
        parts.append("identical" if r["sss_missing"] == 0 and r["sss_extra"] == 0 and not r.get("duplicates")
                     else f"**DIFFERENT**: {r['sss_missing']} missing, {r['sss_extra']} extra"
                          + (f", {r['duplicates']} duplicate rows" if r.get("duplicates") else ""))
    o = r.get("oracle")
    if o:
        res = ("all found" if o["missing"] == 0 and o["extra"] == 0 and not o["duplicates"]
               else f"**{o['missing']} missing, {o['extra']} extra**"
                    + (f", {o['duplicates']} duplicate rows" if o["duplicates"] else ""))
        parts.append(f"oracle: {o['records']} records, {o['partners']:,} partners, {res}")
    return "; ".join(parts) if parts else "not checked"


def row_ok(r: dict) -> bool:
    if r.get("sss_status") == "ok" and (r["sss_missing"] or r["sss_extra"] or r.get("duplicates")):
        return False
    o = r.get("oracle")
    return not (o and (o["missing"] or o["extra"] or o["duplicates"]))


def goals(rows: list[dict]) -> list[str]:
    ok = [r for r in rows if r.get("simjoin_s") is not None]
    out = []
    # 1. 10M zipf θ=0.6 within 10 minutes
    g = GOALS["zipf_10m_theta06_s"]
    hit = [r for r in ok if r["family"] == "zipf" and r["records"] == 10_000_000 and abs(r["theta"] - 0.6) < 1e-9]
    if hit:
        s = hit[0]["simjoin_s"]
        out.append(f"- 10M records, zipf, θ=0.6 in ≤ {g:.0f} s: {s:,.0f} s — "
                   + ("**met**" if s <= g else f"**missed** by {s - g:,.0f} s ({s / g:.2f}× the goal)"))
    else:
        out.append(f"- 10M records, zipf, θ=0.6 in ≤ {g:.0f} s: not measured")
    # 2. speedup over SetSimilaritySearch at the largest size both finish
    for theta, key in ((0.6, "speedup_06"), (0.8, "speedup_08")):
        g = GOALS[key]
        fams = sorted({r["family"] for r in ok if abs(r["theta"] - theta) < 1e-9}, key=list(FAMILIES).index)
        if not fams:
            out.append(f"- ≥ {g:.0f}× SetSimilaritySearch at θ={theta}: not measured")
        for fam in fams:
            same = [r for r in ok if r["family"] == fam and abs(r["theta"] - theta) < 1e-9]
            rs = [r for r in same if r["sss_status"] == "ok"]
            capped = [r for r in same if r["sss_status"] == "cap"]
            note = ""
            if capped:
                c = max(capped, key=lambda r: r["records"])
                note = (f"; at {c['records']:,} records SetSimilaritySearch passed its {c['sss_cap']:,g} s cap: "
                        f"> {fx(c['sss_cap'] / c['simjoin_s'])}")
            if not rs:
                out.append(f"- ≥ {g:.0f}× SetSimilaritySearch at θ={theta} ({fam}): not measured "
                           f"(SetSimilaritySearch finished at no size){note}")
                continue
            r = max(rs, key=lambda r: r["records"])
            sp = r["sss_s"] / r["simjoin_s"]
            out.append(f"- ≥ {g:.0f}× SetSimilaritySearch at θ={theta} ({fam}, largest size both finish: "
                       f"{r['records']:,}): {fx(sp)} — "
                       + ("**met**" if sp >= g else f"**missed**: {sp / g:.0%} of the goal") + note)
    # 3. unit spread
    g = GOALS["spread"]
    sp = [r for r in ok if r.get("spread") is not None]
    if sp:
        worst = max(sp, key=lambda r: r["spread"])
        bad = [r for r in sp if r["spread"] > g]
        big = max(r["records"] for r in sp)
        at_big = [r for r in sp if r["records"] == big]
        wb = max(at_big, key=lambda r: r["spread"])
        out.append(f"- unit spread (slowest/fastest unit) ≤ {g}: "
                   + ("**met** in every row" if not bad else f"**missed** in {len(bad)} of {len(sp)} rows")
                   + f"; worst {worst['spread']} ({worst['family']}, {worst['records']:,}, θ={worst['theta']}); "
                   f"worst at the largest size ({big:,}): {wb['spread']} ({wb['family']}, θ={wb['theta']})")
    else:
        out.append(f"- unit spread ≤ {g}: not measured")
    # 4. cost growth 1M -> 10M
    g = GOALS["growth_1m_10m"]
    pairs = []
    for r10 in ok:
        if r10["records"] != 10_000_000:
            continue
        r1 = [r for r in ok if r["records"] == 1_000_000 and r["family"] == r10["family"]
              and abs(r["theta"] - r10["theta"]) < 1e-9]
        if r1:
            pairs.append((r10["family"], r10["theta"], r10["simjoin_s"] / r1[0]["simjoin_s"]))
    if pairs:
        for fam, theta, gr in pairs:
            out.append(f"- cost growth 1M → 10M ≤ {g:.0f}× ({fam}, θ={theta}): {gr:.1f}× — "
                       + ("**met**" if gr <= g else f"**missed** by {gr - g:.1f}×"))
    else:
        out.append(f"- cost growth 1M → 10M ≤ {g:.0f}×: not measured")
    return out


#: Issue 43's goals: (records, θ) -> seconds end to end, and the authors' exact C++ as the issue
#: measured it on this machine (not rebuilt here: the machine reaches no source host).
GOALS_43 = {(200_000, 0.8): (3.0, 0.42), (1_000_000, 0.8): (13.0, 6.8), (1_000_000, 0.6): (25.0, 59.6),
            (10_000_000, 0.6): (120.0, None)}
BEFORE_43 = {(200_000, 0.8): 17.6, (200_000, 0.6): 19.1, (1_000_000, 0.8): 27.6, (1_000_000, 0.6): 31.5,
             (10_000_000, 0.6): 234.0}


def breakdown_section(rows: list[dict]) -> list[str]:
    """Issue 43: every run's seconds by part, per path, and the goals."""
    have = [r for r in rows if r.get("paths")]
    if not have:
        return []
    warm = (" The `spark` rows ran on a warm `simjoin spark-server` (`--warm-spark`: no JVM start, Python "
            "workers kept, warmed up by one untimed run of 20,000 records), as an Airflow deployment runs them."
            if WARM else "")
    out = ["", "## Where the seconds go, per path (issue 43)", "",
           "Each run of the table above on each path (`--executor`)." + warm
           + " `auto` chose in process for every input here "
           "(the summary line says so). Parts, seconds: **process** = Python start and imports before the first "
           "stage; **spark** = Spark start-up where recorded (on the Spark path the JVM starts inside tokenize: "
           "counted there); **read** the inputs with deltalake; **tokenize** split, dictionary-encode and encode "
           "(global token order, rids); **statistics** the profile (token counts, lengths, ids) and its sum; "
           "**optimize** the slice measurements and the plan search; **join** the PPJoin units; **gates** both "
           "quality gates (the token gate runs beside the optimizer); **write** the stage tables and publish; "
           "**other** the rest of the wall time (exit, background writes, minus overlap). On the Spark path "
           "read + tokenize + statistics are one Spark stage, shown under tokenize.", "",
           "| records | θ | path | end to end s | " + " | ".join(PARTS) + " | same pairs |",
           "|---:|---:|:--|---:|" + "---:|" * len(PARTS) + ":-:|"]
    for r in have:
        for ex, v in r["paths"].items():
            if "seconds" not in v:
                out.append(f"| {r['records']:,} | {r['theta']} | {ex} | {v.get('status')} |" + " |" * len(PARTS)
                           + " |")
                continue
            bd = v.get("breakdown") or {}
            cells = " | ".join("–" if bd.get(k) is None else f"{bd[k]:.2f}" for k in PARTS)
            same = "yes" if v.get("same_pairs", True) else "**NO**"
            out.append(f"| {r['records']:,} | {r['theta']} | {ex} | {v['seconds']:.1f} | {cells} | {same} |")
    out += ["", "### Goals of issue 43", "",
            "The authors' exact C++ times are the issue's (built and run on this machine when the issue was "
            "filed; this machine reaches no source host to rebuild it). Before: `simjoin ssj` on Spark as the "
            "issue measured it.", "",
            "| records | θ | goal s | simjoin s (first path) | before s | authors' C++ s | verdict |",
            "|---:|---:|---:|---:|---:|---:|:--|"]
    for (n, theta), (goal, cpp) in GOALS_43.items():
        hit = [r for r in have if r["records"] == n and abs(r["theta"] - theta) < 1e-9 and r.get("simjoin_s")]
        if not hit:
            out.append(f"| {n:,} | {theta} | {goal:g} | not measured | {BEFORE_43.get((n, theta), '–')} | "
                       f"{cpp if cpp is not None else '–'} | – |")
            continue
        sj = hit[0]["simjoin_s"]
        verdict = "**met**" if sj <= goal else f"**missed** by {sj - goal:.1f} s ({sj / goal:.2f}× the goal)"
        if cpp is not None:
            verdict += f"; {sj / cpp:.2f}× the authors' C++"
        out.append(f"| {n:,} | {theta} | {goal:g} | {sj:.1f} | {BEFORE_43.get((n, theta), '–')} | "
                   f"{cpp if cpp is not None else '–'} | {verdict} |")
    return out


def write_results(res: Path, meta: dict, rows: list[dict], mh: list[dict]) -> None:
    res.mkdir(parents=True, exist_ok=True)
    (res / "ssj.json").write_text(json.dumps({"meta": meta, "rows": rows, "minhash": mh}, indent=1))
    a = meta["args"]
    lines = [
        "# Set-similarity join at scale: simjoin vs SetSimilaritySearch and MinHashLSH (issues 16 and 43)",
        "",
        f"Machine: {meta['machine']}. Run started {meta['started']}"
        + ("" if meta.get("finished") else " (**partial: still running or interrupted**)") + ".",
        "",
        f"- **simjoin s**: `simjoin ssj --executor {a.get('executors', 'auto').split(',')[0]}` end to end as a CLI "
        "subprocess (what a user waits: Python start-up (and Spark's on the Spark path),",
        "  tokenize, two quality gates (in the warm gate server), optimizer, the PPJoin units, publish to Delta); "
        "input from",
        f"  `simjoin generate sets --seed {a['seed']}` (families: zipf = default lengths, aol = `--lengths aol`,",
        "  long = `--lengths long`, near-duplicates = `--dist near-duplicates`; zipf and near-duplicates with",
        *([f"  `--universe max(20000, rows x {a.get('universe_per_row', 0.1)})`: a vocabulary that grows with the",
           "  records, as real ones do; with a fixed 20,000-token vocabulary PPJoin's posting visits grow with rows²)."]
          if a.get("universe_per_row", 0.1) > 0 else
          ["  the generator's fixed 20,000-token vocabulary (`--universe-per-row 0`: the issue's own setting;",
           "  PPJoin's posting visits grow with rows²)."]),
        "  records/s = records / simjoin s.",
        "- **t/n/m**: the optimizer's chosen seed t, nodes n, modulo m (split: node:modgroups of the nodes split",
        "  for candidate skew), from `<output>_plan`. **unit spread**: slowest / fastest unit CPU time (the",
        "  unit's own work; its wall time on 2 cores also holds what ran beside it) over the units with",
        "  records, wall-time spread in the json; **cand/unit**: candidates per unit max / mean (`<output>_stats`).",
        "- **SetSimilaritySearch s**: `SetSimilaritySearch.all_pairs` (exact, single-threaded, Jaccard) in a",
        f"  subprocess, tokenize + join timed (the Delta read is not), killed at its cap ({a['sss_cap']:,g} s):",
        "  \"> cap\" is never extrapolated; after a cap the larger sizes of that family and θ are skipped.",
        "  Speedup = its seconds / simjoin's (\"> x×\": a lower bound from the cap).",
        "- **exact check**: the two pair sets compared (identical, or missing / extra); where SetSimilaritySearch",
        f"  did not finish, a sampled oracle: {a['oracle_sample']} seeded random records, each with ALL its partners",
        "  of Jaccard ≥ θ by brute force (overlap counts over a token → records index), against simjoin's pairs",
        "  that involve them.",
        "",
        "Issue goals: 10M zipf records at θ=0.6 in ≤ 10 min; ≥ 40× SetSimilaritySearch at θ=0.6 and ≥ 30× at",
        "θ=0.8 at the largest size both finish; unit spread ≤ 1.5; cost growth 1M → 10M records ≤ 12×.",
        "",
        "| family | records | avg len | θ | pairs | simjoin s | records/s | t/n/m | units | unit spread "
        "| cand/unit max / mean | SetSimilaritySearch s | speedup | exact check |",
        "|:--|---:|---:|---:|---:|---:|---:|:--|---:|---:|---:|---:|---:|:--|",
    ]
    for r in rows:
        if r.get("simjoin_s") is None:
            lines.append(f"| {r['family']} | {r['records']:,} | {r['avg_len']:.1f} | {r['theta']} | – "
                         f"| {r.get('simjoin_status', 'failed')} | – | – | – | – | – | – | – | – |")
            continue
        cand = f"{fnum(r['cand_max'])} / {fnum(r['cand_mean'])}" if r.get("cand_max") is not None else "–"
        lines.append(
            f"| {r['family']} | {r['records']:,} | {r['avg_len']:.1f} | {r['theta']} | {r['pairs']:,} "
            f"| {r['simjoin_s']:,.1f} | {r['records'] / r['simjoin_s']:,.0f} | {fmt_plan(r)} | {fnum(r['units'])} "
            f"| {fnum(r['spread'], 2)} | {cand} | {fsss(r)} | {fspeed(r)} | {fcheck(r)} |")
    if mh:
        lines += [
            "",
            f"## Spark ML MinHashLSH (approximate) at {a['minhash_size']:,} records",
            "",
            "Local SparkSession (local[2], 8 GiB driver) in a subprocess; tokens as simjoin's (lower-case,",
            f"whitespace, distinct), {meta['minhash_vectorizer']}, records without tokens dropped,",
            "`MinHashLSH(numHashTables=k).approxSimilarityJoin(df, df, 1 - θ)` (Jaccard distance), pairs id_a < id_b",
            "collected. Timed: tokenize + vectorize + fit + join + collect (not the session start nor loading the",
            f"input). Cap {a['minhash_cap']:,.0f} s. recall = |found ∩ exact| / |exact|, precision = |found ∩ exact| /",
            "|found|, exact = simjoin's pair set on the same data (hashed features can merge tokens: false positives).",
            "",
            "| family | records | θ | hash tables | MinHashLSH s | pairs found | exact pairs | recall | precision "
            "| simjoin s |",
            "|:--|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in mh:
            if r["status"] == "ok":
                t, rec, prec = fnum(r["seconds"]), f"{r['recall']:.4f}", f"{r['precision']:.4f}"
                found = f"{r['pairs']:,}"
            else:
                t = f"> {r['cap']:,.0f} (cap)" if r["status"] == "cap" else r["status"]
                rec = prec = found = "n/a"
            lines.append(f"| {r['family']} | {r['records']:,} | {r['theta']} | {r['tables']} | {t} | {found} "
                         f"| {r['exact_pairs']:,} | {rec} | {prec} | {fnum(r['simjoin_s'])} |")
    lines += breakdown_section(rows)
    lines += ["", "## Goals of issue 16", "", *goals(rows), ""]
    if any(not row_ok(r) for r in rows):
        lines += ["**Some pair sets are NOT exact: see the exact check column.**", ""]
    lines += ["![simjoin seconds vs records](ssj_scaling.png)", ""]
    (res / "ssj.md").write_text("\n".join(lines))
    plot(res / "ssj_scaling.png", rows)


def plot(path: Path, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.get("simjoin_s") is not None]
    if not ok:
        return
    fig, ax = plt.subplots(figsize=(7.5, 5))
    keys = sorted({(r["family"], r["theta"]) for r in ok}, key=lambda k: (list(FAMILIES).index(k[0]), k[1]))
    for i, (fam, theta) in enumerate(keys):
        rs = sorted((r for r in ok if (r["family"], r["theta"]) == (fam, theta)), key=lambda r: r["records"])
        color = f"C{i % 10}"
        ax.plot([r["records"] for r in rs], [r["simjoin_s"] for r in rs], "o-", color=color,
                label=f"simjoin {fam} θ={theta}")
        ss = [r for r in rs if r["sss_status"] == "ok"]
        if ss:
            ax.plot([r["records"] for r in ss], [r["sss_s"] for r in ss], "x--", color=color, alpha=0.6,
                    label=f"SetSimilaritySearch {fam} θ={theta}")
    ax.axhline(GOALS["zipf_10m_theta06_s"], color="grey", lw=0.8, ls=":", label="goal: 10M zipf θ=0.6 in 10 min")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("records")
    ax.set_ylabel("seconds (end to end)")
    ax.set_title("simjoin ssj: seconds vs records (dashed: SetSimilaritySearch)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------------------------------
# the run


#: ``--warm-spark``: the warm Spark's address the Spark executor's runs connect to
WARM: dict[str, str] = {}


def run_ssj(src: str, out: str, theta: float, cap: float | None, logs: Path,
            executor: str = "auto") -> tuple[Proc, str]:
    env = {**os.environ, "SIMJOIN_SPARK_REMOTE": WARM["remote"]} if executor == "spark" and WARM else None
    p = run([str(BIN / "simjoin"), "ssj", "--input", src, "--output", out, "--threshold", str(theta),
             "--executor", executor], timeout=cap, log_path=logs / (Path(out).name + ".log"), env=env)
    return p, last_line(p.stdout)


#: ``--warm-spark``: the records of the run that warms the server up before the timed runs
WARM_UP_ROWS = 20_000


def warm_up(work: Path, logs: Path, seed: int) -> None:
    """One untimed ``simjoin ssj --executor spark`` of ``WARM_UP_ROWS`` records on the warm Spark:
    a deployment's server has run jobs before (its JVM has loaded and compiled the Delta, Arrow
    and Connect paths, and its Python workers have imported simjoin), a just-started one has not:
    its first 1M-record run pays 10-12 s more."""
    src = str(work / "warm_up" / "input")
    must(run([str(BIN / "simjoin"), "generate", "sets", "--out", src, "--rows", str(WARM_UP_ROWS), "--seed",
              str(seed + 1)], log_path=logs / "warm_up_generate.log"), "generate the warm-up input")
    p, _ = run_ssj(src, str(work / "warm_up" / "pairs"), 0.8, None, logs, "spark")
    must(p, "the warm-up run")
    log(f"warm Spark: warmed up by one {WARM_UP_ROWS:,}-record run in {p.seconds:.1f}s (not timed)")


def start_warm_spark(logs: Path) -> subprocess.Popen:
    """``simjoin spark-server`` (local[2] by default here: the machine's cores) on a free port, for
    the Spark executor's runs (``--warm-spark``): what an Airflow deployment keeps running. Returns
    once it serves; its first job warms its Python workers up."""
    import socket

    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    logs.mkdir(parents=True, exist_ok=True)
    log_f = open(logs / "spark-server.log", "w")  # noqa: SIM115 - open for the server's life
    proc = subprocess.Popen([str(BIN / "simjoin"), "spark-server", "--port", str(port)], stdout=log_f,
                            stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
    deadline = time.time() + 180
    while time.time() < deadline:
        if "ready: SIMJOIN_SPARK_REMOTE=" in (logs / "spark-server.log").read_text(errors="replace"):
            WARM["remote"] = f"sc://127.0.0.1:{port}"
            return proc
        if proc.poll() is not None:
            break
        time.sleep(1)
    raise SystemExit(f"simjoin spark-server did not start: see {logs / 'spark-server.log'}")


#: The per-stage breakdown's parts (issue 43), in the order of a run.
PARTS = ("process", "spark", "read", "tokenize", "statistics", "optimize", "join", "gates", "write", "other")


def breakdown(out: str, p: Proc) -> dict:
    """Where one ``simjoin ssj`` run's seconds went: from the task-timing table (process start, Spark
    start-up, each stage's work) and the in-process tokenize stage's ``ssj steps`` log line (read,
    tokenize, statistics, encode, write). ``gates``: both gates' seconds (the token gate runs beside
    the optimizer: it can overlap); ``other``: the run's seconds not in a part (the interpreter's exit,
    the wait for background writes, the overlap of the gate counted twice as a negative)."""
    from deltalake import DeltaTable

    from simjoin.pipeline.timing import timing_path

    try:
        t = DeltaTable(os.path.join(ROOT, os.path.relpath(timing_path(), ROOT))).to_pyarrow_table().to_pylist()
    except Exception:  # no table: the run recorded nothing
        return {}
    mine = [r for r in t if r["output"] == os.path.abspath(out)]
    if not mine:
        return {}
    last = max(mine, key=lambda r: r["started_at"])["invocation"]
    st = {r["stage"]: r for r in mine if r["invocation"] == last}
    work = {k: float(v["work_s"] or 0) for k, v in st.items()}
    steps: dict = {}
    for line in (p.stderr + p.stdout).splitlines():
        if "ssj steps tokenize: " in line:
            steps = json.loads(line.split("ssj steps tokenize: ", 1)[1])
    b = {"process": sum(float(v["process_s"] or 0) for v in st.values()),
         "spark": sum(float(v["startup_s"] or 0) for v in st.values()),
         "optimize": work.get("optimize", 0.0), "join": work.get("join", 0.0),
         "gates": work.get("gate_tokens", 0.0) + work.get("gate_pairs", 0.0)}
    if steps:
        b.update({"read": steps.get("read", 0.0), "tokenize": steps.get("tokenize", 0.0) + steps.get("encode", 0.0),
                  "statistics": steps.get("statistics", 0.0),
                  "write": steps.get("write", 0.0) + work.get("publish", 0.0)})
    else:  # the Spark path: read, tokenize and statistics are one Spark pass, its JVM start in it
        b.update({"read": None, "tokenize": work.get("tokenize", 0.0), "statistics": None,
                  "write": work.get("publish", 0.0)})
    b["other"] = p.seconds - sum(v for v in b.values() if v is not None)
    return {k: (None if b.get(k) is None else round(b[k], 2)) for k in PARTS}


def run_sss(src: str, theta: float, cap: float, prefix: str, logs: Path) -> dict:
    # the cap is armed inside after the Delta read; the hard timeout here only guards a hung read
    p = run([sys.executable, str(ANCHOR), "sss", "--input", src, "--theta", str(theta), "--cap", str(cap),
             "--out", prefix], timeout=cap + 1800, log_path=logs / (Path(prefix).name + ".log"))
    return anchor_result(p, prefix)


def anchor_result(p: Proc, prefix: str) -> dict:
    """An anchor subprocess's outcome: capped, failed, or its timing and pairs."""
    if p.rc == TIMED_OUT or p.rc is None:
        return {"status": "cap"}
    if p.rc != 0:
        return {"status": f"failed (status {p.rc})", "stderr": p.stderr[-2000:]}
    info = json.loads(Path(prefix + ".json").read_text())
    return {"status": "ok", **info, "pairs_arr": np.load(prefix + ".npy")}


def run_minhash(src: str, theta: float, tables: int, a: argparse.Namespace, prefix: str, logs: Path) -> dict:
    p = run([sys.executable, str(ANCHOR), "minhash", "--input", src, "--theta", str(theta),
             "--tables", str(tables), "--cap", str(a.minhash_cap), "--seed", str(a.seed), "--out", prefix,
             "--vectorizer", a.minhash_vectorizer, "--num-features", str(a.minhash_features)],
            timeout=a.minhash_cap + 1800, log_path=logs / (Path(prefix).name + ".log"))
    return anchor_result(p, prefix)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="200000,1000000,3000000,10000000")
    ap.add_argument("--thetas", default="0.6,0.8,0.9")
    ap.add_argument("--families", default="zipf,aol,near-duplicates", help=f"of {', '.join(FAMILIES)}")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--universe-per-row", type=float, default=0.1,
                    help="zipf and near-duplicates: --universe max(20000, rows x this), vocabulary growing with the "
                         "records as in real data (Heaps' law); 0: the generator's fixed 20,000 tokens")
    ap.add_argument("--sss-cap", type=float, default=1800.0, help="SetSimilaritySearch cap, seconds")
    ap.add_argument("--simjoin-cap", type=float, default=0.0, help="kill simjoin ssj after this many seconds (0: none)")
    ap.add_argument("--minhash-size", type=int, default=200_000, help="records of the MinHashLSH runs (0: none)")
    ap.add_argument("--minhash-tables", default="3", help="numbers of hash tables, e.g. 3,5")
    ap.add_argument("--minhash-cap", type=float, default=1800.0)
    ap.add_argument("--minhash-thetas", default="0.6,0.8")
    ap.add_argument("--minhash-families", default="zipf")
    ap.add_argument("--minhash-vectorizer", choices=("hashing", "count"), default="hashing",
                    help="HashingTF(binary) or CountVectorizer(binary)")
    ap.add_argument("--minhash-features", type=int, default=1 << 20, help="HashingTF numFeatures")
    ap.add_argument("--oracle-sample", type=int, default=500)
    ap.add_argument("--oracle", choices=("fallback", "always", "never"), default="fallback",
                    help="fallback: where SetSimilaritySearch did not finish; always: every row")
    ap.add_argument("--sss-max-records", default="0",
                    help="run SetSimilaritySearch only up to this many records (0: every size, each capped); "
                         "per θ as 0.6:300000,0.8:1000000 (a θ not named: every size; θ:0: never at that θ)")
    ap.add_argument("--results", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--keep-work", action="store_true", help="keep the temporary directory (inputs, outputs, logs)")
    ap.add_argument("--executors", default="auto,spark",
                    help="simjoin ssj --executor per row: the first is the row's simjoin s, the others run too "
                         "(their seconds, breakdown and the same pairs)")
    ap.add_argument("--warm-spark", action="store_true",
                    help="run the spark executor's rows on a warm `simjoin spark-server` (started here)")
    ap.add_argument("--other-paths-max", type=int, default=1_000_000,
                    help="run the other executors up to this many records")
    ap.add_argument("--sizes-at", default="",
                    help="per θ, the sizes it runs at, e.g. 0.8:200000/1000000 (default: every size)")
    a = ap.parse_args()
    executors = [e.strip() for e in a.executors.split(",") if e.strip()]
    sizes_at = {float(k): {int(x) for x in v.split("/")} for k, v in
                (part.split(":") for part in a.sizes_at.split(",") if part.strip())}

    families = [f.strip() for f in a.families.split(",") if f.strip()]

    def sss_max(theta: float) -> int | None:
        """--sss-max-records at this θ: None for no limit, else the largest size it runs at (0: none)."""
        spec = a.sss_max_records.strip()
        if ":" not in spec:
            return int(spec or 0) or None
        limits = {float(k): int(v) for k, v in (part.split(":") for part in spec.split(",") if part.strip())}
        return limits.get(float(theta))
    for f in families + [f.strip() for f in a.minhash_families.split(",") if f.strip()]:
        if f not in FAMILIES:
            raise SystemExit(f"unknown family {f!r} (known: {', '.join(FAMILIES)})")
    sizes, thetas = sorted(ints(a.sizes)), floats(a.thetas)
    mh_thetas, mh_tables = floats(a.minhash_thetas), ints(a.minhash_tables)
    mh_fams = {f.strip() for f in a.minhash_families.split(",") if f.strip()} if a.minhash_size > 0 else set()
    res = Path(a.results)
    work = Path(tempfile.mkdtemp(prefix="simjoin-bench-ssj-"))
    logs = work / "logs"
    meta = {"machine": machine(), "started": f"{dt.datetime.now():%Y-%m-%d %H:%M}", "args": vars(a),
            "work": str(work), "finished": False,
            "minhash_vectorizer": (f"HashingTF(binary, numFeatures={a.minhash_features:,})"
                                   if a.minhash_vectorizer == "hashing" else "CountVectorizer(binary)")}
    rows: list[dict] = []
    mh: list[dict] = []
    capped: set[tuple[str, float]] = set()  # (family, θ) whose SetSimilaritySearch passed the cap
    log(f"work dir {work}; results -> {res}; {meta['machine']}")
    # the install step's one-time JVM class-data archive (a no-op when it is there already)
    log(last_line(must(run([str(BIN / "simjoin"), "cache-jvm"]), "simjoin cache-jvm").stdout))
    simjoin_cap = a.simjoin_cap or None
    bad = False
    server = start_warm_spark(logs) if a.warm_spark else None
    if server is not None:
        log(f"warm Spark at {WARM['remote']} for the spark executor's runs")
        warm_up(work, logs, a.seed)
    try:
        for fam in families:
            visit = sorted(set(sizes) | ({a.minhash_size} if fam in mh_fams else set()))
            for n in visit:
                d = work / fam / str(n)
                d.mkdir(parents=True, exist_ok=True)
                src = str(d / "input")
                g = must(run([str(BIN / "simjoin"), "generate", "sets", "--out", src, "--rows", str(n),
                              "--seed", str(a.seed), *FAMILIES[fam], *universe_flags(fam, n, a.universe_per_row)],
                             log_path=logs / f"generate_{fam}_{n}.log"),
                         f"generate {fam} {n}")
                log(f"{fam} {n:,}: generated in {g.seconds:.1f}s ({last_line(g.stdout)})")
                t0 = time.perf_counter()
                tk = Tokens(src)
                log(f"{fam} {n:,}: {tk.n:,} records, avg {tk.avg_len:.2f} distinct tokens, "
                    f"{tk.vocab_size:,} distinct tokens (read + tokenized in {time.perf_counter() - t0:.1f}s)")
                main_thetas = thetas if n in sizes else []
                need = main_thetas + [t for t in (mh_thetas if n == a.minhash_size and fam in mh_fams else [])
                                      if t not in main_thetas]
                exact: dict[float, tuple[np.ndarray, float | None]] = {}
                for theta in need:
                    out = str(d / f"pairs_{theta}")
                    if sizes_at.get(theta) and n not in sizes_at[theta]:
                        continue
                    p, summary = run_ssj(src, out, theta, simjoin_cap, logs / f"{fam}_{n}", executors[0])
                    reported = theta in main_thetas
                    row = {"family": fam, "records": n, "avg_len": round(tk.avg_len, 2), "theta": theta,
                           "generate_s": round(g.seconds, 1)}
                    if p.rc != 0:
                        status = "> cap (killed)" if p.rc is None else f"failed (status {p.rc})"
                        log(f"{fam} {n:,} θ={theta}: simjoin ssj {status}\n{p.stderr[-2000:]}")
                        if reported:
                            rows.append({**row, "simjoin_s": None, "simjoin_status": status, "sss_status": "–"})
                            write_results(res, meta, rows, mh)
                        bad = bad or p.rc is not None
                        exact[theta] = (None, None)
                        continue
                    row.update({"pairs": pair_count(out), "simjoin_s": round(p.seconds, 1),
                                "records_per_s": round(n / p.seconds), "summary": summary,
                                **plan_info(out), **stats_info(out)})
                    log(f"{fam} {n:,} θ={theta}: simjoin {p.seconds:.1f}s, {row['pairs']:,} pairs, "
                        f"{n / p.seconds:,.0f} records/s, {fmt_plan(row)}, {row['units']} units, "
                        f"spread {row['spread']}")
                    row["paths"] = {executors[0]: {"seconds": row["simjoin_s"], "breakdown": breakdown(out, p),
                                                   "summary": summary}}
                    log(f"{fam} {n:,} θ={theta}: {executors[0]}: {row['paths'][executors[0]]['breakdown']}")
                    ours = None
                    for ex in executors[1:]:  # the other paths on the same input: their time, the same pairs
                        if n > a.other_paths_max:
                            continue
                        o2 = str(d / f"pairs_{theta}_{ex}")
                        p2, summary2 = run_ssj(src, o2, theta, simjoin_cap, logs / f"{fam}_{n}", ex)
                        if p2.rc != 0:
                            row["paths"][ex] = {"status": f"failed ({p2.rc})"}
                            bad = True
                            continue
                        if ours is None:
                            ours, _ = pair_keys(out, tk)
                        same = bool(np.array_equal(ours, pair_keys(o2, tk)[0]))
                        row["paths"][ex] = {"seconds": round(p2.seconds, 1), "breakdown": breakdown(o2, p2),
                                            "same_pairs": same, "summary": summary2}
                        bad = bad or not same
                        log(f"{fam} {n:,} θ={theta}: {ex}: {p2.seconds:.1f}s, same pairs: {same}; "
                            f"{row['paths'][ex]['breakdown']}")
                        if not a.keep_work:
                            rm_outputs(d, f"pairs_{theta}_{ex}")
                    if reported:
                        # SetSimilaritySearch anchor
                        row["sss_cap"] = a.sss_cap
                        if (fam, theta) in capped:
                            row["sss_status"] = "skipped"
                            log(f"{fam} {n:,} θ={theta}: SetSimilaritySearch skipped (capped at a smaller size)")
                        elif (limit := sss_max(theta)) is not None and n > limit:
                            row["sss_status"] = "not run"
                            log(f"{fam} {n:,} θ={theta}: SetSimilaritySearch not run (--sss-max-records "
                                f"{limit:,} at θ={theta})")
                        else:
                            s = run_sss(src, theta, a.sss_cap, str(d / f"sss_{theta}"), logs / f"{fam}_{n}")
                            row["sss_status"] = s["status"]
                            if s["status"] == "ok":
                                ours, rows_read = pair_keys(out, tk)
                                row["duplicates"] = rows_read - len(ours)
                                pr = s["pairs_arr"]
                                ref = np.unique(tk.keys(pr[:, 0], pr[:, 1]))
                                row["sss_missing"], row["sss_extra"] = compare(ref, ours)
                                row["sss_s"] = round(s["seconds"], 1)
                                row["sss_join_s"] = round(s["join_seconds"], 1)
                                row["sss_pairs"] = len(ref)
                                log(f"{fam} {n:,} θ={theta}: SetSimilaritySearch {s['seconds']:.1f}s "
                                    f"({fx(s['seconds'] / p.seconds)} simjoin's), {fcheck(row)}")
                            elif s["status"] == "cap":
                                capped.add((fam, theta))
                                log(f"{fam} {n:,} θ={theta}: SetSimilaritySearch passed its {a.sss_cap:g}s cap")
                            else:
                                log(f"{fam} {n:,} θ={theta}: SetSimilaritySearch {s['status']}\n"
                                    f"{s.get('stderr', '')}")
                        if a.oracle == "always" or (a.oracle == "fallback" and row["sss_status"] != "ok"):
                            row["oracle"] = oracle(tk, out, theta, a.oracle_sample, a.seed)
                            log(f"{fam} {n:,} θ={theta}: {fcheck({'oracle': row['oracle']})} "
                                f"({row['oracle']['seconds']}s)")
                        bad = bad or not row_ok(row)
                        rows.append(row)
                        write_results(res, meta, rows, mh)
                    if n == a.minhash_size and fam in mh_fams and theta in mh_thetas:
                        if ours is None:
                            ours, _ = pair_keys(out, tk)
                        exact[theta] = (ours, row["simjoin_s"])
                    if not a.keep_work:
                        rm_outputs(d, f"pairs_{theta}")
                        rm_outputs(d, f"sss_{theta}")
                # MinHashLSH at --minhash-size
                if n == a.minhash_size and fam in mh_fams:
                    for theta in mh_thetas:
                        ex, sj_s = exact.get(theta, (None, None))
                        for k in mh_tables:
                            r = {"family": fam, "records": n, "theta": theta, "tables": k, "cap": a.minhash_cap,
                                 "simjoin_s": sj_s, "exact_pairs": len(ex) if ex is not None else 0}
                            m = run_minhash(src, theta, k, a, str(d / f"minhash_{theta}_{k}"), logs / f"{fam}_{n}")
                            r["status"] = m["status"]
                            if m["status"] == "ok":
                                found = np.unique(tk.keys(m["pairs_arr"][:, 0], m["pairs_arr"][:, 1]))
                                hit = len(np.intersect1d(found, ex, assume_unique=True)) if ex is not None else 0
                                r.update({"seconds": round(m["seconds"], 1), "pairs": len(found),
                                          "recall": hit / len(ex) if ex is not None and len(ex) else float("nan"),
                                          "precision": hit / len(found) if len(found) else float("nan"),
                                          "setup_s": round(m["setup_seconds"], 1)})
                                log(f"{fam} {n:,} θ={theta} MinHashLSH k={k}: {m['seconds']:.1f}s, "
                                    f"{len(found):,} pairs, recall {r['recall']:.4f}, precision {r['precision']:.4f} "
                                    f"(simjoin {sj_s}s)")
                            else:
                                log(f"{fam} {n:,} θ={theta} MinHashLSH k={k}: {m['status']}\n{m.get('stderr', '')}")
                            mh.append(r)
                            write_results(res, meta, rows, mh)
                            if not a.keep_work:
                                rm_outputs(d, f"minhash_{theta}_{k}")
                tk.free_index()
                del tk
                if not a.keep_work:
                    shutil.rmtree(d, ignore_errors=True)
        meta["finished"] = True
        write_results(res, meta, rows, mh)
    finally:
        if server is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
        if a.keep_work:
            log(f"kept the work dir {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print((res / "ssj.md").read_text() if (res / "ssj.md").exists() else "", flush=True)
    if bad:
        raise SystemExit("some runs failed or some pair sets are not exact (see above)")


if __name__ == "__main__":
    code = 0
    try:
        main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    # exit without interpreter teardown: a native reader thread (deltalake) has been seen to abort it
    os._exit(code)
