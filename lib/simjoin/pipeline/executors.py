"""An executor by its name (``in_process`` or ``spark``; ``simjoin.runtime.executor``), with the
reason it was chosen: where the pipeline layer turns a recorded choice into the object that runs it."""

from __future__ import annotations

from typing import Any

__all__ = ["executor"]


def executor(name: str, spark: Any, reason: str = "") -> Any:
    """The in-process executor, or the Spark executor over ``spark`` (a session or a ``LazySpark``,
    started only when a Spark job runs)."""
    if name == "in_process":
        from simjoin.runtime.executor import InProcessExecutor

        return InProcessExecutor(reason)
    if name != "spark":
        raise ValueError(f"executor {name!r}: allowed in_process or spark")
    from simjoin.spark.executor import SparkExecutor

    return SparkExecutor(spark, reason)
