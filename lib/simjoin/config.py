"""Typed configuration: ``conf/*.yaml`` -> frozen dataclasses, validated.

Precedence, lowest to highest: dataclass defaults < YAML (``conf/<section>.yaml``)
< environment (``SIMJOIN_<SECTION>_<KEY>``, plus the short aliases in ``ENV_ALIASES``)
< explicit overrides (CLI flags, DAG params).

A wrong value raises :class:`ConfigError` naming the key, the value and what is allowed.
"""

from __future__ import annotations

import math
import os
import re
import types
import typing
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

import yaml

__all__ = [
    "ConfigError",
    "SparkConfig",
    "SSJConfig",
    "S3JConfig",
    "IneqConfig",
    "HyperCubeConfig",
    "S2JConfig",
    "GenerateConfig",
    "StreamConfig",
    "param",
    "check_fields",
    "fingerprint",
    "load_config",
    "conf_dir",
]

ENV_ALIASES = {
    ("spark", "master"): "SIMJOIN_SPARK_MASTER",
    ("spark", "warehouse"): "SIMJOIN_WAREHOUSE",
}


class ConfigError(ValueError):
    """A configuration value is not allowed: names key, value and what is allowed."""

    def __init__(self, key: str, value: Any, allowed: str) -> None:
        super().__init__(f"invalid config {key}={value!r}: allowed {allowed}")
        self.key, self.value, self.allowed = key, value, allowed


def _check(ok: bool, section: str, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{section}.{key}", value, allowed)


@dataclass(frozen=True)
class SparkConfig:
    master: str = "local[*]"
    warehouse: str = "./warehouse"
    shuffle_partitions: int = 8
    driver_memory: str = "4g"
    app_name: str = "simjoin"
    log_level: str = "ERROR"

    def __post_init__(self) -> None:
        s = "spark"
        _check(
            self.master.startswith(("local", "spark://", "yarn", "k8s://")),
            s, "master", self.master, "local[*], local[N], spark://host:port, yarn or k8s://...",
        )
        _check(bool(self.warehouse), s, "warehouse", self.warehouse, "a non-empty path")
        _check(self.shuffle_partitions >= 1, s, "shuffle_partitions", self.shuffle_partitions, "an integer >= 1")
        _check(
            self.log_level in ("ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"),
            s, "log_level", self.log_level, "one of DEBUG, INFO, WARN, ERROR, FATAL, OFF",
        )


def param(
    default: Any,
    help: str = "",
    *,
    choices: tuple[Any, ...] | None = None,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    duration: bool = False,
    pattern: str | None = None,
    allowed: str | None = None,
    flag: str | None = None,
    io: bool = False,
    required: bool = False,
    dag_default: str | None = None,
    state: bool = True,
    multiple: bool = False,
    zone: bool = False,
) -> Any:
    """A config field, declared once. From its metadata come the validation below, the DAG's
    ``Param`` (type, enum, bounds, description) and the CLI option (``simjoin.pipeline``).

    ``io``: a table path (not in YAML defaults or the state fingerprint); ``required``: the CLI
    and the DAG must give it; ``dag_default``: its DAG default under the warehouse, e.g.
    ``"{warehouse}/s3j/left"``; ``state=False``: not part of the persisted-state fingerprint;
    ``duration``: a positive duration such as ``60s``; ``pattern``: a regular expression the
    whole value must match, described by ``allowed``; ``multiple``: the CLI flag repeats, its
    values joined by ``; `` (a YAML list works the same); ``zone``: an IANA time zone name.
    """
    meta = {"help": help, "choices": choices, "gt": gt, "ge": ge, "le": le, "lt": lt, "duration": duration,
            "pattern": pattern, "allowed": allowed, "zone": zone,
            "flag": flag, "io": io, "required": required, "dag_default": dag_default, "state": state and not io,
            "multiple": multiple}
    return field(default=default, metadata=meta)


def _bounds_text(key: str, m: Any, tp: Any) -> str:
    lo = f"{m['gt']} < " if m["gt"] is not None else f"{m['ge']} <= " if m["ge"] is not None else ""
    hi = f" <= {m['le']}" if m["le"] is not None else f" < {m['lt']}" if m["lt"] is not None else ""
    if lo and hi:
        return f"{lo}{key}{hi}"
    kind = "an integer" if tp is int else "a number"
    if lo:
        op = ">" if m["gt"] is not None else ">="
        return f"{kind} {op} {m['gt'] if m['gt'] is not None else m['ge']}"
    return f"{kind} {hi.strip()}"


def _choices_text(choices: tuple[Any, ...]) -> str:
    c = [str(x) for x in choices]
    return c[0] if len(c) == 1 else f"{', '.join(c[:-1])} or {c[-1]}"


def field_type(cls: Any, name: str) -> Any:
    """The field's scalar type (``int``, ``float``, ``str``, ``bool``) and whether it may be None."""
    tp = get_type_hints(cls)[name]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], True
    return tp, False


