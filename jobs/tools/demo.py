"""`make demo`: the main jobs on the embedded default (local Spark, ./warehouse, SQLite Airflow).

Runs the real DAGs with ``dag.test()``: simjoin_generate writes Zipf token sets, simjoin_ssj
joins them; then the S3J demo (when present) joins a generated vector stream. The last line
names every table written.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
        ("simjoin_generate", {"kind": "sets", "out": sets, "rows": 20000, "seed": 7}),
        ("simjoin_ssj", {"input": sets, "output": pairs, "threshold": 0.8}),
    ):
        run = bag.dags[dag_id].test(run_conf=conf)
        if "success" not in str(run.state).lower():
            raise SystemExit(f"demo: DAG {dag_id} ended in state {run.state}")
    # every DAG run keeps its own run_id partition: count this run's pairs
    from pyspark.sql import functions as F

    from jobs.ssj import sanitize_run_id

    n_pairs = delta.read_table(spark, pairs).filter(F.col("run_id") == sanitize_run_id(run.run_id)).count()
    written = [sets, pairs] + [f"{pairs}_{s}" for s in ("tokens", "lengths", "plan", "stats", "quarantine")]
    extra = ""
    try:
        from jobs import s3j
    except ImportError:
        s3j = None  # type: ignore[assignment]
    if s3j is not None and hasattr(s3j, "demo"):
        extra = "; " + s3j.demo(spark, f"{warehouse}/demo")
    rel = [os.path.relpath(p, ROOT) for p in written]
    import logging

    logging.getLogger("py4j").setLevel(logging.WARNING)
    spark.stop()
    print(f"demo: ssj found {n_pairs} pairs in {time.perf_counter() - t0:.0f}s; tables: {', '.join(rel)}{extra}")


if __name__ == "__main__":
    main()
