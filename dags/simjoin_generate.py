"""Airflow DAG simjoin_generate, built from the pipeline spec ``jobs/generate/spec.py``."""

from simjoin.pipeline.dags import build_dag

dag = build_dag("generate")
