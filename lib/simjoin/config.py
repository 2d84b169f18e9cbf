"""Typed configuration: ``conf/*.yaml`` -> frozen dataclasses, validated.

Precedence, lowest to highest: dataclass defaults < YAML (``conf/<section>.yaml``)
< environment (``SIMJOIN_<SECTION>_<KEY>``, plus the short aliases in ``ENV_ALIASES``)
< explicit overrides (CLI flags, DAG params).

A wrong value raises :class:`ConfigError` naming the key, the value and what is allowed.
"""

from __future__ import annotations

import math
import os
import types
import typing
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

import yaml

__all__ = [
    "ConfigError",
    "SparkConfig",
    "SSJConfig",
    "S3JConfig",
    "GenerateConfig",
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


@dataclass(frozen=True)
class SSJConfig:
    threshold: float = 0.8
    similarity: str = "jaccard"
    tokenizer: str = "word"
    id_col: str = "id"
    text_col: str = "text"
    workers: int | None = None
    mod: int | None = None
    total_units: int = 4
    memory_gb: float = 4.0

    def __post_init__(self) -> None:
        s = "ssj"
        _check(
            isinstance(self.threshold, (int, float)) and not math.isnan(self.threshold)
            and 0 < self.threshold <= 1,
            s, "threshold", self.threshold, "0 < threshold <= 1",
        )
        _check(self.similarity in ("jaccard", "cosine", "dice"), s, "similarity", self.similarity,
               "jaccard, cosine or dice")
        _check(_tokenizer_ok(self.tokenizer), s, "tokenizer", self.tokenizer, "word or qgram:N with N >= 1")
        _check(bool(self.id_col), s, "id_col", self.id_col, "a column name")
        _check(bool(self.text_col), s, "text_col", self.text_col, "a column name")
        _check(self.workers is None or self.workers >= 1, s, "workers", self.workers, "an integer >= 1")
        _check(self.mod is None or self.mod >= 1, s, "mod", self.mod, "an integer >= 1")
        _check(self.total_units >= 1, s, "total_units", self.total_units, "an integer >= 1")
        _check(self.memory_gb > 0, s, "memory_gb", self.memory_gb, "a number > 0")

    @property
    def qgram(self) -> int | None:
        return int(self.tokenizer.split(":", 1)[1]) if self.tokenizer.startswith("qgram:") else None


def _tokenizer_ok(tok: str) -> bool:
    if tok == "word":
        return True
    if tok.startswith("qgram:"):
        q = tok.split(":", 1)[1]
        return q.isdigit() and int(q) >= 1
    return False


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
class S3JConfig:
    threshold: float = 0.05
    metric: str = "angular"
    inclusive: bool = False
    window: str = "60s"
    slide: str | None = None
    workers: int = 5
    algorithm: str = "s3j"
    virtual_partitions: int = 500
    seed: int = 42
    exact_distances: bool = False

    def __post_init__(self) -> None:
        s = "s3j"
        _check(self.metric in ("angular", "euclidean", "cosine"), s, "metric", self.metric,
               "angular, euclidean or cosine")
        hi = {"angular": 1.0, "cosine": 2.0}.get(self.metric, math.inf)
        _check(isinstance(self.threshold, (int, float)) and 0 < self.threshold <= hi,
               s, "threshold", self.threshold, f"0 < threshold <= {hi} for metric {self.metric}")
        for key in ("window", "slide"):
            v = getattr(self, key)
            if v is not None:
                try:
                    ok = parse_duration(v) > 0
                except ValueError:
                    ok = False
                _check(ok, s, key, v, "a positive duration such as 60s, 5m, 1h")
        if self.slide is not None:
            _check(parse_duration(self.slide) <= parse_duration(self.window), s, "slide", self.slide,
                   f"a duration <= window ({self.window})")
        _check(self.workers >= 1, s, "workers", self.workers, "an integer >= 1")
        _check(self.algorithm in ("s3j", "clusterjoin"), s, "algorithm", self.algorithm, "s3j or clusterjoin")
        _check(self.virtual_partitions >= 1, s, "virtual_partitions", self.virtual_partitions, "an integer >= 1")


@dataclass(frozen=True)
class GenerateConfig:
    rows: int = 10000
    seed: int = 42
    dim: int = 8
    dist: str = "uniform"
    rate: float = 100.0
    alpha: float = 1.2
    domain: int = 1000

    def __post_init__(self) -> None:
        s = "generate"
        _check(self.rows >= 0, s, "rows", self.rows, "an integer >= 0")
        _check(self.dim >= 1, s, "dim", self.dim, "an integer >= 1")
        _check(self.rate > 0, s, "rate", self.rate, "a number > 0 (rows per second)")
        _check(self.alpha > 0, s, "alpha", self.alpha, "a number > 0")
        _check(self.domain >= 1, s, "domain", self.domain, "an integer >= 1")


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