def check_fields(cfg: Any, section: str) -> None:
    """Validate every field of a config dataclass against its ``param`` metadata."""
    for f in fields(cfg):
        m = f.metadata
        if not m:
            continue
        v = getattr(cfg, f.name)
        tp, optional = field_type(type(cfg), f.name)
        if v is None:
            _check(optional, section, f.name, v, f"a value of type {tp.__name__}")
            continue
        if tp in (int, float):
            ok_type = isinstance(v, (int, float)) and not isinstance(v, bool) and (tp is float or float(v).is_integer())
            _check(ok_type, section, f.name, v, f"a value of type {tp.__name__}")
            if any(m[k] is not None for k in ("gt", "ge", "le", "lt")):
                ok = not math.isnan(v) and (
                    (m["gt"] is None or v > m["gt"]) and (m["ge"] is None or v >= m["ge"])
                    and (m["le"] is None or v <= m["le"]) and (m["lt"] is None or v < m["lt"]))
                _check(ok, section, f.name, v, _bounds_text(f.name, m, tp))
        if m["choices"] is not None:
            _check(v in m["choices"], section, f.name, v, _choices_text(m["choices"]))
        if m["duration"]:
            zero = m["ge"] == 0  # a duration that may be 0s (e.g. allowed lateness)
            try:
                ok = parse_duration(v) >= 0 if zero else parse_duration(v) > 0
            except ValueError:
                ok = False
            _check(ok, section, f.name, v, ("a duration >= 0 such as 0s, 30s, 5m" if zero
                                            else "a positive duration such as 60s, 5m, 1h"))
        if m.get("zone"):
            _check(_is_zone(v), section, f.name, v, "an IANA time zone name such as UTC or Europe/Berlin")
        if m["pattern"] is not None:
            _check(isinstance(v, str) and re.fullmatch(m["pattern"], v) is not None, section, f.name, v,
                   m["allowed"] or f"a value matching {m['pattern']}")
        if m["io"] and v is not None:
            _check(isinstance(v, str) and bool(v.strip()), section, f.name, v, "a Delta table path")


def _is_zone(name: Any) -> bool:
    import zoneinfo

    try:
        zoneinfo.ZoneInfo(str(name))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False
    return bool(str(name).strip())


def fingerprint(cfg: Any, extra: str = "") -> str:
    """The fields persisted state depends on (``state=True``), as one comparable string."""
    parts = [f"{f.name}={getattr(cfg, f.name)!r}" for f in fields(cfg) if f.metadata.get("state", False)]
    return "|".join(parts + ([extra] if extra else []))


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
    incremental: bool = param(True, "Join only the records appended since the last published run with the "
                                    "same parameters, and carry its pairs over (a full join when there is none, "
                                    "or the input was rewritten).")

    def __post_init__(self) -> None:
        s = "ssj"
        check_fields(self, s)
        _check(bool(self.id_col), s, "id_col", self.id_col, "a column name")
        _check(bool(self.text_col), s, "text_col", self.text_col, "a column name")
        _check(self.right is None or self.right != self.input, s, "right", self.right,
               "a table other than the input (omit --right for a self-join)")
        for k in ("input", "right"):
            _check(self.output is None or getattr(self, k) is None or
                   not _same_path(self.output, getattr(self, k)), s, "output", self.output,
                   f"a path other than the {k} table (it would be overwritten)")

    @property
    def qgram(self) -> int | None:
        return int(self.tokenizer.split(":", 1)[1]) if self.tokenizer.startswith("qgram:") else None


