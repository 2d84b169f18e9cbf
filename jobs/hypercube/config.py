"""Streaming HyperCube's config: ``simjoin hypercube`` options, the DAG's Params, ``conf/hypercube.yaml``."""

from __future__ import annotations

from dataclasses import dataclass

from simjoin.config import StreamConfig, check, check_fields, check_stream_paths, param

__all__ = ["HyperCubeConfig"]


@dataclass(frozen=True)
class HyperCubeConfig(StreamConfig):
    left: str | None = param(None, "Left stream R: Delta table id, ts, <integer key column>.", io=True, required=True,
                             dag_default="{warehouse}/hypercube/left")
    right: str | None = param(None, "Right stream S: Delta table id, ts, <integer key column>.", io=True,
                              required=True, dag_default="{warehouse}/hypercube/right")
    output: str | None = param(None, "Pair table left_id, right_id, k, ts (with --count-only: k, pairs, batch_id); "
                                     "<output>_stats, _quarantine, _state, _checkpoint beside it.", io=True,
                               required=True, dag_default="{warehouse}/hypercube/pairs")
    key: str | None = param(None, "Join key column (an integer type) of the left stream (and of the right one "
                                  "unless --right-key).", required=True, dag_default="k",
                            pattern=r"[A-Za-z_][A-Za-z0-9_]*", allowed="a column name")
    right_key: str | None = param(None, "Join key column of the right stream (default: --key).",
                                  pattern=r"[A-Za-z_][A-Za-z0-9_]*", allowed="a column name")
    workers: int = param(8, "Workers p (Spark partitions): p light tasks plus each heavy key's grid.", ge=1, le=1024,
                         state=False)
    window: str | None = param(None, "Window W: a pair iff 0 <= ts_later - ts_earlier < W (default: the whole "
                                     "history).", duration=True)
    count_only: bool = param(False, "Write the join size per key and micro-batch (k, pairs, batch_id) instead "
                                    "of the pairs.")
    epsilon: float | None = param(None, "Heavy-hitter error eps (default and maximum: 1/(2p)).", gt=0, lt=1,
                                  state=False)
    strategy: str = param("hypercube", "hypercube (Streaming HyperCube), or phj: plain hashing of every key, "
                                       "the baseline.", choices=("hypercube", "phj"), state=False)
    assign: str = param("load", "Tasks to workers: load (largest first to the least-loaded worker, every "
                                "micro-batch) or tasks (the paper: a new task to the worker with the fewest).",
                        choices=("load", "tasks"), state=False)

    def __post_init__(self) -> None:
        s = "hypercube"
        check_fields(self, s)
        if self.epsilon is not None:
            check(self.epsilon <= 1 / (2 * self.workers), s, "epsilon", self.epsilon,
                  f"0 < epsilon <= 1/(2p) = {1 / (2 * self.workers):g} for workers p = {self.workers}")
        check_stream_paths(self, s, right_allowed="a stream other than the left one")

    @property
    def eps(self) -> float:
        return float(self.epsilon or 1 / (2 * self.workers))
