"""Airflow DAG simjoin_ineq, built from the pipeline spec ``jobs/ineq/spec.py``.
Schedule: SIMJOIN_INEQ_SCHEDULE = none (default) | asset | a cron expression."""

from simjoin.pipeline.dags import build_dag

dag = build_dag("ineq")
