"""`make demo`: the main jobs on the embedded default (local Spark, ./warehouse, SQLite Airflow).

Runs the real DAGs with ``dag.test()``: simjoin_generate writes Zipf token sets, simjoin_ssj
joins them; then the S3J demo joins a generated vector stream, the inequality demo runs the
simjoin_ineq DAG, the Streaming HyperCube demo joins Zipf key streams, and the S2J demo runs the
paper's two air-quality queries as concurrent tasks through the simjoin_s2j DAG.

The user sees one line per step, the summary and where to look next. Everything else (Airflow's
task logs, Spark's and py4j's, simjoin's own) goes to one log file, named on the first line:
file descriptors 1 and 2 point at it for the whole demo, so the JVM that ``get_spark()`` starts
and the ``airflow db migrate`` subprocess inherit it, and every logging handler writes there. A
failed step prints the last 30 lines of that file and its path, and the demo exits 1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STEPS = 8
TAIL = 30


class Console:
    """Descriptors 1 and 2 on the log file; the user's lines on the terminal's own descriptors."""

    def __init__(self, log: Path) -> None:
        log.parent.mkdir(parents=True, exist_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        self.log = log
        self.open = False  # a step's line waits for its result
        self.out, self.err = os.dup(1), os.dup(2)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)

    def say(self, text: str, end: str = "\n", err: bool = False) -> None:
        if err and self.open:  # end the step's line first
            os.write(self.out, b"\n")
        os.write(self.err if err else self.out, (text + end).encode())
        self.open = not end.endswith("\n")

    def tail(self, n: int = TAIL) -> list[str]:
        sys.stdout.flush()
        sys.stderr.flush()
        return self.log.read_text(errors="replace").splitlines()[-n:]


def rel(path: str) -> str:
    """A path as the user typed the demo's: relative to the project when it is under it."""
    p = os.path.relpath(path, ROOT)
    return path if p.startswith("..") else p


def main() -> None:
    warehouse = os.path.abspath(os.environ.get("SIMJOIN_WAREHOUSE", str(ROOT / "warehouse")))
    os.environ["SIMJOIN_WAREHOUSE"] = warehouse
    os.environ.setdefault("AIRFLOW_HOME", str(ROOT / "airflow_home"))
    os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(ROOT / "dags"))
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    log = Path(warehouse) / "demo" / "demo.log"
    con = Console(log)
    con.say(f"demo: full logs in {rel(str(log))}")
    try:
        run_demo(con, warehouse)
    except BaseException as e:  # a failure is never hidden: its log's end, its path, exit 1
        traceback.print_exc()  # to the log, as its last lines
        what = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
        if con.open:
            con.say(what)
        con.say(f"demo: {what}; the last {TAIL} lines of {rel(str(log))}:", err=True)
        for line in con.tail():
            con.say(f"  {line}", err=True)
        con.say(f"demo: {what}; full logs in {rel(str(log))}", err=True)
        sys.exit(130 if isinstance(e, KeyboardInterrupt) else 1)


