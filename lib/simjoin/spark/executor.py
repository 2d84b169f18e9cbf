"""The Spark executor (``simjoin.runtime.executor``): a stage's tasks in one ``mapInArrow`` Spark
job per fan-out, each task alone in its partition (``routing.spark_task_table``); tables read with
``deltalake`` where it can and with Spark where it cannot (not local, a feature it lacks), and
written likewise (``simjoin.spark.delta``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from simjoin.runtime.executor import TaskFn

__all__ = ["SparkExecutor"]


@dataclass(frozen=True)
class SparkExecutor:
    """The Spark executor over a session or a ``LazySpark`` (started only when a Spark job runs: a
    unit whose tables deltalake reads starts no session to read them)."""

    spark: Any = field(repr=False)
    reason: str = ""
    name: str = "spark"

    def map_tasks(self, t: pa.Table, task: np.ndarray, fn: TaskFn, schema: pa.Schema,
                  name: str = "task") -> pa.Table:
        from simjoin.spark import routing

        return routing.spark_task_table(self.spark, t, task, fn, schema, name)

    def read(self, path: str, where: Any = None, columns: Sequence[str] | None = None) -> pa.Table | None:
        from simjoin.spark import delta

        return delta.read_arrow_any(lambda: self.spark, path, where, columns)

    def overwrite(self, t: pa.Table, path: str) -> None:
        from simjoin.spark import delta

        delta.overwrite_arrow(self.spark, t, path)
