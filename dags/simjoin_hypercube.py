"""Airflow DAG simjoin_hypercube, built from the pipeline spec ``jobs/hypercube/spec.py``.
Schedule: SIMJOIN_HYPERCUBE_SCHEDULE = none (default) | asset | a cron expression."""

from simjoin.pipeline.dags import build_dag

dag = build_dag("hypercube")
