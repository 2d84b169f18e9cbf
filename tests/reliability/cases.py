"""One case per pipeline: tiny, valid, deterministic inputs and the params of a run over them.

``CASES[name].make_inputs(spark, folder) -> params`` writes small Delta inputs under ``folder`` and
returns the run's full params (inputs, an output path under ``folder``, small thresholds and
windows). Stream cases also have ``more_inputs(spark, folder)``, which appends a second batch of
rows to the same inputs (the next micro-batch). The reliability suites (faults, bad input) are
driven from ``simjoin.pipeline.registry.specs()``: a pipeline without an entry here fails them,
so adding a pipeline is adding one line (and its ``make_inputs``) here.

``reader_view(spark, run)`` is what a reader of a run's tables sees: every Delta table of
``run.table_paths()`` but the engine's work and checkpoint folders, as sorted row tuples (a
multiset: duplicates stay), without the columns that differ between two identical runs (wall-clock
seconds, latencies, timestamps of when something happened, the random checkpoint id).
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Case", "CASES", "T0", "reader_view", "reader_tables", "versions", "volatile", "normalize"]

#: Every stream row is dated from here on (in the past: never quarantined as future).
T0 = dt.datetime(2025, 3, 1, tzinfo=dt.UTC)

Params = dict[str, Any]


@dataclass(frozen=True)
class Case:
    """How to run one pipeline on tiny inputs."""

    make_inputs: Callable[[Any, str], Params]
    #: Stream pipelines: append the next micro-batch's rows to the inputs ``make_inputs`` wrote.
    more_inputs: Callable[[Any, str], None] | None = None
    #: Columns (``table key -> names``) beyond :func:`volatile` that differ between identical runs.
    volatile: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: N of ``<pipeline>.<stage>.write@N`` per stage (default: 1, a stage's first Delta commit
    #: done and the rest not; a stage with one commit fails right after it).
    write_at: dict[str, int] = field(default_factory=dict)


def _save(spark: Any, rows: list[tuple[Any, ...]], schema: str, path: str) -> None:
    spark.createDataFrame(rows, schema).write.format("delta").mode("append").save(path)


def _ts(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(microseconds=round(seconds * 1e6))


def _half(n: int, second: bool) -> range:
    return range(n // 2, n) if second else range(n // 2)


# ------------------------------------------------------------------ ssj (batch)

_WORDS = [f"w{i}" for i in range(40)]


def _ssj_rows() -> list[tuple[int, str]]:
    rng = np.random.default_rng(11)
    rows: list[tuple[int, str]] = []
    for i in range(60):
        if i % 3 and rows:  # a near-duplicate of an earlier record
            base = rows[int(rng.integers(0, len(rows)))][1].split()
            k = int(rng.integers(0, len(base)))
            toks = [*base[:k], _WORDS[int(rng.integers(0, 40))], *base[k + 1:]]
        else:
            toks = [_WORDS[int(j)] for j in rng.choice(40, int(rng.integers(3, 8)), replace=False)]
        rows.append((i * 3 + 1, " ".join(toks)))
    return rows


def ssj_inputs(spark: Any, folder: str) -> Params:
    src = os.path.join(folder, "sets")
    _save(spark, _ssj_rows(), "id long, text string", src)
    return {"input": src, "output": os.path.join(folder, "pairs"), "threshold": 0.6, "workers": 2, "mod": 2}


# ------------------------------------------------------------------ s3j

_S3J_N = 120


def _s3j_rows(second: bool) -> list[tuple[Any, ...]]:
    rng = np.random.default_rng(5)
    X = rng.uniform(0, 1, (_S3J_N, 2))
    secs = np.sort(rng.uniform(0, 30, _S3J_N))
    return [(i, _ts(float(secs[i])), X[i].tolist()) for i in _half(_S3J_N, second)]


def s3j_inputs(spark: Any, folder: str) -> Params:
    src = os.path.join(folder, "vectors")
    _save(spark, _s3j_rows(False), "id long, ts timestamp, vector array<double>", src)
    return {"left": src, "output": os.path.join(folder, "pairs"), "threshold": 0.12, "metric": "euclidean",
            "window": "10s", "workers": 2}


def s3j_more(spark: Any, folder: str) -> None:
    _save(spark, _s3j_rows(True), "id long, ts timestamp, vector array<double>", os.path.join(folder, "vectors"))


# ------------------------------------------------------------------ ineq

_INEQ_N = 80


def _ineq_rows(seed: int, base: int, second: bool) -> list[tuple[Any, ...]]:
    rng = np.random.default_rng(seed)
    secs = np.sort(rng.integers(0, 60, _INEQ_N))
    a, b = rng.integers(0, 30, _INEQ_N), rng.integers(0, 20, _INEQ_N)
    return [(i * 3 + base, _ts(float(secs[i])), float(a[i]), float(b[i])) for i in _half(_INEQ_N, second)]


def _ineq_write(spark: Any, folder: str, second: bool) -> tuple[str, str]:
    left, right = os.path.join(folder, "left"), os.path.join(folder, "right")
    _save(spark, _ineq_rows(7, 1, second), "id long, ts timestamp, a double, b double", left)
    _save(spark, _ineq_rows(8, 2, second), "id long, ts timestamp, a double, b double", right)
    return left, right


def ineq_inputs(spark: Any, folder: str) -> Params:
    left, right = _ineq_write(spark, folder, False)
    return {"left": left, "right": right, "output": os.path.join(folder, "pairs"),
            "where": "l.a < r.a AND l.b > r.b", "window": "15s", "workers": 2}


def ineq_more(spark: Any, folder: str) -> None:
    _ineq_write(spark, folder, True)


# ------------------------------------------------------------------ hypercube

_HC_N = 120


def _hc_rows(seed: int, base: int, second: bool) -> list[tuple[Any, ...]]:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, 21) ** 1.5
    k = rng.choice(20, _HC_N, p=p / p.sum()).astype(np.int64) * 7 + 13
    secs = np.sort(rng.uniform(0, 60, _HC_N))
    return [(i * 2 + base, _ts(float(secs[i])), int(k[i]), "x") for i in _half(_HC_N, second)]


def _hc_write(spark: Any, folder: str, second: bool) -> tuple[str, str]:
    left, right = os.path.join(folder, "left"), os.path.join(folder, "right")
    _save(spark, _hc_rows(11, 0, second), "id long, ts timestamp, k long, payload string", left)
    _save(spark, _hc_rows(12, 1, second), "id long, ts timestamp, k long, payload string", right)
    return left, right


def hypercube_inputs(spark: Any, folder: str) -> Params:
    left, right = _hc_write(spark, folder, False)
    return {"left": left, "right": right, "output": os.path.join(folder, "pairs"), "key": "k", "workers": 4,
            "window": "20s"}


def hypercube_more(spark: Any, folder: str) -> None:
    _hc_write(spark, folder, True)


# ------------------------------------------------------------------ s2j

_S2J_N = 80


def _s2j_rows(seed: int, base: int, second: bool) -> list[tuple[Any, ...]]:
    rng = np.random.default_rng(seed)
    minutes = np.sort(rng.integers(0, 90, _S2J_N))
    pm25, pm10 = rng.uniform(0, 150, _S2J_N).round(1), rng.uniform(0, 250, _S2J_N).round(1)
    station = rng.integers(0, 6, _S2J_N)
    return [(i * 4 + base, _ts(60.0 * float(minutes[i])), float(pm25[i]), float(pm10[i]), int(station[i]))
            for i in _half(_S2J_N, second)]


def _s2j_write(spark: Any, folder: str, second: bool) -> tuple[str, str]:
    left, right = os.path.join(folder, "left"), os.path.join(folder, "right")
    schema = "id long, ts timestamp, pm25 double, pm10 double, station long"
    _save(spark, _s2j_rows(91, 1, second), schema, left)
    _save(spark, _s2j_rows(92, 2, second), schema, right)
    return left, right


def s2j_inputs(spark: Any, folder: str) -> Params:
    left, right = _s2j_write(spark, folder, False)
    return {"left": left, "right": right, "output": os.path.join(folder, "out"), "window": "25m", "workers": 2,
            "tasks": "gap: abs(l.pm25 - r.pm25) > 60; eq: l.station = r.station AND l.pm10 > r.pm10"}


def s2j_more(spark: Any, folder: str) -> None:
    _s2j_write(spark, folder, True)


# ------------------------------------------------------------------ generate (tool)


def generate_inputs(spark: Any, folder: str) -> Params:
    return {"kind": "sets", "out": os.path.join(folder, "sets"), "rows": 200, "seed": 3}


CASES: dict[str, Case] = {
    "ssj": Case(ssj_inputs, write_at={"tokenize": 2}),
    "s3j": Case(s3j_inputs, s3j_more),
    "ineq": Case(ineq_inputs, ineq_more),
    "hypercube": Case(hypercube_inputs, hypercube_more),
    "s2j": Case(s2j_inputs, s2j_more),
    "generate": Case(generate_inputs),
}


# ------------------------------------------------------------------ what a reader sees

#: Folders of a stream run that hold no reader-facing table (the engine's scratch and checkpoint)
#: or that are folders of tables listed by their own key.
_NOT_TABLES = ("work", "checkpoint", "state")

#: Columns that differ between two identical runs, whatever the table (``executor_reason`` names the
#: memory available at that moment).
_VOLATILE = re.compile(r"(^|_)(seconds|secs|latency|elapsed|wall|duration)(_|$)|_s$|_ms$|(^|_)p(50|99)(_|$)"
                       r"|^(pinned_at|published_at|created|created_at|updated_at|started|finished|checkpoint_id"
                       r"|commit_ts|executor_reason)$")


def volatile(column: str) -> bool:
    return bool(_VOLATILE.search(column))


def reader_tables(spark: Any, run: Any) -> dict[str, str]:
    """``{table key: path}`` of every Delta table of ``run`` a reader may look at."""
    from simjoin.spark import delta

    return {k: p for k, p in sorted(run.table_paths().items())
            if k not in _NOT_TABLES and delta.table_exists(spark, p)}


def versions(run: Any) -> dict[str, int | None]:
    """``{table key: latest Delta version or None}`` of every table of ``run`` (from the
    ``_delta_log`` listing: no Spark job); :func:`reader_view` ``at=`` these reads them back."""
    out: dict[str, int | None] = {}
    for key, path in sorted(run.table_paths().items()):
        if key in _NOT_TABLES:
            continue
        log = os.path.join(str(path).removeprefix("file://"), "_delta_log")
        names = os.listdir(log) if os.path.isdir(log) else []
        vs = [int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()]
        out[key] = max(vs) if vs else None
    return out


def normalize(v: Any, masks: dict[str, str] | None = None) -> Any:
    """A cell as a comparable value: floats rounded; in text, each ``masks`` key (the random
    checkpoint id, the run's folder) replaced by its value."""
    if isinstance(v, float):
        return None if math.isnan(v) else round(v, 9)
    if isinstance(v, str):
        for k, m in (masks or {}).items():
            v = v.replace(k, m)
        return v
    if isinstance(v, (list, tuple)):
        return tuple(normalize(x, masks) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, normalize(x, masks)) for k, x in v.items()))
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    return v


