"""S2J stage 1, ingest - the input adapter: the engine reads what arrived in the stream(s) since
the last run; this module's ``prepare`` applies the operator's rules to each micro-batch.

Pre-projection: only the columns some task reads (and the punctuation column) are staged. Rows go
to ``DIR/_quarantine`` with their reason when a column the row's side needs is null, NaN or
infinite, when the punctuation value is null, when its (side, id) repeats - inside the batch,
earlier in this unit, or among the window's live blocks - and when it is late: dated more than
``--allowed-lateness`` before the largest ``ts`` its stream already committed (it could meet tuples
the window has already dropped); a row within it is joined exactly, as if it had arrived in order.
Pre-selection (the tasks' one-role predicates) happens in the join stage, on the tuples kept.
Task columns are staged in their own type (``simjoin.spark.exact_types``): integers as long,
compared exactly; an integer compared with a float column as double, its rows of magnitude 2^53
or more quarantined.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.s2j.common import S2JRun, dead_blocks
from simjoin.quality.quarantine import Rule, late, numeric_rules, split_quarantine, stream_duplicates
from simjoin.spark import delta
from simjoin.spark.engine import NUMERIC, BatchInfo, Prepared
from simjoin.spark.exact_types import ExactTypes, exact_types


def _numeric(t: T.DataType) -> bool:
    return isinstance(t, NUMERIC)


def _boolean(t: T.DataType) -> bool:
    return isinstance(t, T.BooleanType)


def payloads(run: S2JRun) -> list[dict[str, Any]]:
    p = run.params()
    punct = run.cfg.punctuation
    return [{**{c: _numeric for c in p.columns(s)}, **({punct: _boolean} if punct else {})} for s in p.sides]


def _seen(spark: SparkSession, run: S2JRun, info: BatchInfo) -> DataFrame | None:
    """(side, id) of the tuples in live blocks, or staged earlier in this unit."""
    live = None
    if delta.table_exists(spark, run.blocks):
        live = delta.read_table(spark, run.blocks).where(F.col("unit") < info.unit)
        dead = dead_blocks(run.params(), info.progress.max_ts)
        if dead:
            live = live.where(f"NOT ({dead})")
        live = live.select("side", F.explode("ids").alias("id"))
    return run.engine(spark).seen(info, live)  # type: ignore[no-any-return]


def types(spark: SparkSession, run: S2JRun) -> ExactTypes:
    """The staged type of every task column (exact comparison in its own type)."""
    p = run.params()
    return exact_types(spark, run.sources, [p.columns(s) for s in p.sides],
                       [(t.left, t.right) for task in p.tasks for t in task.thetas])


def preparer(spark: SparkSession, run: S2JRun, exact: ExactTypes | None = None) -> Any:
    p = run.params()
    punct = run.cfg.punctuation
    cols = sorted({c for s in p.sides for c in p.columns(s)})

    def prepare(df: DataFrame, info: BatchInfo) -> Prepared:
        rules = numeric_rules({s: p.columns(s) for s in p.sides}) + (exact.rules() if exact else [])
        if punct:
            rules.append(Rule(F.col(punct).isNull(), f"null {punct} (the punctuation column)"))
        df, dups = stream_duplicates(df, _seen(spark, run, info), ["ts", *cols])
        rules += dups + late(info.progress.max_ts, info.progress.lateness)
        res = split_quarantine(df, rules, table=f"{run.output} micro-batch {info.batch_id}", lazy=info.local)
        extra = [punct] if punct else []
        keep = ["id", "ts", "side", *cols, *extra]
        bad = res.bad.select("id", "ts", "ts_raw", "side", *cols, *extra, "reason")
        return Prepared(res.good.select(*keep), bad)

    return prepare


def run(spark: SparkSession, run_: S2JRun) -> dict[str, Any]:
    """Stage everything that arrived since the last run as one unit (or resume the open one)."""
    exact = types(spark, run_)
    return run_.engine(spark).ingest(  # type: ignore[no-any-return]
        preparer(spark, run_, exact), payloads(run_), "<numeric columns of the tasks>", casts=exact.casts)
