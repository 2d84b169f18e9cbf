"""Airflow entry point of the S3J stages: validated DAG params -> one stage -> an XCom dict
(Delta paths, versions, unit id)."""

from __future__ import annotations

from typing import Any

from jobs.s3j_common import S3JRun

KEYS = ("threshold", "metric", "window", "slide", "workers", "algorithm", "virtual_partitions", "seed",
        "inclusive", "exact_distances")


def make_run(params: dict[str, Any]) -> S3JRun:
    from simjoin.config import S3JConfig, load_config

    cfg = load_config(S3JConfig, "s3j", {k: params.get(k) for k in KEYS})
    return S3JRun(params["left"], params["output"], cfg, right=params.get("right") or None)


def run_stage(name: str, params: dict[str, Any]) -> dict[str, Any]:
    from jobs import s3j_gate, s3j_ingest, s3j_join, s3j_partition, s3j_stats, s3j_worksets
    from simjoin.spark.session import get_spark

    mods = {"ingest": s3j_ingest, "partition": s3j_partition, "worksets": s3j_worksets, "join": s3j_join,
            "gate": s3j_gate, "stats": s3j_stats}
    if name not in mods:
        raise ValueError(f"invalid stage {name!r}: allowed {', '.join(mods)}")
    res = mods[name].run(get_spark(), make_run(params))
    return {k: (sorted(v) if isinstance(v, set) else v) for k, v in res.items()}
