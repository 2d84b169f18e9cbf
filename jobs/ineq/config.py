"""The inequality join's config: ``simjoin ineq`` options, the DAG's Params, ``conf/ineq.yaml``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simjoin.config import StreamConfig, check, check_fields, check_stream_paths, param, parse_duration

__all__ = ["IneqConfig"]


@dataclass(frozen=True)
class IneqConfig(StreamConfig):
    left: str | None = param(None, "Left (or only) stream: Delta table id, ts, <numeric columns>.", io=True,
                             required=True, dag_default="{warehouse}/ineq/left")
    right: str | None = param(None, "Right stream (two-stream join); omit for a self-join.", io=True,
                              dag_default="{warehouse}/ineq/right")
    output: str | None = param(None, "Pair table left_id, right_id, ts; <output>_stats, _quarantine, _state, "
                                     "_checkpoint beside it.", io=True, required=True,
                               dag_default="{warehouse}/ineq/pairs")
    where: str | None = param(None, "Predicates joined by AND: l.a < r.a, l.a + 5 <= r.b, abs(l.a - r.a) < 2, "
                                    "l.k = r.k, l.k != r.k.", required=True, dag_default="l.a < r.a AND l.b > r.b")
    window: str | None = param(None, "Time window W: a pair iff 0 <= ts_later - ts_earlier < W.", duration=True,
                               dag_default="60s")
    slide: str | None = param(None, "Expiry and merge granularity of a time window (default: window / 10).",
                              duration=True, state=False)
    window_count: int | None = param(None, "Count window W: the opposite stream's last W tuples at arrival "
                                           "(instead of --window).", ge=1, le=1_000_000_000)
    slide_count: int | None = param(None, "Expiry and merge granularity of a count window, in tuples (default: "
                                          "window_count / 10).", ge=1, state=False)
    workers: int = param(4, "Workers: PO-Join batch lists, probed in parallel (batches are assigned round-robin).",
                         ge=1, le=1024, state=False)
    merge_every: int | None = param(None, "δ: merge the mutable part into an immutable PO-Join batch once it "
                                          "holds this many tuples (default: a slide).", ge=1, state=False)

    def __post_init__(self) -> None:
        s = "ineq"
        check_fields(self, s)
        check((self.window is None) != (self.window_count is None), s, "window", self.window,
              "exactly one of window (a duration) and window_count (tuples)")
        if self.slide is not None:
            check(self.window is not None and parse_duration(self.slide) <= parse_duration(self.window), s,
                  "slide", self.slide, f"a duration <= window ({self.window}), with --window")
        if self.slide_count is not None:
            check(self.window_count is not None and self.slide_count <= self.window_count, s, "slide_count",
                  self.slide_count, f"tuples <= window_count ({self.window_count}), with --window-count")
        check(self.window_count is None or self.idle_timeout_s == 0, s, "idle_timeout", self.idle_timeout,
              "0s with --window-count (a count window expires by the other stream's count, not its time)")
        check(self.window_count is None or self.allowed_lateness_s == 0, s, "allowed_lateness",
              self.allowed_lateness, "0s with --window-count (a count window is arrival order: no row is late); "
                                     "a lateness needs a time --window")
        if self.where is not None:
            from simjoin.core.inequality.query import parse_query

            parse_query(self.where)  # a QueryError (a ValueError) names the offending token
        check_stream_paths(self, s)

    @property
    def query(self) -> Any:
        from simjoin.core.inequality.query import parse_query

        return parse_query(str(self.where))
