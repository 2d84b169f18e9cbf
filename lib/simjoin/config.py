"""Typed configuration: ``conf/*.yaml`` -> frozen dataclasses, validated.

Precedence, lowest to highest: dataclass defaults < YAML (``conf/<section>.yaml``)
< environment (``SIMJOIN_<SECTION>_<KEY>``, plus the short aliases in ``ENV_ALIASES``)
< explicit overrides (CLI flags, DAG params).

A wrong value raises :class:`ConfigError` naming the key, the value and what is allowed.

This module holds the platform's part: :func:`param`, the validation (:func:`check_fields`,
:func:`check`), :class:`SparkConfig`, :class:`StreamConfig` and the loader. Each pipeline's config
dataclass lives in its own package, ``jobs/<name>/config.py`` (``jobs.s3j.config.S3JConfig``...),
and its spec names it; imports go one way, ``jobs -> simjoin.config``.
"""

from __future__ import annotations

import math
import os
import re
import types
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

import yaml

__all__ = [
    "real_path",
    "temp_env",
    "ConfigError",
    "check",
    "check_stream_paths",
    "SparkConfig",
    "StreamConfig",
    "param",
    "check_fields",
    "same_path",
    "parse_duration",
    "fingerprint",
    "load_config",
    "conf_dir",
]

ENV_ALIASES = {
    ("spark", "master"): "SIMJOIN_SPARK_MASTER",
    ("spark", "warehouse"): "SIMJOIN_WAREHOUSE",
}


class ConfigError(ValueError):
    """A configuration value is not allowed: names key, value and what is allowed.

    :func:`load_config` records where the value came from (``origin``: ``"flag"`` - an override,
    which the CLI's flags and a DAG's params are -, ``"env"``, ``"yaml"`` or ``"default"``, and
    ``source``: the variable or the file), so the message names what the user set: the variable
    or the file here, the flag they typed in :meth:`for_cli`."""

    def __init__(self, key: str, value: Any, allowed: str) -> None:
        super().__init__(f"invalid config {key}={value!r}: allowed {allowed}")
        self.key, self.value, self.allowed = key, value, allowed
        self.field = key.partition(".")[2] if "." in key else None
        self.origin: str | None = None
        self.source: str | None = None

    def located(self, origin: str, source: str | None) -> ConfigError:
        """This error, told where its value came from (its message then names the env variable or
        the YAML file; an override or a default keeps the config key)."""
        self.origin, self.source = origin, source
        if origin == "env":
            self.args = (f"invalid {source}={self.value!r}: allowed {self.allowed} (config {self.key})",)
        elif origin == "yaml":
            self.args = (f"invalid config {self.key}={self.value!r} in {source}: allowed {self.allowed}",)
        return self

    def for_cli(self, flags: dict[str, str]) -> str:
        """The message as the command line's user needs it: the flag they typed with its value, or
        the missing flag, and field names in what is allowed written as flags (``flags``: field
        -> flag). A value from the environment or a YAML file keeps naming its variable or file."""
        allowed = flagged(self.allowed, flags)
        flag = flags.get(self.field or "")
        if flag is not None and (self.value is None or self.value == ""):  # a YAML null: not set either
            return f"missing {flag}: allowed {allowed}"
        if self.origin in ("env", "yaml"):  # the user wrote the key, not a flag
            return str(self)
        if flag is None:
            return str(self) if allowed == self.allowed else str(self).replace(self.allowed, allowed)
        shown = self.value if isinstance(self.value, (int, float)) else repr(self.value)
        default = " (its default)" if self.origin == "default" else ""
        return f"invalid {flag} {shown}{default}: allowed {allowed}"


def flagged(text: str, flags: dict[str, str]) -> str:
    """``text`` with the field names it mentions written as flags: a name with ``_`` wherever it
    stands as a word, another only before `` (`` (``window (a duration)``), so that prose such as
    "a time window" stays."""
    for name in sorted(flags, key=len, reverse=True):
        pattern = rf"(?<![\w-])\b{re.escape(name)}\b" + ("" if "_" in name else r"(?= \()")
        text = re.sub(pattern, flags[name], text)
    return text


