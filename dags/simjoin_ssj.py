"""Airflow DAG simjoin_ssj, built from the pipeline spec ``jobs/ssj/spec.py``."""

from simjoin.pipeline.dags import build_dag

dag = build_dag("ssj")
