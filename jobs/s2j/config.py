"""The S2J operator's config: ``simjoin s2j`` options, the DAG's Params, ``conf/s2j.yaml``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from simjoin.config import StreamConfig, check, check_fields, check_stream_paths, param

__all__ = ["S2JConfig"]


@dataclass(frozen=True)
class S2JConfig(StreamConfig):
    left: str | None = param(None, "Left (or only) stream: Delta table id, ts, <numeric columns>.", io=True,
                             required=True, dag_default="{warehouse}/s2j/left")
    right: str | None = param(None, "Right stream (two-stream join); omit for a self-join.", io=True,
                              dag_default="{warehouse}/s2j/right")
    output: str | None = param(None, "Output directory: one pair table per task at DIR/<task> (left_id, right_id, "
                                     "ts), DIR/_stats, _shed, _quarantine, _state, _checkpoint.", io=True,
                               required=True, dag_default="{warehouse}/s2j/out")
    tasks: str | None = param(None, "Join tasks 'NAME: PREDICATE', repeatable (or ';'-separated): "
                                    "abs(l.pm25 - r.pm25) > 30, l.k = r.k AND l.a < r.b, abs(l.a - r.a) <= 2.",
                              flag="--task", required=True, multiple=True,
                              dag_default="pm25: abs(l.pm25 - r.pm25) > 30; pm10: abs(l.pm10 - r.pm10) > 30")
    window: str = param("30m", "Join window W (lifespan): a pair iff 0 <= ts_later - ts_earlier < W.",
                        duration=True)
    workers: int | None = param(None, "Initial workers m (default: ceil(E(rate) x window / (capacity x tau*)) "
                                      "with --rate and --capacity, else 2).", ge=1, le=1024, state=False)
    capacity: int | None = param(None, "W: tuples a worker can hold. Without it nothing is shed or scaled.",
                                 ge=1, state=False)
    rate: float | None = param(None, "E(rate): expected input tuples per second (both streams), for the initial "
                                     "workers.", gt=0, state=False)
    tau0: float = param(0.2, "Release workers when utilisation stays below this.", gt=0, lt=1, state=False)
    tau1: float = param(0.8, "Shed load above this utilisation.", gt=0, lt=1, state=False)
    tau2: float = param(0.9, "Add workers when utilisation stays above this.", gt=0, le=1, state=False)
    beta: float = param(0.5, "tau* = beta x tau1, the utilisation workers are sized for.", gt=0, lt=1, state=False)
    shed_base: float = param(0.0, "B: the base shed ratio once shedding starts.", ge=0, le=1, state=False)
    shed_model: str = param("linear", "Shed ratio model above tau1.", choices=("linear", "quadratic"), state=False)
    sustain: int = param(2, "Micro-batches a utilisation must last before workers are added or released.", ge=1,
                         le=1000, state=False)
    min_workers: int = param(1, "Fewest workers scaling may leave.", ge=1, le=1024, state=False)
    max_workers: int = param(16, "Most workers scaling may add.", ge=1, le=1024, state=False)
    alpha: float = param(0.8, "Problem 1's weight of imbalance against serialisations, for the tuple-block size.",
                         gt=0, lt=1, state=False)
    min_block: int = param(256, "Smallest tuple block stored (the paper's formula may give 1; a Delta row per tuple "
                                "would cost more than it balances).", ge=1, le=10_000_000, state=False)
    snapshot_every: int | None = param(None, "Commit a snapshot every N micro-batches (default: every micro-batch, "
                                             "or with --punctuation only on punctuation).", ge=1, le=100_000,
                                       state=False)
    punctuation: str | None = param(None, "Boolean column: a micro-batch holding a true value commits a snapshot.",
                                    pattern=r"[A-Za-z_][A-Za-z0-9_]*", allowed="a column name")
    domain: str | None = param(None, "Domain statistics 'col: skew; ...' (skew in [0, 1], e.g. the top key's "
                                     "share): each task leads with its least skewed indexable predicate.")

    def __post_init__(self) -> None:
        s = "s2j"
        check_fields(self, s)
        if self.tasks is not None:
            from simjoin.core.s2j.task import parse_tasks

            parse_tasks(self.tasks, domain=self.domain_stats)  # a TaskError (a ValueError) names the token
        check(self.tau0 < self.beta * self.tau1 < self.tau1 <= self.tau2, s, "tau0", self.tau0,
              f"0 < tau0 < tau* = beta x tau1 ({self.beta * self.tau1:g}) < tau1 ({self.tau1}) <= tau2 ({self.tau2})")
        check(self.min_workers <= self.max_workers, s, "min_workers", self.min_workers,
              f"<= max_workers ({self.max_workers})")
        check_stream_paths(self, s, output_allowed="a directory other than the {k} stream")

    @property
    def domain_stats(self) -> dict[str, float] | None:
        if not self.domain:
            return None
        out: dict[str, float] = {}
        for part in str(self.domain).split(";"):
            if not part.strip():
                continue
            k, sep, v = part.replace("=", ":").partition(":")
            try:
                val = float(v)
            except ValueError:
                val = math.nan
            check(bool(sep) and bool(k.strip()) and 0 <= val <= 1, "s2j", "domain", self.domain,
                  "'column: skew' pairs separated by ';', each skew in [0, 1]")
            out[k.strip()] = val
        return out

    @property
    def task_list(self) -> Any:
        from simjoin.core.s2j.task import parse_tasks

        return parse_tasks(str(self.tasks), domain=self.domain_stats)
