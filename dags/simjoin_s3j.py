"""Airflow DAG simjoin_s3j, built from the pipeline spec ``jobs/s3j/spec.py``.
Schedule: SIMJOIN_S3J_SCHEDULE = none (default) | asset | a cron expression."""

from simjoin.pipeline.dags import build_dag

dag = build_dag("s3j")
