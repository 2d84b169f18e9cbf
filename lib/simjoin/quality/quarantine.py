"""Row-level rules: bad rows go to ``<table>_quarantine`` with a ``reason``; good rows go on.

Nothing is silently dropped: the split asserts good + quarantined = input and logs the counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from simjoin.log import get_logger
from simjoin.spark.delta import overwrite_partition

__all__ = [
    "Rule",
    "QuarantineResult",
    "split_quarantine",
    "numeric_rules",
    "write_quarantine",
    "not_null",
    "nonempty_text",
    "vector_rules",
    "finite",
    "zero_vector",
    "DUPLICATE_ID",
    "late",
    "stream_duplicates",
]

log = get_logger("simjoin.quality")
DUPLICATE_ID = "__duplicate_id__"


@dataclass(frozen=True)
class Rule:
    """``bad`` is true for rows that break the rule; ``reason`` (text or a Column) says why."""

    bad: Column
    reason: Any


@dataclass
class QuarantineResult:
    good: DataFrame
    bad: DataFrame
    n_in: int
    n_good: int
    n_bad: int


def not_null(*cols: str) -> list[Rule]:
    return [Rule(F.col(c).isNull(), f"null {c}") for c in cols]


def nonempty_text(col: str) -> Rule:
    return Rule(F.trim(F.col(col)) == "", f"empty {col}")


def finite(*cols: str) -> list[Rule]:
    return [Rule(F.isnan(F.col(c)) | F.col(c).isin(float("inf"), float("-inf")), f"NaN or inf in {c}") for c in cols]


def vector_rules(col: str, dim: int | None) -> list[Rule]:
    """Null elements, NaN/inf elements and (when ``dim`` is given) a wrong dimension."""
    rules = [
        Rule(F.exists(F.col(col), lambda x: x.isNull()), f"null element in {col}"),
        Rule(F.exists(F.col(col), lambda x: F.isnan(x) | x.isin(float("inf"), float("-inf"))),
             f"NaN or inf in {col}"),
    ]
    if dim is not None:
        rules.append(Rule(F.size(F.col(col)) != dim,
                          F.concat(F.lit(f"{col} dimension "), F.size(F.col(col)).cast("string"),
                                   F.lit(f", expected {dim}"))))
    return rules


def zero_vector(col: str, why: str) -> Rule:
    return Rule(F.forall(F.col(col), lambda x: x == 0), f"zero {col} ({why})")


def split_quarantine(df: DataFrame, rules: list[Rule], id_col: str | None = None,
                     order_col: str | None = None, table: str = "input", lazy: bool = False) -> QuarantineResult:
    """Split ``df`` into good rows and bad rows (with ``reason``: every broken rule, '; '-joined).

    With ``id_col``, a repeated id is kept once (the first by ``order_col``, then by the row's
    content) and every further copy is quarantined as a duplicate id. ``lazy``: no cache and no
    counting job (the counts are -1); for a caller that computes both sides in one job of its
    own. ``concat_ws`` never yields a null reason, so no row falls between the two filters.
    """
    reasons = [F.when(F.coalesce(r.bad, F.lit(False)), r.reason if isinstance(r.reason, Column) else F.lit(r.reason))
               for r in rules]
    if id_col:
        order = [F.col(order_col)] if order_col else []
        order += [F.col(c) for c in df.columns if c != id_col and dict(df.dtypes)[c] not in ("binary",)
                  and not dict(df.dtypes)[c].startswith(("array", "map", "struct"))]
        w = Window.partitionBy(id_col).orderBy(*order) if order else Window.partitionBy(id_col).orderBy(F.lit(0))
        dup = F.row_number().over(w) > 1
        reasons.append(F.when(F.col(id_col).isNotNull() & dup,
                              F.concat(F.lit(f"duplicate {id_col} "), F.col(id_col).cast("string"))))
    tagged = df.withColumn("reason", F.concat_ws("; ", F.array(*reasons)) if reasons else F.lit(""))
    if lazy:
        return QuarantineResult(tagged.filter(F.col("reason") == "").drop("reason"),
                                tagged.filter(F.col("reason") != ""), -1, -1, -1)
    tagged = tagged.cache()
    good = tagged.filter(F.col("reason") == "").drop("reason")
    bad = tagged.filter(F.col("reason") != "")
    # one job: good, bad, and rows neither filter keeps (a null reason) - which would be lost
    counts = {r["ok"]: r["n"] for r in tagged.groupBy((F.col("reason") == "").alias("ok"))
              .agg(F.count("*").alias("n")).collect()}
    n_good, n_bad, n_lost = int(counts.get(True, 0)), int(counts.get(False, 0)), int(counts.get(None, 0))
    n_in = n_good + n_bad + n_lost
    if n_lost:
        raise AssertionError(f"quarantine split of {table} lost rows: {n_good} good + {n_bad} bad != {n_in}")
    log.info("quality %s: %d rows in, %d good, %d quarantined", table, n_in, n_good, n_bad)
    return QuarantineResult(good, bad, n_in, n_good, n_bad)


def write_quarantine(res: QuarantineResult, table: str, run_id: str, stage: str) -> str:
    """Write the bad rows to ``<table>_quarantine``, replacing this run's partition (idempotent)."""
    path = f"{table.rstrip('/')}_quarantine"
    out = res.bad.withColumn("stage", F.lit(stage)).withColumn("run_id", F.lit(run_id))
    overwrite_partition(out, path, {"run_id": run_id})
    return path


def late(max_ts: dict[int, Any]) -> list[Rule]:
    """Rows of a stream side dated before the largest ``ts`` that side already committed: with an
    arrival-based window they could meet tuples the window has already expired."""
    return [Rule((F.col("side") == s) & (F.col("ts") < F.lit(mark)), F.concat(
        F.lit("late: ts "), F.col("ts").cast("string"),
        F.lit(f" is before {mark.isoformat()}, the latest ts its stream already committed")))
        for s, mark in sorted(max_ts.items())]


def numeric_rules(columns_by_side: dict[int, Sequence[str]]) -> list[Rule]:
    """Rules for a stream row whose side needs a numeric column that is null, NaN or infinite."""
    rules = []
    for side, cols in sorted(columns_by_side.items()):
        mine = F.col("side") == side
        for c in cols:
            rules.append(Rule(mine & F.col(c).isNull(), f"null {c}"))
            rules.append(Rule(mine & (F.isnan(c) | F.col(c).isin(float("inf"), float("-inf"))), f"NaN or inf in {c}"))
    return rules


def stream_duplicates(df: DataFrame, seen: DataFrame | None, order: list[str]) -> tuple[DataFrame, list[Rule]]:
    """Rules for a (side, id) repeated inside the micro-batch (all but the first by ``order``) or
    in ``seen`` (``MicroBatchEngine.seen``: live tuples and rows staged earlier in the unit)."""
    dup = F.row_number().over(Window.partitionBy("side", "id").orderBy(*order)) > 1
    rules = [Rule(dup, F.concat(F.lit("duplicate id "), F.col("id").cast("string")))]
    if seen is not None:
        df = df.join(seen, ["side", "id"], "left")
        rules.append(Rule(F.col("_seen").isNotNull(), F.concat(
            F.lit("duplicate id "), F.col("id").cast("string"), F.lit(" (a live tuple has it)"))))
    return df, rules
