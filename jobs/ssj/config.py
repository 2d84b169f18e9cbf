"""The set-similarity join's config: ``simjoin ssj`` options, the DAG's Params, ``conf/ssj.yaml``."""

from __future__ import annotations

from dataclasses import dataclass

from simjoin.config import check, check_fields, param, same_path

__all__ = ["SSJConfig"]


@dataclass(frozen=True)
class SSJConfig:
    input: str | None = param(None, "Delta table with the records (left side): id, text.", io=True, required=True,
                              dag_default="{warehouse}/sets")
    output: str | None = param(None, "Delta table for the pairs; stage tables are written beside it.", io=True,
                               required=True, dag_default="{warehouse}/ssj_pairs")
    right: str | None = param(None, "Second input for an R-S join.", io=True)
    threshold: float = param(0.8, "Similarity threshold θ, 0 < θ <= 1.", gt=0, le=1)
    similarity: str = param("jaccard", "Similarity function.", choices=("jaccard", "cosine", "dice"))
    tokenizer: str = param("word", "word | qgram:N", pattern=r"word|qgram:[1-9][0-9]*",
                           allowed="word or qgram:N with N >= 1")
    id_col: str = param("id", "Id column of the input.")
    text_col: str = param("text", "Text column of the input.")
    workers: int | None = param(None, "Nodes n (default: the optimizer's search).", ge=1)
    mod: int | None = param(None, "Modulo m (default: the optimizer's search).", ge=1)
    total_units: int | None = param(None, "Seed t of the parameter search (n * m = t; default: 2 units per task "
                                          "slot).", ge=1, flag="--units")
    memory_gb: float | None = param(None, "RAM limit per unit for the optimizer, GiB (default: from the Spark "
                                          "session: the machine or executor memory per task slot).", gt=0)
    skew_factor: float = param(1.25, "Split a node into more modgroups while its units cost more than this times "
                                    "the mean unit (candidate skew).", ge=1, le=100)
    executor: str = param("auto", "Where the stages run: auto (the optimizer chooses from its memory and cost "
                                  "estimates), in_process (no JVM: Arrow, numpy and deltalake in this process) "
                                  "or spark.", choices=("auto", "in_process", "spark"))
    incremental: bool = param(True, "Join only the records appended since the last published run with the "
                                    "same parameters, and carry its pairs over (a full join when there is none, "
                                    "or the input was rewritten).")

    def __post_init__(self) -> None:
        s = "ssj"
        check_fields(self, s)
        check(bool(self.id_col), s, "id_col", self.id_col, "a column name")
        check(bool(self.text_col), s, "text_col", self.text_col, "a column name")
        check(self.right is None or self.right != self.input, s, "right", self.right,
              "a table other than the input (omit --right for a self-join)")
        for k in ("input", "right"):
            check(self.output is None or getattr(self, k) is None or
                  not same_path(self.output, getattr(self, k)), s, "output", self.output,
                  f"a path other than the {k} table (it would be overwritten)")

    @property
    def qgram(self) -> int | None:
        return int(self.tokenizer.split(":", 1)[1]) if self.tokenizer.startswith("qgram:") else None
