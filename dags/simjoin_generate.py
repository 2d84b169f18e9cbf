"""simjoin_generate: write a synthetic input table (sets, vectors, ineq or keys) to Delta."""

from __future__ import annotations

import os

from airflow.sdk import Asset, Param, dag, task

WAREHOUSE = os.path.abspath(os.environ.get("SIMJOIN_WAREHOUSE", "warehouse"))
GENERATED = Asset(uri=f"file://{WAREHOUSE}/generated")


@dag(
    dag_id="simjoin_generate",
    schedule=None,
    catchup=False,
    tags=["simjoin", "generate"],
    default_args={"retries": 2},
    doc_md=__doc__,
    params={
        "kind": Param("vectors", type="string", enum=["sets", "vectors", "ineq", "keys"]),
        "out": Param(f"{WAREHOUSE}/generated/vectors", type="string", minLength=1,
                     description="Delta table path to (over)write."),
        "rows": Param(10000, type="integer", minimum=0, maximum=1_000_000_000),
        "seed": Param(42, type="integer", minimum=0),
        "dim": Param(8, type="integer", minimum=1, maximum=4096),
        "dist": Param("uniform", type="string", enum=["uniform", "gaussian", "skewed", "pareto", "clustered"]),
        "rate": Param(100.0, type="number", exclusiveMinimum=0),
        "alpha": Param(1.2, type="number", exclusiveMinimum=0, maximum=10),
        "domain": Param(1000, type="integer", minimum=1),
    },
)
def simjoin_generate():
    @task(outlets=[GENERATED])
    def generate(params=None) -> dict:
        from jobs.generate import run_task

        return run_task(dict(params))

    generate()


simjoin_generate()