def _same_path(a: str, b: str) -> bool:
    import os.path

    norm = lambda p: p if ":" in p else os.path.normpath(os.path.abspath(p))  # noqa: E731
    return norm(a.rstrip("/")) == norm(b.rstrip("/"))


def parse_duration(text: str) -> float:
    """'60s', '5m', '1h', '250ms' or a bare number of seconds -> seconds."""
    t = str(text).strip().lower()
    for unit, mult in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if t.endswith(unit) and t[: -len(unit)].replace(".", "", 1).isdigit():
            return float(t[: -len(unit)]) * mult
    if t.replace(".", "", 1).isdigit():
        return float(t)
    raise ValueError(f"invalid duration {text!r}: allowed e.g. 60s, 5m, 1h, 250ms")


@dataclass(frozen=True)
class StreamConfig:
    """What every stream pipeline's config has: its input's time column and the future bound
    (DESIGN.md, "How streams become micro-batches")."""

    ts_unit: str | None = param(None, "Unit of a numeric ts column (a timestamp column needs none).",
                                choices=("s", "ms", "us"), state=True)
    max_future: str = param("1h", "Records dated more than this past the current time are quarantined as "
                                  "future.", duration=True, state=False)
    allowed_lateness: str = param("0s", "A row up to this far behind the latest ts its stream committed is still "
                                        "joined exactly (state is kept that much longer); rows further behind are "
                                        "quarantined as late.", duration=True, ge=0, state=True)
    ts_zone: str = param("UTC", "Time zone of a TIMESTAMP_NTZ ts column or of ts strings without a zone "
                                "(an IANA name such as Europe/Berlin).", zone=True, state=True)

    @property
    def max_future_s(self) -> float:
        return parse_duration(self.max_future)

    @property
    def allowed_lateness_s(self) -> float:
        return parse_duration(self.allowed_lateness)


