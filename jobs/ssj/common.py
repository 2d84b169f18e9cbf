"""What every set-similarity-join stage needs: the run (inputs, output, run id, config) and its tables."""

from __future__ import annotations

from simjoin.pipeline.spec import Run


class SSJRun(Run):
    """A run of ``simjoin ssj``; every table is partitioned by ``run_id`` and replaced per run."""

    @property
    def tables(self):  # type: ignore[no-untyped-def]
        return self.tables_at(self.cfg.output)

    @classmethod
    def tables_at(cls, output: str):  # type: ignore[no-untyped-def]
        from simjoin.spark.tables import SSJTables

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