def run_demo(con: Console, warehouse: str) -> None:
    t0 = time.perf_counter()
    demo = f"{warehouse}/demo"
    k = [0]

    def step(name: str, what: str, body: Callable[[], str]) -> str:
        """One line: the step and what it runs, then (when it is done) its result and seconds."""
        k[0] += 1
        con.say(f"demo [{k[0]}/{STEPS}] {name} ({what}): ", end="")
        t = time.perf_counter()
        done = body()
        con.say(f"{done} ({time.perf_counter() - t:.0f} s)")
        return done

    state: dict[str, Any] = {}

    def setup() -> str:
        subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True,
                       stdout=subprocess.DEVNULL)
        from airflow.dag_processing.dagbag import DagBag

        from simjoin.spark.session import get_spark

        bag = DagBag(dag_folder=str(ROOT / "dags"))
        if bag.import_errors:
            raise SystemExit(f"demo: DAG import errors: {bag.import_errors}")
        state.update(bag=bag, spark=get_spark())
        return f"{len(bag.dags)} DAGs, Spark {state['spark'].version} ready"

    step("set-up", f"Airflow's database in {rel(os.environ['AIRFLOW_HOME'])}, local Spark", setup)
    bag, spark = state["bag"], state["spark"]
    sets, pairs = f"{demo}/sets", f"{demo}/ssj_pairs"

    def generate() -> str:
        test_dag(bag, "simjoin_generate", {"kind": "sets", "out": sets, "rows": 20000, "seed": 7, "overwrite": True})
        return f"20,000 sets -> {rel(sets)}"

    def ssj() -> str:
        from simjoin.pipeline.spec import sanitize_run_id
        from simjoin.spark import delta

        run = test_dag(bag, "simjoin_ssj", {"input": sets, "output": pairs, "threshold": 0.8})
        state["ssj_run"] = run.run_id
        # every DAG run keeps its own run_id partition: count this run's pairs
        n = delta.read_arrow_any(spark, pairs, [("run_id", "=", sanitize_run_id(run.run_id))], ["run_id"]).num_rows
        return f"{n:,} pairs -> {rel(pairs)}"

    step("generate", "DAG simjoin_generate, Zipf token sets", generate)
    step("ssj", "DAG simjoin_ssj, Jaccard >= 0.8", ssj)
    step("s3j", "2 x 1,500 vectors, 10 s windows, one micro-batch on the Spark executor",
         lambda: s3j_demo(spark, demo))
    step("ineq", "DAG simjoin_ineq, SPO-Join's Q1 l.a < r.a AND l.b > r.b, 2 s window",
         lambda: ineq_demo(spark, bag, demo))
    step("hypercube", "2 x 20,000 Zipf(1.5) keys, p = 8, count only", lambda: hypercube_demo(spark, demo))
    step("s2j", "DAG simjoin_s2j, tasks pm25 and pm10 on one read, 30 min window",
         lambda: s2j_demo(spark, bag, demo))

    def report() -> str:
        import logging

        from simjoin.report import render_run

        logging.getLogger("py4j").setLevel(logging.WARNING)
        spark.stop()
        # the main job's run: its stages, rows, balance, plots
        state["page"] = render_run(pairs, run_id=state["ssj_run"])
        return "written"

    step("report", "the ssj run's page: its stages, rows, balance, plots", report)
    d, home = rel(demo), rel(os.environ["AIRFLOW_HOME"])
    for line in (
        f"demo: done in {time.perf_counter() - t0:.0f} s; every table is a Delta table under {d} "
        "(docs/demo.md says what each holds)",
        "demo: look next",
        f"demo:   the ssj run's page  {rel(state['page'])}",
        f"demo:   the plots           {d}/hypercube_demo/report/index.html, {d}/s2j_demo/report/index.html",
        f"demo:   a table             .venv/bin/simjoin show {rel(pairs)} --limit 10",
        f"demo:   an S2J snapshot     .venv/bin/simjoin s2j query --output {d}/s2j_demo/out --task pm25 --limit 10",
        "demo:   the Airflow UI      make airflow, then http://127.0.0.1:8080: the demo's DAG runs, each with its",
        f"demo:                       simjoin outputs tab (user admin, password in {home}/"
        "simple_auth_manager_passwords.json.generated)",
    ):
        con.say(line)


def test_dag(bag: Any, dag_id: str, conf: dict[str, Any]) -> Any:
    """One run of a real DAG through ``dag.test()``; a run that did not succeed stops the demo."""
    run = bag.dags[dag_id].test(run_conf=conf)
    if "success" not in str(run.state).lower():
        raise SystemExit(f"demo: DAG {dag_id} ended in state {run.state}")
    return run


def s3j_demo(spark: Any, warehouse: str) -> str:
    """Small two-stream S3J demo: 2 x 1,500 uniform 2-D vectors over 3 windows of 10 s, run by
    the in-process runner exactly as `simjoin s3j` runs it, its one micro-batch on the Spark
    executor (the ineq demo's DAG runs its unit on the in-process executor)."""
    from jobs.s3j.spec import totals
    from simjoin.config import temp_env
    from simjoin.pipeline import get_spec
    from simjoin.pipeline.runner import run_pipeline

    base = f"{warehouse.rstrip('/')}/s3j_demo"
    left, right, out = f"{base}/left", f"{base}/right", f"{base}/pairs"
    gen = get_spec("generate")
    for path, seed in ((left, 1), (right, 2)):
        run_pipeline(spark, gen.make_run({"kind": "vectors", "out": path, "rows": 1500, "dim": 2, "dist": "uniform",
                                          "rate": 50.0, "seed": seed, "overwrite": True}))
    s3j = get_spec("s3j")
    run = s3j.make_run({"left": left, "right": right, "output": out, "threshold": 0.02, "metric": "euclidean",
                        "window": "10s", "workers": 3}, reset=True)
    # this micro-batch on the Spark executor (a unit this small would run in process): the same
    # stage functions, their tasks in Spark jobs, as a unit above SIMJOIN_LOCAL_UNIT_ROWS runs them
    with temp_env("SIMJOIN_LOCAL_UNIT_ROWS", "0"):
        t = totals(run_pipeline(spark, run))
    return f"{t['pairs']:,} pairs in {len(t['windows'])} windows -> {rel(out)}"


