"""`make demo`: the main jobs on the embedded default (local Spark, ./warehouse, SQLite Airflow).

Runs the real DAGs with ``dag.test()``: simjoin_generate writes Zipf token sets, simjoin_ssj
joins them; then the S3J demo joins a generated vector stream, the inequality demo runs the
simjoin_ineq DAG, the Streaming HyperCube demo joins Zipf key streams, and the S2J demo runs the
paper's two air-quality queries as concurrent tasks through the simjoin_s2j DAG. The last line
names every table written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from simjoin.pipeline.spec import resolve

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    t0 = time.perf_counter()
    warehouse = os.path.abspath(os.environ.get("SIMJOIN_WAREHOUSE", str(ROOT / "warehouse")))
    os.environ["SIMJOIN_WAREHOUSE"] = warehouse
    os.environ.setdefault("AIRFLOW_HOME", str(ROOT / "airflow_home"))
    os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(ROOT / "dags"))
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True,
                   stdout=subprocess.DEVNULL)

    from airflow.dag_processing.dagbag import DagBag

    from simjoin.spark import delta
    from simjoin.spark.session import get_spark

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    if bag.import_errors:
        raise SystemExit(f"DAG import errors: {bag.import_errors}")
    spark = get_spark()
    sets, pairs = f"{warehouse}/demo/sets", f"{warehouse}/demo/ssj_pairs"
    for dag_id, conf in (
        ("simjoin_generate", {"kind": "sets", "out": sets, "rows": 20000, "seed": 7, "overwrite": True}),
        ("simjoin_ssj", {"input": sets, "output": pairs, "threshold": 0.8}),
    ):
        run = bag.dags[dag_id].test(run_conf=conf)
        if "success" not in str(run.state).lower():
            raise SystemExit(f"demo: DAG {dag_id} ended in state {run.state}")
    # every DAG run keeps its own run_id partition: count this run's pairs
    from pyspark.sql import functions as F

    from simjoin.pipeline.spec import sanitize_run_id

    n_pairs = delta.read_table(spark, pairs).filter(F.col("run_id") == sanitize_run_id(run.run_id)).count()
    written = [sets, pairs] + [f"{pairs}_{s}" for s in ("tokens", "lengths", "plan", "stats", "quarantine")]
    extra = "; ".join(["", s3j_demo(spark, f"{warehouse}/demo"), ineq_demo(spark, bag, f"{warehouse}/demo"),
                       hypercube_demo(spark, f"{warehouse}/demo"), s2j_demo(spark, bag, f"{warehouse}/demo")])
    rel = [os.path.relpath(p, ROOT) for p in written]
    import logging

    logging.getLogger("py4j").setLevel(logging.WARNING)
    spark.stop()
    from simjoin.report import render_run

    page = render_run(pairs, run_id=run.run_id)  # the main job's run: its stages, rows, balance, plots
    print(f"demo: ssj found {n_pairs} pairs in {time.perf_counter() - t0:.0f}s; tables: {', '.join(rel)}{extra}")
    print(f"demo: report of the ssj run: {page}")


def s3j_demo(spark: Any, warehouse: str) -> str:
    """Small two-stream S3J demo: 2 x 1,500 uniform 2-D vectors over 3 windows of 10 s, run by
    the in-process runner exactly as `simjoin s3j` runs it, its one micro-batch on the Spark
    executor (the ineq demo's DAG runs its unit on the in-process executor)."""
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
    from simjoin.config import temp_env

    with temp_env("SIMJOIN_LOCAL_UNIT_ROWS", "0"):
        line = resolve(s3j.summary)(run, run_pipeline(spark, run))
    return (f"s3j demo (one micro-batch on the Spark executor): {line}; stats {out}_stats, "
            f"quarantine {out}_quarantine, state {out}_state")


def ineq_demo(spark: Any, bag: Any, warehouse: str) -> str:
    """SPO-Join's Q1 (``l.a < r.a AND l.b > r.b``) over two generated streams of 2,000 tuples
    (20 per second) with a 2 s window, through the real simjoin_ineq DAG."""
    from simjoin.pipeline import get_spec
    from simjoin.pipeline.runner import run_pipeline
    from simjoin.spark import delta
    from simjoin.spark.tables import StreamTables

    base = f"{warehouse.rstrip('/')}/ineq_demo"
    left, right, out = f"{base}/left", f"{base}/right", f"{base}/pairs"
    gen = get_spec("generate")
    for path, seed in ((left, 1), (right, 2)):
        run_pipeline(spark, gen.make_run({"kind": "ineq", "out": path, "rows": 2000, "rate": 20.0, "seed": seed,
                                          "overwrite": True}))
    for p in StreamTables(out).paths().values():  # a fresh demo output every time
        shutil.rmtree(p, ignore_errors=True)
    conf = {"left": left, "right": right, "output": out, "where": "l.a < r.a AND l.b > r.b", "window": "2s",
            "workers": 2}
    run = bag.dags["simjoin_ineq"].test(run_conf=conf)
    if "success" not in str(run.state).lower():
        raise SystemExit(f"demo: DAG simjoin_ineq ended in state {run.state}")
    n = delta.read_table(spark, out).count()
    return f"ineq demo (Q1, DAG simjoin_ineq): {n} pairs -> {out}; stats {out}_stats, state {out}_state"


def hypercube_demo(spark: Any, warehouse: str) -> str:
    """Streaming HyperCube over two Zipf(1.5) key streams of 20,000 tuples each, p = 8, counting
    the join size per key, run by the in-process runner exactly as `simjoin hypercube` runs it;
    then `simjoin report` plots the loads (ours, PHJ's, the bound) and the heavy keys' grids."""
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
    line = resolve(hc.summary)(run, run_pipeline(spark, run))
    files = render(spark.read.format("delta").load(f"{out}_stats").toPandas(), f"{base}/report")
    return f"hypercube demo: {line}; report {os.path.dirname(files[0])}/index.html"


def s2j_demo(spark: Any, bag: Any, warehouse: str) -> str:
    """S2J's case study (Section 1): two stations' air-quality streams (1,500 readings each, one per
    2 s) and the two concurrent tasks "PM2.5 gap > 30" and "PM10 gap > 50" over a 30-minute
    window, sharing one read of the streams, through the real simjoin_s2j DAG; then `simjoin
    report` plots tau, the workers and the shed ratio per micro-batch."""
    from simjoin.pipeline import get_spec
    from simjoin.pipeline.runner import run_pipeline
    from simjoin.report import render
    from simjoin.spark import delta

    base = f"{warehouse.rstrip('/')}/s2j_demo"
    left, right, out = f"{base}/left", f"{base}/right", f"{base}/out"
    gen = get_spec("generate")
    for path, seed in ((left, 1), (right, 2)):
        run_pipeline(spark, gen.make_run({"kind": "aqi", "out": path, "rows": 1500, "domain": 12, "rate": 0.5,
                                          "seed": seed, "overwrite": True}))
    shutil.rmtree(out, ignore_errors=True)  # a fresh demo output every time
    conf = {"left": left, "right": right, "output": out, "window": "30m", "workers": 2,
            "tasks": "pm25: abs(l.pm25 - r.pm25) > 30; pm10: abs(l.pm10 - r.pm10) > 50"}
    run = bag.dags["simjoin_s2j"].test(run_conf=conf)
    if "success" not in str(run.state).lower():
        raise SystemExit(f"demo: DAG simjoin_s2j ended in state {run.state}")
    counts = {t: delta.read_table(spark, f"{out}/{t}").count() for t in ("pm25", "pm10")}
    files = render(spark.read.format("delta").load(f"{out}/_stats").toPandas(), f"{base}/report")
    return (f"s2j demo (AQI, DAG simjoin_s2j): {counts['pm25']} PM2.5 and {counts['pm10']} PM10 pairs -> "
            f"{out}/pm25, {out}/pm10; try `simjoin s2j query --output {out} --task pm25`; report "
            f"{os.path.dirname(files[0])}/index.html")


if __name__ == "__main__":
    main()