@dataclass(frozen=True)
class S3JConfig(StreamConfig):
    left: str | None = param(None, "Left (or only) stream: Delta table id, ts, vector array<double>.", io=True,
                             required=True, dag_default="{warehouse}/s3j/left")
    right: str | None = param(None, "Right stream (two-stream join); omit for a self-join.", io=True)
    output: str | None = param(None, "Pair table left_id, right_id, distance, window_start; <output>_stats, "
                                     "_quarantine, _state, _checkpoint beside it.", io=True, required=True,
                               dag_default="{warehouse}/s3j/pairs")
    threshold: float = param(0.05, "Distance threshold t (match: d < t; d <= t with --inclusive).", gt=0)
    metric: str = param("angular", "angular acos(cos)/pi, euclidean, or cosine 1 - cos.",
                        choices=("angular", "euclidean", "cosine"))
    inclusive: bool = param(False, "Match d <= t instead of d < t.")
    window: str = param("60s", "Window size on ts, e.g. 60s, 5m.", duration=True)
    slide: str | None = param(None, "Sliding windows: a slide <= window (default: tumbling).", duration=True)
    workers: int = param(5, "Workers P (space partitions).", ge=1, le=4096)
    algorithm: str = param("s3j", "s3j, or the clusterjoin baseline.", choices=("s3j", "clusterjoin"))
    virtual_partitions: int = param(500, "ClusterJoin's virtual partitions V.", ge=1, le=100_000)
    seed: int = param(42, "Seed of the random space-partition centroids.", ge=0)
    exact_distances: bool = param(False, "Also compute the distance of inner x inner pairs.", state=False)
    rebalance: str = param("split", "Adaptive workset balancing between micro-batches (Section 8.3): off; balance "
                                    "(Algorithm 1: move worksets); split (also split a workset heavier than the "
                                    "average worker load across workers). Results are the same either way.",
                           choices=("off", "balance", "split"), state=False)
    rebalance_trigger: float = param(0.2, "Rebalance when a worker's load deviates more than this fraction from "
                                          "the average.", gt=0, le=10, state=False)
    migration_cost: float = param(0.0, "Algorithm 1's migration-cost factor: a move's benefit is its DI reduction "
                                       "minus this x the workset's state bytes.", ge=0, state=False)

    def __post_init__(self) -> None:
        s = "s3j"
        check_fields(self, s)
        hi = {"angular": 1.0, "cosine": 2.0}.get(self.metric, math.inf)
        _check(0 < self.threshold <= hi, s, "threshold", self.threshold,
               f"0 < threshold <= {hi} for metric {self.metric}")
        if self.slide is not None:
            _check(parse_duration(self.slide) <= parse_duration(self.window), s, "slide", self.slide,
                   f"a duration <= window ({self.window})")
        _check(self.right is None or self.left is None or not _same_path(self.right, self.left), s, "right",
               self.right, "a stream other than the left one (omit --right for a self-join)")
        for k in ("left", "right"):
            other = getattr(self, k)
            _check(self.output is None or other is None or not _same_path(self.output, other), s, "output",
                   self.output, f"a path other than the {k} stream (it would be overwritten)")


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
        _check((self.window is None) != (self.window_count is None), s, "window", self.window,
               "exactly one of window (a duration) and window_count (tuples); set the other to null")
        if self.slide is not None:
            _check(self.window is not None and parse_duration(self.slide) <= parse_duration(self.window), s,
                   "slide", self.slide, f"a duration <= window ({self.window}), with --window")
        if self.slide_count is not None:
            _check(self.window_count is not None and self.slide_count <= self.window_count, s, "slide_count",
                   self.slide_count, f"tuples <= window_count ({self.window_count}), with --window-count")
        _check(self.window_count is None or self.allowed_lateness_s == 0, s, "allowed_lateness",
               self.allowed_lateness, "0s with --window-count (a count window is arrival order: no row is late); "
                                      "a lateness needs a time --window")
        if self.where is not None:
            from simjoin.core.inequality.query import parse_query

            parse_query(self.where)  # a QueryError (a ValueError) names the offending token
        _check(self.right is None or self.left is None or not _same_path(self.right, self.left), s, "right",
               self.right, "a stream other than the left one (omit --right for a self-join)")
        for k in ("left", "right"):
            other = getattr(self, k)
            _check(self.output is None or other is None or not _same_path(self.output, other), s, "output",
                   self.output, f"a path other than the {k} stream (it would be overwritten)")

    @property
    def query(self) -> Any:
        from simjoin.core.inequality.query import parse_query

        return parse_query(str(self.where))


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
        _check(self.tau0 < self.beta * self.tau1 < self.tau1 <= self.tau2, s, "tau0", self.tau0,
               f"0 < tau0 < tau* = beta x tau1 ({self.beta * self.tau1:g}) < tau1 ({self.tau1}) <= tau2 ({self.tau2})")
        _check(self.min_workers <= self.max_workers, s, "min_workers", self.min_workers,
               f"<= max_workers ({self.max_workers})")
        _check(self.right is None or self.left is None or not _same_path(self.right, self.left), s, "right",
               self.right, "a stream other than the left one (omit --right for a self-join)")
        for k in ("left", "right"):
            other = getattr(self, k)
            _check(self.output is None or other is None or not _same_path(self.output, other), s, "output",
                   self.output, f"a directory other than the {k} stream")

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
            _check(bool(sep) and bool(k.strip()) and 0 <= val <= 1, "s2j", "domain", self.domain,
                   "'column: skew' pairs separated by ';', each skew in [0, 1]")
            out[k.strip()] = val
        return out

    @property
    def task_list(self) -> Any:
        from simjoin.core.s2j.task import parse_tasks

        return parse_tasks(str(self.tasks), domain=self.domain_stats)


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
            _check(self.epsilon <= 1 / (2 * self.workers), s, "epsilon", self.epsilon,
                   f"0 < epsilon <= 1/(2p) = {1 / (2 * self.workers):g} for workers p = {self.workers}")
        _check(self.right is None or self.left is None or not _same_path(self.right, self.left), s, "right",
               self.right, "a stream other than the left one")
        for k in ("left", "right"):
            other = getattr(self, k)
            _check(self.output is None or other is None or not _same_path(self.output, other), s, "output",
                   self.output, f"a path other than the {k} stream (it would be overwritten)")

    @property
    def eps(self) -> float:
        return float(self.epsilon or 1 / (2 * self.workers))


