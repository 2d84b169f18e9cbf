"""simjoin_ssj: exact set-similarity join (Fier & Freytag) on Spark + Delta.

tokenize -> gate -> optimize -> join -> gate -> publish. Every stage reads and writes Delta
tables beside the output path and overwrites only this run's ``run_id`` partition, so a
retried or re-run task reproduces the same tables. Trigger with a config such as
``{"input": "warehouse/sets", "output": "warehouse/ssj_pairs", "threshold": 0.8}``.
"""

from __future__ import annotations

import os

from airflow.sdk import Asset, Param, dag, task

WAREHOUSE = os.path.abspath(os.environ.get("SIMJOIN_WAREHOUSE", "warehouse"))
OUT = f"{WAREHOUSE}/ssj_pairs"


def _asset(suffix: str = "") -> Asset:
    # named by their URI: a different warehouse gives different Assets, never a name clash
    return Asset(uri=f"file://{OUT}{suffix}")


@dag(
    dag_id="simjoin_ssj",
    schedule=None,
    catchup=False,
    tags=["simjoin", "ssj", "batch"],
    default_args={"retries": 2},
    doc_md=__doc__,
    params={
        "input": Param(f"{WAREHOUSE}/sets", type="string", minLength=1, description="Delta table (id, text)."),
        "output": Param(OUT, type="string", minLength=1, description="Delta table for the pairs."),
        "right": Param(None, type=["null", "string"], description="Optional second input (R-S join)."),
        "threshold": Param(0.8, type="number", exclusiveMinimum=0, maximum=1),
        "similarity": Param("jaccard", type="string", enum=["jaccard", "cosine", "dice"]),
        "tokenizer": Param("word", type="string", pattern=r"^(word|qgram:[1-9][0-9]*)$"),
        "id_col": Param("id", type="string", minLength=1),
        "text_col": Param("text", type="string", minLength=1),
        "workers": Param(None, type=["null", "integer"], minimum=1, description="Nodes n (null: optimizer)."),
        "mod": Param(None, type=["null", "integer"], minimum=1, description="Modulo m (null: optimizer)."),
        "total_units": Param(4, type="integer", minimum=1, maximum=4096),
        "memory_gb": Param(4.0, type="number", exclusiveMinimum=0),
    },
)
def simjoin_ssj():
    def stage(name: str, outlet: Asset | None = None):
        @task(task_id=name, outlets=[outlet] if outlet else [])
        def _run(params=None, run_id=None) -> dict:
            from jobs.ssj import task as ssj_task

            return ssj_task(name, dict(params), run_id)

        return _run()

    tok = stage("tokenize", _asset("_tokens"))
    gate1 = stage("gate_tokens")  # checks run as their own task; they write nothing
    opt = stage("optimize", _asset("_plan"))
    join = stage("join", _asset("_staging"))
    gate2 = stage("gate_pairs")
    pub = stage("publish", _asset())
    tok >> gate1 >> opt >> join >> gate2 >> pub


simjoin_ssj()
