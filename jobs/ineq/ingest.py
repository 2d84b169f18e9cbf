"""Inequality join stage 1, ingest: the engine reads what arrived in the stream(s) since the last
run; this module's ``prepare`` applies the join's own rules to each micro-batch.

The engine quarantines null or unreadable ``id``/``ts`` and future rows. Here, rows go to
``<output>_quarantine`` with their reason when a predicate column the row's side needs is null,
NaN or infinite, when its (side, id) repeats - inside the batch, earlier in this unit, or among
the live tuples of the window - and, for time windows, when it is late: dated more than the
allowed lateness (``--allowed-lateness``, default 0s) before the largest ``ts`` its stream already
committed (it could meet tuples the window has already expired). A row within the lateness is
staged and joined exactly, as if it had arrived in order (docs/operations.md, "Lateness").
Good rows are staged as the new unit. Predicate columns are staged in their own type
(``simjoin.spark.exact_types``): integers as long, compared exactly; an integer compared with a
float column as double, its rows of magnitude 2^53 or more quarantined.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.ineq.common import IneqRun, tuple_bound, tuple_live
from simjoin.quality.quarantine import (
    late,
    late_arrow,
    numeric_rules,
    numeric_rules_arrow,
    split_quarantine,
    split_quarantine_arrow,
    stream_duplicates,
    stream_duplicates_arrow,
)
from simjoin.spark import delta
from simjoin.spark.engine import NUMERIC, BatchInfo, Prepared
from simjoin.spark.exact_types import ExactTypes, exact_types


def _numeric(t: T.DataType) -> bool:
    return isinstance(t, NUMERIC)


def payloads(run: IneqRun) -> list[dict[str, Any]]:
    p = run.params()
    return [{c: _numeric for c in p.columns(s)} for s in p.sides]


def _seen(spark: SparkSession, run: IneqRun, info: BatchInfo) -> DataFrame | None:
    """(side, id) of live tuples (expired ones may linger in the table until a batch expires:
    the exact bound is applied here), or staged earlier in this unit."""
    live = None
    if delta.table_exists(spark, run.tuples):
        p = run.params()
        bound = " OR ".join(f"({tuple_bound(p, info.progress, s, 'ts', 'seq')})" for s in p.sides)
        live = delta.read_table(spark, run.tuples).where(F.col("unit") < info.unit).where(bound)
    return run.engine(spark).seen(info, live)  # type: ignore[no-any-return]


def types(spark: SparkSession, run: IneqRun) -> ExactTypes:
    """The staged type of every predicate column (exact comparison in its own type)."""
    p = run.params()
    return exact_types(spark, run.sources, [p.columns(s) for s in p.sides],
                       [(pr.left, pr.right) for pr in p.query.predicates])


def preparer(spark: SparkSession, run: IneqRun, exact: ExactTypes | None = None) -> Any:
    p = run.params()
    cols = sorted({c for s in p.sides for c in p.columns(s)})

    def prepare(df: DataFrame, info: BatchInfo) -> Prepared:
        rules = numeric_rules({s: p.columns(s) for s in p.sides}) + (exact.rules() if exact else [])
        df, dups = stream_duplicates(df, _seen(spark, run, info), ["ts", *cols])
        rules += dups
        if p.window.time_us is not None:
            rules += late(info.progress.max_ts, info.progress.lateness)
        res = split_quarantine(df, rules, table=f"{run.output} micro-batch {info.batch_id}", lazy=info.local)
        keep = ["id", "ts", "side", *cols]
        bad = res.bad.select("id", "ts", "ts_raw", "side", *cols, "reason")
        return Prepared(res.good.select(*keep), bad)

    return prepare


def _live_keys(run: IneqRun, info: BatchInfo) -> Any:
    """(side, id) of the live tuples (``_seen``'s, read with deltalake: no Spark job)."""
    import pyarrow as pa

    t = delta.read_arrow(run.tuples, [("unit", "<", int(info.unit))], ["side", "id", "ts", "seq"])
    if t is None or not t.num_rows:
        return None
    p = run.params()
    keep = np.zeros(t.num_rows, bool)
    side = np.asarray(t.column("side").to_numpy(zero_copy_only=False), np.int64)
    for s in p.sides:
        keep |= (side == s) & tuple_live(p, info.progress, s, t)
    return t.filter(pa.array(keep)).select(["side", "id"])


def preparer_arrow(spark: SparkSession, run: IneqRun, exact: ExactTypes | None = None) -> Any:
    """``preparer``'s twin on pyarrow Tables (a micro-batch staged through the driver, with no Spark
    job): the same rules in the same order, so the same rows with the same reasons."""
    p = run.params()
    cols = sorted({c for s in p.sides for c in p.columns(s)})

    def prepare(t: Any, info: BatchInfo) -> Prepared:
        rules = numeric_rules_arrow({s: p.columns(s) for s in p.sides}) + (exact.arrow_rules() if exact else [])
        rules += stream_duplicates_arrow(t, run.engine(spark).seen_keys(info, _live_keys(run, info)), ["ts", *cols])
        if p.window.time_us is not None:
            rules += late_arrow(info.progress.max_ts, info.progress.lateness)
        good, bad = split_quarantine_arrow(t, rules)
        return Prepared(good.select(["id", "ts", "side", *cols]), bad.select(["id", "ts", "ts_raw", "side", *cols,
                                                                              "reason"]))

    return prepare


def run(spark: SparkSession, run_: IneqRun) -> dict[str, Any]:
    """Stage everything that arrived since the last run as one unit (or resume the open one)."""
    exact = types(spark, run_)
    return run_.engine(spark).ingest(  # type: ignore[no-any-return]
        preparer(spark, run_, exact), payloads(run_), "<numeric predicate columns>", casts=exact.casts,
        prepare_arrow=preparer_arrow(spark, run_, exact))
