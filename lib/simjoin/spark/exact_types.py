"""The staged type of each predicate column of ineq and S2J, chosen so that every predicate compares exactly
(``simjoin.core.exact``; docs/operations.md, "Exact predicates on every numeric type").

* an integer column (byte, short, int, bigint, or ``decimal(p, 0)`` with ``p <= 18``) in every input that has
  it is staged as ``long`` and compared as int64, exactly;
* a float or double column is staged as ``double``;
* an integer column compared with a float column (directly, or through a chain of predicates) is staged as
  ``double``: exact below 2^53 in magnitude, so a row whose value is 2^53 or more there is quarantined
  (:func:`wide_rules`) instead of being rounded;
* a decimal with a fraction (``decimal(p, s)``, ``s > 0``) or wider than 18 digits cannot be compared exactly
  in either type and is refused before anything is staged, with one line naming the column.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from simjoin.core.exact import ExactError, ExactTypes

__all__ = ["ExactTypes", "exact_types"]

_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_FLOAT = (T.FloatType, T.DoubleType)


def _schema(spark: SparkSession | None, path: str, k: int = 0) -> Any:
    from simjoin.io import delta_source
    from simjoin.spark import delta
    from simjoin.spark.engine import local_path
    from simjoin.spark.engine.rules import missing_stream

    loc = local_path(path)
    if loc is not None:
        if delta_source.latest_version(loc) < 0:  # no table: refused in one line, before any JVM starts
            raise missing_stream(path, k)
        try:
            return delta.spark_schema(loc, delta_source.latest_version(loc))
        except Exception:  # not a plain local table: Spark reads it
            pass
    if spark is None:
        return None
    try:
        return spark.read.format("delta").load(path).schema
    except Exception:  # a missing table is refused by the engine with its own line
        return None


def _kind(c: str, t: T.DataType) -> str | None:
    if isinstance(t, _INTEGRAL):
        return "int"
    if isinstance(t, _FLOAT):
        return "float"
    if isinstance(t, T.DecimalType):
        if t.scale == 0 and t.precision <= 18:
            return "int"
        raise ExactError(
            f"column {c} is {t.simpleString()}: a decimal with a fraction or more than 18 digits cannot be "
            "compared exactly; allowed: integer columns, decimal(p,0) with p <= 18, float or double columns "
            "(cast it, e.g. to a bigint count of its smallest unit)")
    return None  # not numeric: the engine's schema check names it


def exact_types(spark: SparkSession | None, sources: Sequence[str], columns: Sequence[Iterable[str]],
                compared: Iterable[tuple[str, str]]) -> ExactTypes:
    """The staged types of the predicate columns: ``sources[k]`` holds ``columns[k]``; ``compared`` are the
    (l column, r column) pairs that some predicate compares. An unreadable source counts as double."""
    kinds: dict[str, set[str]] = {}
    where: dict[str, list[int]] = {}
    for k, (src, cols) in enumerate(zip(sources, columns, strict=True)):
        schema = _schema(spark, src, k)
        names = {f.name: f.dataType for f in schema.fields} if schema is not None else {}
        for c in cols:
            kind = _kind(c, names[c]) if c in names else None
            kinds.setdefault(c, set()).add(kind or "float")
            if kind == "int":
                where.setdefault(c, []).append(k)
    as_double = {c for c, ks in kinds.items() if "float" in ks}
    pairs = list(compared)
    changed = True
    while changed:  # a column compared with a double column is a double too (the closure over predicates)
        changed = False
        for a, b in pairs:
            if (a in as_double) != (b in as_double):
                as_double |= {a, b}
                changed = True
    casts = {c: "double" if c in as_double else "long" for c in kinds}
    wide = sorted((k, c) for c in as_double for k in where.get(c, []))
    return ExactTypes(casts, wide)
