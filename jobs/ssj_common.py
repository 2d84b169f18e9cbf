"""What every set-similarity-join stage needs: the run's inputs, outputs, id and config."""

from __future__ import annotations

import re
from dataclasses import dataclass

from simjoin.config import SSJConfig
from simjoin.spark.setsim import SSJTables


@dataclass(frozen=True)
class SSJRun:
    input: str
    output: str
    cfg: SSJConfig
    right: str | None = None
    run_id: str = "cli"

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.:+\-]+", self.run_id):
            raise ValueError(f"invalid run_id {self.run_id!r}: allowed letters, digits and _.:+-")

    @property
    def tables(self) -> SSJTables:
        return SSJTables(self.output)

    @property
    def rs(self) -> bool:
        return self.right is not None

    @property
    def part(self) -> dict[str, str]:
        return {"run_id": self.run_id}