def _checkpoint_id(run: Any) -> str | None:
    import json

    t = run.tables
    path = getattr(t, "checkpoint", None)
    f = os.path.join(str(path), "simjoin.json") if path else ""
    if f and os.path.exists(f):
        return str(json.loads(open(f).read())["id"])
    return None


def reader_view(spark: Any, run: Any, case: Case | None = None, skip: tuple[str, ...] = (),
                at: dict[str, int | None] | None = None) -> dict[str, tuple[tuple[str, ...], list[tuple[Any, ...]]]]:
    """``{table key: (columns, sorted rows)}``: what a reader of ``run``'s tables sees, without
    the columns that legitimately differ between identical runs; ``at``: as of these versions
    (:func:`versions`; a table whose version is None did not exist then)."""
    from simjoin.spark import delta

    ckpt = _checkpoint_id(run)
    out_path = getattr(run.cfg, "output", None) or getattr(run.cfg, "out", None)
    masks = {os.path.dirname(os.path.abspath(str(out_path)).rstrip("/")): "<folder>"} if out_path else {}
    if ckpt:
        masks[ckpt] = "<ckpt>"
    extra = case.volatile if case is not None else {}
    out: dict[str, tuple[tuple[str, ...], list[tuple[Any, ...]]]] = {}
    for key, path in reader_tables(spark, run).items():
        if key in skip or (at is not None and at.get(key) is None):
            continue
        df = delta.read_table(spark, path, version=None if at is None else at[key])
        cols = tuple(c for c in df.columns if not volatile(c) and c not in extra.get(key, ()))
        rows = [tuple(normalize(r[c], masks) for c in cols) for r in df.select(*cols).collect()]
        out[key] = (cols, sorted(rows, key=repr))
    return out