def check(ok: bool, section: str, key: str, value: Any, allowed: str) -> None:
    """Raise :class:`ConfigError` for ``<section>.<key>`` unless ``ok``: a config's cross-field rules."""
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
        check(
            self.master.startswith(("local", "spark://", "yarn", "k8s://")),
            s, "master", self.master, "local[*], local[N], spark://host:port, yarn or k8s://...",
        )
        check(bool(self.warehouse), s, "warehouse", self.warehouse, "a non-empty path")
        check(self.shuffle_partitions >= 1, s, "shuffle_partitions", self.shuffle_partitions, "an integer >= 1")
        check(
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
    by_choice: dict[str, dict[str, Any]] | None = None,
) -> Any:
    """A config field, declared once. From its metadata come the validation below, the DAG's
    ``Param`` (type, enum, bounds, description) and the CLI option (``simjoin.pipeline``).

    ``io``: a table path (not in YAML defaults or the state fingerprint); ``required``: the CLI
    and the DAG must give it; ``dag_default``: its DAG default under the warehouse, e.g.
    ``"{warehouse}/s3j/left"``; ``state=False``: not part of the persisted-state fingerprint;
    ``duration``: a positive duration such as ``60s``; ``pattern``: a regular expression the
    whole value must match, described by ``allowed``; ``multiple``: the CLI flag repeats, its
    values joined by ``; `` (a YAML list works the same); ``zone``: an IANA time zone name.
    ``by_choice``: in a config whose selector field (``flag=""``) picks a sub-command, the
    selector values this field applies to, each with its own ``help`` or ``choices`` for that
    sub-command's help (on the selector itself: each sub-command's ``help``); a sub-command lists
    only the fields that apply to it.
    """
    meta = {"help": help, "choices": choices, "gt": gt, "ge": ge, "le": le, "lt": lt, "duration": duration,
            "pattern": pattern, "allowed": allowed, "zone": zone,
            "flag": flag, "io": io, "required": required, "dag_default": dag_default, "state": state and not io,
            "multiple": multiple, "by_choice": by_choice}
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
            check(optional, section, f.name, v, f"a value of type {tp.__name__}")
            continue
        if tp in (int, float):
            ok_type = isinstance(v, (int, float)) and not isinstance(v, bool) and (tp is float or float(v).is_integer())
            check(ok_type, section, f.name, v, f"a value of type {tp.__name__}")
            if any(m[k] is not None for k in ("gt", "ge", "le", "lt")):
                ok = not math.isnan(v) and (
                    (m["gt"] is None or v > m["gt"]) and (m["ge"] is None or v >= m["ge"])
                    and (m["le"] is None or v <= m["le"]) and (m["lt"] is None or v < m["lt"]))
                check(ok, section, f.name, v, _bounds_text(f.name, m, tp))
        if m["choices"] is not None:
            check(v in m["choices"], section, f.name, v, _choices_text(m["choices"]))
        if m["duration"]:
            zero = m["ge"] == 0  # a duration that may be 0s (e.g. allowed lateness)
            try:
                ok = parse_duration(v) >= 0 if zero else parse_duration(v) > 0
            except ValueError:
                ok = False
            check(ok, section, f.name, v, ("a duration >= 0 such as 0s, 30s, 5m" if zero
                                           else "a positive duration such as 60s, 5m, 1h"))
        if m.get("zone"):
            check(_is_zone(v), section, f.name, v, "an IANA time zone name such as UTC or Europe/Berlin")
        if m["pattern"] is not None:
            check(isinstance(v, str) and re.fullmatch(m["pattern"], v) is not None, section, f.name, v,
                  m["allowed"] or f"a value matching {m['pattern']}")
        if m["io"] and v is not None:
            check(isinstance(v, str) and bool(v.strip()), section, f.name, v, "a Delta table path")


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


def _fingerprint_fields(fp: str) -> dict[str, str]:
    """A :func:`fingerprint` as field -> value (its ``extra``, the part without a name, under "")."""
    items: list[str] = []
    for part in fp.split("|"):
        last = items[-1] if items else ""
        if last.count("'") % 2 or last.count('"') % 2 or last.count("(") > last.count(")") \
                or last.count("[") > last.count("]"):
            items[-1] += "|" + part  # a value holding "|" (inside its quotes or brackets)
        else:
            items.append(part)
    return {(k if v else ""): (v if v else k) for k, _, v in (i.partition("=") for i in items)}


_INPUTS = {"self": "a self-join (--left only)", "rs": "two streams (--left and --right)"}


def fingerprint_changes(was: str, now: str) -> str:
    """What differs between two :func:`fingerprint` strings, as the flags a user types:
    ``--threshold 0.05 -> 0.07, --metric 'angular' -> 'cosine'`` (the state's value first)."""
    a, b = _fingerprint_fields(was), _fingerprint_fields(now)
    out = []
    for k in [*a, *(k for k in b if k not in a)]:
        if a.get(k) != b.get(k):
            if k == "":  # a stream's extra: a self-join or two streams
                out.append(" -> ".join(_INPUTS.get(x, x) for x in (a.get(k, "(none)"), b.get(k, "(none)"))))
            else:
                out.append(f"--{k.replace('_', '-')} {a.get(k, '(none)')} -> {b.get(k, '(none)')}")
    return ", ".join(out) or "the same settings in another form"