@dataclass(frozen=True)
class GenerateConfig:
    kind: str = param("vectors", "What to generate.", choices=("sets", "vectors", "ineq", "keys", "aqi"),
                      flag="")
    out: str | None = param(None, "Delta table path to write (a path that holds a table only with --overwrite).",
                            io=True, required=True, dag_default="{warehouse}/generated/vectors")
    overwrite: bool = param(False, "Replace the Delta table already at --out (without it, an existing table is "
                                   "refused).")
    rows: int = param(10000, "Number of records.", ge=0, le=1_000_000_000)
    seed: int = param(42, "Random seed (same seed, same table).", ge=0)
    dim: int = param(8, "Vector dimension.", ge=1, le=4096)
    dist: str = param("uniform", "Distribution (vectors: uniform, gaussian, skewed, pareto, clustered; "
                                 "ineq: uniform, pareto, or correlated: b = a + N(0, 2); sets: uniform, dup_frac of "
                                 "the records are copies of scattered earlier records, or near-duplicates, "
                                 "candidate skew: they are copies of 65,536 global cluster seeds, cluster sizes "
                                 "Zipf(0.8) capped at 1.2%, every 1M rows with its own clusters; per 1M rows the "
                                 "largest hold 3,000 records, about 27M pairs at θ 0.6, growing linearly).",
                      choices=("uniform", "gaussian", "skewed", "pareto", "clustered", "correlated",
                               "near-duplicates"))
    rate: float = param(100.0, "Rows per second of ts.", gt=0)
    alpha: float = param(1.2, "Zipf exponent of the key distribution (0: uniform).", ge=0, le=10)
    domain: int = param(1000, "Number of distinct keys K (aqi: stations).", ge=1)
    drift: str = param("none", "Vectors whose distribution moves with ts, one step per drift period: "
                               "wander (80% in a Gaussian cluster, sd 0.08, whose centre moves 0.35 per "
                               "period across [-0.7, 0.7]^dim; the rest from dist) or skew (dist for "
                               "drift_after periods, then 90% in one small blob, sd 0.05).",
                       choices=("none", "wander", "skew"))
    drift_period: str = param("60s", "Length of a drift period on ts, e.g. 60s (use the join's window).",
                              duration=True)
    drift_after: int = param(2, "skew: number of drift periods of dist before it turns skewed.", ge=0)
    lengths: str = param("zipf", "sets: record lengths: zipf (Poisson(12), at least 1), aol (like the AOL query "
                                 "log: 80% of 1-4 tokens, a tail up to 30; tokens Zipf(0.7) over 1M words) or "
                                 "long (100-300 tokens, like ENRON; over 200,000 words).",
                         choices=("zipf", "aol", "long"))
    dup_frac: float = param(0.25, "sets: share of the records that are near-duplicates (copies with about 1/8 of "
                                  "their tokens replaced).", ge=0, le=1)
    universe: int = param(20_000, "sets: number of distinct tokens the Zipf law draws from (aol: at least 1M, "
                                  "long: at least 200,000). Real vocabularies grow with the records (Heaps' law): "
                                  "about rows / 10 keeps a large table realistic.", ge=1, le=1_000_000_000)

    def __post_init__(self) -> None:
        check_fields(self, "generate")
        _check(self.drift == "none" or self.kind == "vectors", "generate", "drift", self.drift,
               f"none for kind {self.kind} (wander and skew only for vectors)")
        _check(self.lengths == "zipf" or self.kind == "sets", "generate", "lengths", self.lengths,
               f"zipf for kind {self.kind} (aol and long only for sets)")
        _check(self.dup_frac == 0.25 or self.kind == "sets", "generate", "dup_frac", self.dup_frac,
               f"0.25 for kind {self.kind} (other values only for sets)")
        _check(self.universe == 20_000 or self.kind == "sets", "generate", "universe", self.universe,
               f"20000 for kind {self.kind} (other values only for sets)")
        if self.kind == "ineq":
            _check(self.dist in ("uniform", "pareto", "correlated"), "generate", "dist", self.dist,
                   "uniform, pareto or correlated for ineq")
        elif self.kind == "sets":
            _check(self.dist in ("uniform", "near-duplicates"), "generate", "dist", self.dist,
                   "uniform or near-duplicates for sets")
        else:
            _check(self.dist != "correlated", "generate", "dist", self.dist, "correlated only for ineq")
            _check(self.dist != "near-duplicates", "generate", "dist", self.dist, "near-duplicates only for sets")