def ineq_demo(spark: Any, bag: Any, warehouse: str) -> str:
    """SPO-Join's Q1 (``l.a < r.a AND l.b > r.b``) over two generated streams of 2,000 tuples
    (20 per second) with a 2 s window, through the real simjoin_ineq DAG."""
    from simjoin.pipeline import get_spec
    from simjoin.pipeline.runner import run_pipeline
    from simjoin.runtime.tables import StreamTables

    base = f"{warehouse.rstrip('/')}/ineq_demo"
    left, right, out = f"{base}/left", f"{base}/right", f"{base}/pairs"
    gen = get_spec("generate")
    for path, seed in ((left, 1), (right, 2)):
        run_pipeline(spark, gen.make_run({"kind": "ineq", "out": path, "rows": 2000, "rate": 20.0, "seed": seed,
                                          "overwrite": True}))
    for p in StreamTables(out).paths().values():  # a fresh demo output every time
        shutil.rmtree(p, ignore_errors=True)
    test_dag(bag, "simjoin_ineq", {"left": left, "right": right, "output": out, "where": "l.a < r.a AND l.b > r.b",
                                   "window": "2s", "workers": 2})
    n = spark.read.format("delta").load(out).count()
    return f"{n:,} pairs -> {rel(out)}"


def hypercube_demo(spark: Any, warehouse: str) -> str:
    """Streaming HyperCube over two Zipf(1.5) key streams of 20,000 tuples each, p = 8, counting
    the join size per key, run by the in-process runner exactly as `simjoin hypercube` runs it;
    then `simjoin report` plots the loads (ours, PHJ's, the bound) and the heavy keys' grids."""
    from jobs.hypercube.spec import totals
    from simjoin.pipeline import get_spec
    from simjoin.pipeline.runner import run_pipeline
    from simjoin.report import render

    base = f"{warehouse.rstrip('/')}/hypercube_demo"
    left, right, out = f"{base}/left", f"{base}/right", f"{base}/counts"
    gen = get_spec("generate")
    for path, seed in ((left, 1), (right, 2)):
        run_pipeline(spark, gen.make_run({"kind": "keys", "out": path, "rows": 20000, "alpha": 1.5, "domain": 10000,
                                          "rate": 200.0, "seed": seed, "overwrite": True}))
    hc = get_spec("hypercube")
    run = hc.make_run({"left": left, "right": right, "output": out, "key": "k", "workers": 8, "count_only": True},
                      reset=True)
    t = totals(run_pipeline(spark, run))
    render(spark.read.format("delta").load(f"{out}_stats").toPandas(), f"{base}/report")
    return (f"{t['pairs']:,} pairs counted, max load {t['max_load']:,} (PHJ {t['phj']:,}, bound {t['bound']:,.0f})"
            f" -> {rel(out)}")


def s2j_demo(spark: Any, bag: Any, warehouse: str) -> str:
    """S2J's case study (Section 1): two stations' air-quality streams (1,500 readings each, one per
    2 s) and the two concurrent tasks "PM2.5 gap > 30" and "PM10 gap > 50" over a 30-minute
    window, sharing one read of the streams, through the real simjoin_s2j DAG; then `simjoin
    report` plots tau, the workers and the shed ratio per micro-batch."""
    from simjoin.pipeline import get_spec
    from simjoin.pipeline.runner import run_pipeline
    from simjoin.report import render

    base = f"{warehouse.rstrip('/')}/s2j_demo"
    left, right, out = f"{base}/left", f"{base}/right", f"{base}/out"
    gen = get_spec("generate")
    for path, seed in ((left, 1), (right, 2)):
        run_pipeline(spark, gen.make_run({"kind": "aqi", "out": path, "rows": 1500, "domain": 12, "rate": 0.5,
                                          "seed": seed, "overwrite": True}))
    shutil.rmtree(out, ignore_errors=True)  # a fresh demo output every time
    test_dag(bag, "simjoin_s2j", {"left": left, "right": right, "output": out, "window": "30m", "workers": 2,
                                  "tasks": "pm25: abs(l.pm25 - r.pm25) > 30; pm10: abs(l.pm10 - r.pm10) > 50"})
    n = {t: spark.read.format("delta").load(f"{out}/{t}").count() for t in ("pm25", "pm10")}
    render(spark.read.format("delta").load(f"{out}/_stats").toPandas(), f"{base}/report")
    return f"{n['pm25']:,} PM2.5 and {n['pm10']:,} PM10 pairs -> {rel(out)}/pm25, pm10"


if __name__ == "__main__":
    main()
