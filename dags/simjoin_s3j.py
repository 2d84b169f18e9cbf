"""simjoin_s3j: streaming metric-space similarity join (S3J, Siachamis et al., DEBS'23).

A recurring micro-batch: each run joins what arrived in the left (and right) stream since the
last run. Tasks, one call into ``jobs/`` each, pass Delta paths/versions through XCom:

ingest (validate, window, quarantine, stage) -> partition (Section 6) -> worksets (Section 7,
steps 1-5) -> join (Section 7.7) -> gate (Great Expectations) -> stats (stats table, state commit).

Schedule: ``simjoin_s3j`` is triggered manually or by the Asset of its left stream
(``SIMJOIN_S3J_SCHEDULE=asset``); set ``SIMJOIN_S3J_SCHEDULE`` to a cron expression (e.g.
``*/5 * * * *``) for a fixed cadence, or ``none`` (default) for manual runs only.
``max_active_runs=1``: micro-batches are processed in order.
"""

from __future__ import annotations

import os

from airflow.sdk import Asset, Param, dag, task

WAREHOUSE = os.path.abspath(os.environ.get("SIMJOIN_WAREHOUSE", "warehouse"))
LEFT = f"{WAREHOUSE}/s3j/left"
OUTPUT = f"{WAREHOUSE}/s3j/pairs"
STREAM = Asset(uri=f"file://{LEFT}")
PAIRS = Asset(uri=f"file://{OUTPUT}")
STATS = Asset(uri=f"file://{OUTPUT}_stats")
STATE = Asset(uri=f"file://{OUTPUT}_state")


def _schedule() -> object:
    raw = os.environ.get("SIMJOIN_S3J_SCHEDULE", "none").strip()
    if raw.lower() in ("", "none", "null"):
        return None
    if raw.lower() == "asset":
        return [STREAM]
    return raw


@dag(
    dag_id="simjoin_s3j",
    schedule=_schedule(),
    catchup=False,
    max_active_runs=1,
    tags=["simjoin", "s3j", "streaming"],
    default_args={"retries": 2},
    doc_md=__doc__,
    params={
        "left": Param(LEFT, type="string", minLength=1, description="Left (or only) stream, a Delta table."),
        "right": Param(None, type=["null", "string"], description="Right stream; null for a self-join."),
        "output": Param(OUTPUT, type="string", minLength=1, description="Pair table path."),
        "threshold": Param(0.05, type="number", exclusiveMinimum=0, description="Distance threshold t."),
        "metric": Param("angular", type="string", enum=["angular", "euclidean", "cosine"]),
        "window": Param("60s", type="string", pattern=r"^[0-9]+(\.[0-9]+)?(ms|s|m|h)?$"),
        "slide": Param(None, type=["null", "string"], pattern=r"^[0-9]+(\.[0-9]+)?(ms|s|m|h)?$"),
        "workers": Param(5, type="integer", minimum=1, maximum=1024),
        "algorithm": Param("s3j", type="string", enum=["s3j", "clusterjoin"]),
        "virtual_partitions": Param(500, type="integer", minimum=1, maximum=100_000),
        "seed": Param(42, type="integer", minimum=0),
        "inclusive": Param(False, type="boolean"),
        "exact_distances": Param(False, type="boolean"),
    },
)
def simjoin_s3j():
    @task
    def ingest(params=None) -> dict:
        from jobs.s3j_tasks import run_stage

        return run_stage("ingest", dict(params))

    @task
    def partition(staged: dict, params=None) -> dict:
        from jobs.s3j_tasks import run_stage

        return run_stage("partition", dict(params))

    @task
    def worksets(copies: dict, params=None) -> dict:
        from jobs.s3j_tasks import run_stage

        return run_stage("worksets", dict(params))

    @task(outlets=[PAIRS])
    def join(members: dict, params=None) -> dict:
        from jobs.s3j_tasks import run_stage

        return run_stage("join", dict(params))

    @task
    def gate(pairs: dict, params=None) -> dict:
        from jobs.s3j_tasks import run_stage

        return run_stage("gate", dict(params))

    @task(outlets=[STATS, STATE])
    def stats(checked: dict, params=None) -> dict:
        from jobs.s3j_tasks import run_stage

        return run_stage("stats", dict(params))

    stats(gate(join(worksets(partition(ingest())))))


simjoin_s3j()
