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
    "numeric_rules_arrow",
    "late_arrow",
    "stream_duplicates_arrow",
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


def late(max_ts: dict[int, Any], lateness: Any = None) -> list[Rule]:
    """Rows of a stream side dated more than the allowed ``lateness`` (a ``timedelta``; none by
    default) before the largest ``ts`` that side already committed: the state they would need may
    be expired (docs/operations.md, "Lateness")."""
    import datetime as dt

    lag = lateness if lateness is not None else dt.timedelta(0)
    behind = f"more than {lag.total_seconds():g}s before" if lag else "before"
    return [Rule((F.col("side") == s) & (F.col("ts") < F.lit(mark - lag)), F.concat(
        F.lit("late: ts "), F.col("ts").cast("string"),
        F.lit(f" is {behind} {mark.isoformat()}, the latest ts its stream already committed")))
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


# --------------------------------------------------------------------------- the same rules on Arrow
#
# A micro-batch staged through the driver (``MicroBatchEngine`` with a pipeline's Arrow prepare
# hook: follow mode, the CLI) is checked in this process on a pyarrow Table: the rules below
# are the twins of the Column rules above - same rows, same reason text, joined with "; " in the
# same order - and tests/spark/test_quarantine_arrow.py runs both on the same bad rows.


@dataclass(frozen=True)
class ArrowRule:
    """``Rule`` for a pyarrow Table: ``bad(t)`` a boolean numpy mask; ``reason`` a text, or
    ``reason(t, rows)`` the texts of the rows ``rows`` (indices where ``bad`` holds)."""

    bad: Any
    reason: Any


def split_quarantine_arrow(t: Any, rules: Sequence[ArrowRule]) -> tuple[Any, Any]:
    """``split_quarantine`` on a pyarrow Table: (good rows, bad rows with ``reason``)."""
    import numpy as np
    import pyarrow as pa

    n = t.num_rows
    texts: list[list[str]] = [[] for _ in range(n)]
    any_bad = np.zeros(n, bool)
    for r in rules:
        m = np.asarray(r.bad(t), bool)
        idx = np.flatnonzero(m)
        if not idx.size:
            continue
        any_bad |= m
        why = [r.reason] * idx.size if isinstance(r.reason, str) else r.reason(t, idx)
        for i, w in zip(idx.tolist(), why):
            texts[i].append(w)
    bad_idx = np.flatnonzero(any_bad)
    bad = t.take(pa.array(bad_idx)).append_column("reason", pa.array(["; ".join(texts[i]) for i in bad_idx.tolist()],
                                                                   pa.string()))
    return t.filter(pa.array(~any_bad)), bad


def _list_parts(t: Any, col: str) -> tuple[Any, Any, Any, Any]:
    """(row is null, row length, flat values as float64 with NaN for null elements, element row)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    c = t.column(col)
    c = c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
    isnull = np.asarray(c.is_null().to_numpy(zero_copy_only=False), bool)
    length = np.asarray(pc.fill_null(pc.list_value_length(c), -1).to_numpy(zero_copy_only=False), np.int64)
    flat = pc.list_flatten(c)
    parent = np.asarray(pc.list_parent_indices(c).to_numpy(zero_copy_only=False), np.int64)
    elem_null = np.asarray(flat.is_null().to_numpy(zero_copy_only=False), bool)
    vals = np.asarray(pc.fill_null(flat.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False), np.float64)
    vals = np.where(elem_null, np.nan, vals)
    return isnull, length, (vals, elem_null), parent


def _per_row(n: int, parent: Any, flags: Any) -> Any:
    import numpy as np

    return np.bincount(parent[flags], minlength=n)[:n] > 0 if parent.size else np.zeros(n, bool)


def vector_rules_arrow(col: str, dim: int | None) -> list[ArrowRule]:
    """``vector_rules`` on Arrow: null elements, NaN/inf elements, a wrong dimension."""
    import numpy as np

    def null_elem(t: Any) -> Any:
        _, _, (_, en), parent = _list_parts(t, col)
        return _per_row(t.num_rows, parent, en)

    def not_finite(t: Any) -> Any:
        _, _, (v, en), parent = _list_parts(t, col)
        return _per_row(t.num_rows, parent, ~en & ~np.isfinite(v))

    rules = [ArrowRule(null_elem, f"null element in {col}"), ArrowRule(not_finite, f"NaN or inf in {col}")]
    if dim is not None:
        def wrong(t: Any) -> Any:
            isnull, length, _, _ = _list_parts(t, col)
            return ~isnull & (length != dim)

        def why(t: Any, rows: Any) -> list[str]:
            _, length, _, _ = _list_parts(t, col)
            return [f"{col} dimension {int(length[i])}, expected {dim}" for i in rows.tolist()]

        rules.append(ArrowRule(wrong, why))
    return rules


def zero_vector_arrow(col: str, why: str) -> ArrowRule:
    """``zero_vector`` on Arrow: every element is 0 (an empty vector too; not one with a null)."""
    def bad(t: Any) -> Any:
        import numpy as np

        isnull, length, (v, en), parent = _list_parts(t, col)
        zeros = np.bincount(parent[~en & (v == 0)], minlength=t.num_rows)[: t.num_rows] if parent.size \
            else np.zeros(t.num_rows, np.int64)
        return ~isnull & (zeros == length)

    return ArrowRule(bad, f"zero {col} ({why})")


def first_by(keys: Sequence[Any], order: Sequence[Any], tie: Any = None) -> Any:
    """A mask of the rows that are not the first of their key (``keys``: equal-length arrays) when
    ordered by ``order`` (arrays, ascending) and then by ``tie(i)`` (a Python sort key of row i) -
    ``row_number() over (partition by keys order by ...) > 1``."""
    import numpy as np

    n = len(keys[0]) if keys else 0
    if n == 0:
        return np.zeros(0, bool)
    idx = np.lexsort([*reversed([np.asarray(o) for o in order]), *reversed([np.asarray(k) for k in keys])])
    ks = [np.asarray(k)[idx] for k in keys]
    os_ = [np.asarray(o)[idx] for o in order]
    start = np.ones(n, bool)
    start[1:] = ~np.all(np.stack([k[1:] == k[:-1] for k in ks]), axis=0)
    later = ~start
    if tie is not None:  # rows tied with their group's first on ``order``: the tie key decides
        same = np.ones(n, bool)
        same[1:] = np.all(np.stack([o[1:] == o[:-1] for o in os_]), axis=0) & later[1:]
        same[0] = False
        g = np.cumsum(start) - 1
        for grp in np.unique(g[same]).tolist():
            members = np.flatnonzero(g == grp)
            first_order = [o[members[0]] for o in os_]
            tied = [m for m in members.tolist() if all(o[m] == f for o, f in zip(os_, first_order))]
            best = min(tied, key=lambda m: tie(int(idx[m])))
            later[members[0]] = True
            later[best] = False
    out = np.zeros(n, bool)
    out[idx] = later
    return out


def numeric_rules_arrow(columns_by_side: dict[int, Sequence[str]]) -> list[ArrowRule]:
    """``numeric_rules`` on Arrow: a column the row's side needs is null, or NaN or infinite."""
    import numpy as np
    import pyarrow as pa

    def side_is(t: Any, s: int) -> Any:
        return np.asarray(t.column("side").to_numpy(zero_copy_only=False), np.int64) == s

    def null(s: int, c: str) -> Any:
        return lambda t: side_is(t, s) & np.asarray(t.column(c).is_null().to_numpy(zero_copy_only=False), bool)

    def not_finite(s: int, c: str) -> Any:
        def bad(t: Any) -> Any:
            col = t.column(c)
            if not pa.types.is_floating(col.type):  # an integer is never NaN or infinite
                return np.zeros(t.num_rows, bool)
            v = np.asarray(col.fill_null(0.0).to_numpy(zero_copy_only=False), np.float64)
            return side_is(t, s) & ~np.isfinite(v)
        return bad

    rules = []
    for side, cols in sorted(columns_by_side.items()):
        for c in cols:
            rules.append(ArrowRule(null(side, c), f"null {c}"))
            rules.append(ArrowRule(not_finite(side, c), f"NaN or inf in {c}"))
    return rules


def late_arrow(max_ts: dict[int, Any], lateness: Any = None) -> list[ArrowRule]:
    """``late`` on Arrow: the same rows and reasons (``ts`` as Spark writes a timestamp)."""
    import datetime as dt

    import numpy as np
    import pyarrow as pa

    from simjoin.spark.engine import epoch_us, spark_ts_string

    lag = lateness if lateness is not None else dt.timedelta(0)
    behind = f"more than {lag.total_seconds():g}s before" if lag else "before"

    def ts_us(t: Any) -> Any:
        return np.asarray(t.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
                          .fill_null(np.iinfo(np.int64).max).to_numpy(zero_copy_only=False), np.int64)

    def rule(s: int, mark: Any) -> ArrowRule:
        bound = epoch_us(mark - lag)
        text = f" is {behind} {mark.isoformat()}, the latest ts its stream already committed"

        def bad(t: Any) -> Any:
            side = np.asarray(t.column("side").to_numpy(zero_copy_only=False), np.int64)
            return (side == s) & (ts_us(t) < bound)

        return ArrowRule(bad, lambda t, rows: [f"late: ts {spark_ts_string(int(u))}{text}" for u in ts_us(t)[rows]])

    return [rule(s, mark) for s, mark in sorted(max_ts.items())]


def _order_keys(t: Any, columns: Sequence[str]) -> list[Any]:
    """Sort keys giving Spark's ascending order of ``columns``: a null first, NaN after every number."""
    import numpy as np
    import pyarrow as pa

    keys = []
    for c in columns:
        col = t.column(c)
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        nulls = np.asarray(col.is_null().to_numpy(zero_copy_only=False), bool)
        if pa.types.is_floating(col.type):
            v = np.asarray(col.fill_null(0.0).to_numpy(zero_copy_only=False), np.float64)
            keys += [~nulls, np.isnan(v), np.where(np.isnan(v), 0.0, v) + 0.0]  # -0.0 sorts as 0.0
        else:
            keys += [~nulls, np.asarray(col.fill_null(0).to_numpy(zero_copy_only=False), np.int64)]
    return keys


def stream_duplicates_arrow(t: Any, seen: Any, order: Sequence[str]) -> list[ArrowRule]:
    """``stream_duplicates`` on Arrow: a (side, id) repeated inside the batch (all but the first by
    ``order``), or in ``seen`` (a Table of distinct (side, id), ``MicroBatchEngine.seen_keys``)."""
    import numpy as np

    side = np.asarray(t.column("side").to_numpy(zero_copy_only=False), np.int64)
    ids = np.asarray(t.column("id").to_numpy(zero_copy_only=False), np.int64)
    dup = first_by([side, ids], _order_keys(t, order))
    rules = [ArrowRule(lambda x: dup, lambda x, rows: [f"duplicate id {ids[i]}" for i in rows.tolist()])]
    if seen is not None:
        hit = np.zeros(t.num_rows, bool)
        ks = np.asarray(seen.column("side").to_numpy(), np.int64)
        ki = np.asarray(seen.column("id").to_numpy(), np.int64)
        for s in np.unique(ks).tolist():
            hit |= (side == s) & np.isin(ids, ki[ks == s])
        rules.append(ArrowRule(lambda x: hit, lambda x, rows: [f"duplicate id {ids[i]} (a live tuple has it)"
                                                                for i in rows.tolist()]))
    return rules
