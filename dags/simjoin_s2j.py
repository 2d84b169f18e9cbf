"""Airflow DAG simjoin_s2j, built from the pipeline spec ``jobs/s2j/spec.py``.
Schedule: SIMJOIN_S2J_SCHEDULE = none (default) | asset | a cron expression."""

from simjoin.pipeline.dags import build_dag

dag = build_dag("s2j")
