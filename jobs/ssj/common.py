"""What every set-similarity-join stage needs: the run (inputs, output, run id, config) and its tables."""

from __future__ import annotations

from typing import Any, ClassVar

from simjoin.pipeline.spec import Run


class SSJRun(Run):
    """A run of ``simjoin ssj``; every table is partitioned by ``run_id`` and replaced per run."""

    #: Its stages may run in process (``simjoin.runtime.placement``): the CLI then validates in the
    #: warm gate server instead of importing Great Expectations in a thread beside the stages,
    #: where the import took one of two cores from tokenize (the Spark path imports it in its
    #: tokenize stage, beside Spark's work).
    IN_PROCESS: ClassVar[bool] = True

    @property
    def tables(self):  # type: ignore[no-untyped-def]
        return self.tables_at(self.cfg.output)

    @classmethod
    def tables_at(cls, output: str):  # type: ignore[no-untyped-def]
        from simjoin.runtime.tables import SSJTables

        return SSJTables(output)

    def table_paths(self) -> dict[str, str]:
        t = self.tables
        return {**t.all(), "output": self.cfg.output, "staging": t.staging}

    @property
    def input(self) -> str:
        return str(self.cfg.input)

    @property
    def rs(self) -> bool:
        return self.cfg.right is not None

    @property
    def part(self) -> dict[str, str]:
        return {"run_id": self.run_id}

    def executor(self, spark: Any, inc: Any) -> Any:
        """The executor this run's stages run on (``inc.executor``, chosen by tokenize), one per
        process."""
        got = self.frames.get("executor")
        if got is None or got.name != inc.executor:
            from simjoin.pipeline.executors import executor

            got = self.keep("executor", executor(inc.executor, spark, inc.executor_reason))
        return got