def same_path(a: str, b: str) -> bool:
    """Whether two table paths name one table (local paths normalised, URIs compared as written)."""
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
    (docs/architecture.md, "Streams: the operator contract")."""

    ts_unit: str | None = param(None, "Unit of a numeric ts column (a timestamp column needs none).",
                                choices=("s", "ms", "us"), state=True)
    max_future: str = param("1h", "Records dated more than this past the current time are quarantined as "
                                  "future.", duration=True, state=False)
    allowed_lateness: str = param("0s", "A row up to this far behind the latest ts its stream committed is still "
                                        "joined exactly (state is kept that much longer); rows further behind are "
                                        "quarantined as late.", duration=True, ge=0, state=True)
    ts_zone: str = param("UTC", "Time zone of a TIMESTAMP_NTZ ts column or of ts strings without a zone "
                                "(an IANA name such as Europe/Berlin).", zone=True, state=True)
    idle_timeout: str = param("0s", "Two streams: once one stream received nothing for this long (wall clock), "
                                    "the other's state expires as if the idle one had caught up with it; its rows "
                                    "that arrive later behind that point are quarantined as late. 0s: never.",
                              duration=True, ge=0, state=False)
    max_records_per_unit: int = param(1_000_000, "A unit stages at most this many input records (whole commits of "
                                                 "local Delta inputs, a single larger commit alone): a backlog becomes "
                                                 "several bounded units, one after another.", ge=1, state=False)
    executor: str = param("auto", "Where a unit's stages run: auto (in process when its tables are local and it "
                                  "has at most SIMJOIN_LOCAL_UNIT_ROWS records, else Spark), in_process (no JVM: "
                                  "Arrow, numpy and deltalake in this process; local tables only) or spark.",
                          choices=("auto", "in_process", "spark"), state=False)

    @property
    def max_future_s(self) -> float:
        return parse_duration(self.max_future)

    @property
    def allowed_lateness_s(self) -> float:
        return parse_duration(self.allowed_lateness)

    @property
    def idle_timeout_s(self) -> float:
        return parse_duration(self.idle_timeout)


def check_stream_paths(cfg: Any, section: str,
                       right_allowed: str = "a stream other than the left one (omit --right for a self-join)",
                       output_allowed: str = "a path other than the {k} stream (it would be overwritten)") -> None:
    """A stream config's ``left``/``right`` inputs differ, and its ``output`` is neither of them
    (``{k}`` in ``output_allowed`` names the input)."""
    check(cfg.right is None or cfg.left is None or not same_path(cfg.right, cfg.left), section, "right",
          cfg.right, right_allowed)
    for k in ("left", "right"):
        other = getattr(cfg, k)
        check(cfg.output is None or other is None or not same_path(cfg.output, other), section, "output",
              cfg.output, output_allowed.format(k=k))
    if getattr(cfg, "executor", "auto") == "in_process":
        for k in ("left", "right", "output"):
            v = getattr(cfg, k, None)
            local = v is None or ("%" not in str(v) and ("://" not in str(v) or str(v).startswith("file:")))
            check(local, section, "executor", "in_process",
                  f"auto or spark: --{k} {v} is not a local path, and the in-process executor reads and writes "
                  "local Delta tables only")


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
    origin: dict[str, tuple[str, str | None]] = {}  # where each value came from (ConfigError.located)
    yaml_path = Path(path) if path else conf_dir() / f"{section}.yaml"
    try:
        if yaml_path.exists():
            doc = yaml.safe_load(yaml_path.read_text()) or {}
            body = doc.get(section, doc) if isinstance(doc, dict) else {}
            for k, v in (body or {}).items():
                origin[k] = ("yaml", str(yaml_path))
                if k not in names:
                    raise ConfigError(f"{section}.{k}", v, f"one of the keys {', '.join(names)}")
                values[k] = _coerce(section, k, v, hints[k])
        for k in names:
            env = ENV_ALIASES.get((section, k)) or f"SIMJOIN_{section.upper()}_{k.upper()}"
            if env in os.environ:
                origin[k] = ("env", env)
                values[k] = _coerce(section, k, os.environ[env], hints[k])
        for k, v in (overrides or {}).items():
            if k not in names:
                raise ConfigError(f"{section}.{k}", v, f"one of the keys {', '.join(names)}")
            if v is not None:
                origin[k] = ("flag", None)
                values[k] = _coerce(section, k, v, hints[k])
        for f in fields(cls):  # type: ignore[arg-type]
            if f.metadata.get("io") and isinstance(values.get(f.name), str) and values[f.name]:
                values[f.name] = real_path(values[f.name])
        return cls(**values)
    except ConfigError as e:
        if e.origin is None and e.field is not None:
            e.located(*origin.get(e.field, ("default", None)))
        raise


@contextmanager
def temp_env(name: str, value: str) -> Iterator[None]:
    """The environment variable ``name`` set to ``value`` for the block, then as it was (unset
    if it was unset)."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def real_path(path: str) -> str:
    """A table path as the runtime keeps it: a local path absolute and normalised (``~`` and
    ``..`` resolved; a ``file:`` URI becomes its path), so that what a run records names the same
    table whichever folder a later run, ``simjoin maintain`` or the Airflow plugin starts in.
    Symlinks stay as typed, so an error names the path the user gave (and says what it resolves
    to); where two paths must be one table (the lock, the warehouse check, ownership) they are
    compared resolved. Other URIs (``s3://``, ...) stay as written."""
    import os.path

    scheme, sep, rest = path.partition("://")
    if sep and scheme != "file":
        return path
    local = rest if sep else path
    return os.path.normpath(os.path.abspath(os.path.expanduser(local)))


def with_overrides(cfg: T, **kw: Any) -> T:
    """A copy of a config with some fields replaced (validation runs again)."""
    return replace(cfg, **{k: v for k, v in kw.items() if v is not None})  # type: ignore[type-var]