T = TypeVar("T")


def conf_dir() -> Path:
    """The conf/ folder: $SIMJOIN_CONF_DIR, else the project's own conf/."""
    env = os.environ.get("SIMJOIN_CONF_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "conf"


def _coerce(section: str, key: str, raw: Any, tp: Any) -> Any:
    """Convert a YAML/env/CLI value to the field's declared type, or raise ConfigError."""
    if raw is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if isinstance(raw, str) and raw.strip().lower() in ("", "null", "none"):
            return None
        tp = args[0]
    try:
        if tp is bool:
            if isinstance(raw, bool):
                return raw
            if str(raw).strip().lower() in ("1", "true", "yes", "on"):
                return True
            if str(raw).strip().lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if tp is int:
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError
            return int(raw)
        if tp is float:
            if isinstance(raw, bool):
                raise ValueError
            return float(raw)
        if isinstance(raw, (list, tuple)):  # a YAML list of texts, e.g. S2J's tasks
            return "; ".join(str(x) for x in raw)
        if isinstance(raw, dict):  # a YAML mapping name -> text
            return "; ".join(f"{k}: {v}" for k, v in raw.items())
        return str(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{section}.{key}", raw, f"a value of type {getattr(tp, '__name__', tp)}") from None


def load_config(
    cls: type[T],
    section: str,
    overrides: dict[str, Any] | None = None,
    path: str | Path | None = None,
) -> T:
    """Build ``cls`` from defaults < conf/<section>.yaml < env < overrides (None values are ignored)."""
    hints = get_type_hints(cls)
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    yaml_path = Path(path) if path else conf_dir() / f"{section}.yaml"
    if yaml_path.exists():
        doc = yaml.safe_load(yaml_path.read_text()) or {}
        body = doc.get(section, doc) if isinstance(doc, dict) else {}
        for k, v in (body or {}).items():
            if k not in names:
                raise ConfigError(f"{section}.{k}", v, f"one of the keys {', '.join(names)} ({yaml_path})")
            values[k] = _coerce(section, k, v, hints[k])
    for k in names:
        env = ENV_ALIASES.get((section, k)) or f"SIMJOIN_{section.upper()}_{k.upper()}"
        if env in os.environ:
            values[k] = _coerce(section, k, os.environ[env], hints[k])
    for k, v in (overrides or {}).items():
        if k not in names:
            raise ConfigError(f"{section}.{k}", v, f"one of the keys {', '.join(names)}")
        if v is not None:
            values[k] = _coerce(section, k, v, hints[k])
    return cls(**values)


def with_overrides(cfg: T, **kw: Any) -> T:
    """A copy of a config with some fields replaced (validation runs again)."""
    return replace(cfg, **{k: v for k, v in kw.items() if v is not None})  # type: ignore[type-var]
