"""Spark adapter for the distributed set-similarity join of Fier & Freytag.

Stage 1 (tokenize + length statistics, Sec. 2 step 1): raw text -> sets of integer tokens in
the canonical order (ascending global frequency), records ordered by length with a dense rid.
Stage 2 (optimizer, Sec. 2.1-2.5) runs on the driver with ``simjoin.core.setsim.optimizer``.
Stage 3 (join, Sec. 2 step 3): every record is replicated to the plan units that need it
(``Plan.assign_units`` inside ``mapInArrow``), each unit lands in its own shuffle partition,
and one local PPJoin (``simjoin.core.setsim.ppjoin``, numba) runs per unit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from simjoin.core.setsim import Plan
from simjoin.operators.setsim import (
    APPENDED,
    ENCODED_SCHEMA,
    MEASURE_SCHEMA,
    PLAN_SCHEMA,
    PROFILE_SCHEMA,
    ROUTED_SCHEMA,
    UNIT_RESULT_SCHEMA,
    Partition,
    TokenProfile,
    UnitBudget,
    binary,
    check_input_types,
    encode_partition,
    from_prepared,
    from_text,
    keep_freed_memory,
    measure_fractions,
    measure_partition,
    merge_measures,
    pack,
    plan_rows,
    profile_partition,
    row_reasons,
    size_bytes,
    summarize_profile,
    unit_kernel,
    unpack,
)
from simjoin.operators.tokenizer import tokenize as tokenize_arrow
from simjoin.spark.routing import partition_keys
from simjoin.spark.session import small_frame

__all__ = [
    "check_input_columns",
    "select_input",
    "appended_id_clash",
    "increment_blocks",
    "self_pairs",
    "prepare",
    "profile",
    "drop_duplicates",
    "encode",
    "plan_to_df",
    "route_to_units",
    "join_units",
    "measure_slices",
    "unit_budget",
]


def check_input_columns(df: DataFrame, id_col: str, text_col: str, what: str) -> None:
    """Fail early, naming the column and what is there, before any work is done."""
    check_input_types(dict(df.dtypes), id_col, text_col, what)



def select_input(df: DataFrame, id_col: str, text_col: str, side: int, appended: str | None = None) -> DataFrame:
    """(side, id, text) from a user table; with ``appended`` (a boolean column of ``df``), the rows
    where it holds get side ``side + APPENDED``."""
    sd = F.lit(side)
    if appended is not None:
        sd = sd + F.when(F.col(appended), F.lit(APPENDED)).otherwise(F.lit(0))
    return df.select(sd.cast("int").alias("side"), F.col(id_col).cast("long").alias("id"),
                     F.col(text_col).alias("text"))


def appended_id_clash(prepared: DataFrame) -> int | None:
    """An id that an appended good row shares with an earlier good row of the same input, if any."""
    good = prepared.filter(F.col("reason") == "").select(
        (F.col("side") % APPENDED).alias("s"), "id", (F.col("side") >= APPENDED).alias("new"))
    hit = (good.groupBy("s", "id").agg(F.min(F.col("new").cast("int")).alias("a"),
                                       F.max(F.col("new").cast("int")).alias("b"))
           .filter(F.col("a") != F.col("b")).select("id").limit(1).collect())
    return int(hit[0]["id"]) if hit else None


def increment_blocks(records: DataFrame, rs: bool) -> list[DataFrame]:
    """The R-S joins that find exactly the pairs with at least one appended record.

    Self-join: appended records (left) against all records (right); every pair of two appended
    records comes twice, and each appended record meets itself (``self_pairs`` cleans both up).
    R-S join: appended left against all right, then earlier left against appended right.
    A record in both sides of a block gets rid ``2 rid + side``: still unique, still in length order.
    """
    sd = F.col("side")

    def block(left: Any, right: Any) -> DataFrame:
        one = records.filter(left).withColumn("side", F.lit(0)).unionByName(
            records.filter(right).withColumn("side", F.lit(1)))
        return one.withColumn("side", sd.cast("int")).withColumn("rid", F.col("rid") * 2 + sd)

    if not rs:
        return [block(sd == APPENDED, F.lit(True))]
    return [block(sd == APPENDED, sd.isin(1, 1 + APPENDED)), block(sd == 0, sd == 1 + APPENDED)]


def self_pairs(pairs: DataFrame) -> DataFrame:
    """Pairs of an incremental self-join block as the self-join gives them: no record with itself,
    each unordered pair once, ``left_id < right_id``."""
    a, b = F.col("left_id"), F.col("right_id")
    return (pairs.filter(a != b).withColumn("l", F.least(a, b)).withColumn("r", F.greatest(a, b))
            .drop("left_id", "right_id").withColumnRenamed("l", "left_id").withColumnRenamed("r", "right_id")
            .dropDuplicates(["left_id", "right_id"]).select("left_id", "right_id", *[
                c for c in pairs.columns if c not in ("left_id", "right_id")]))


PREPARED_SCHEMA = "side int, id long, text string, tokens array<string>, reason string"



def _prepare(qgram: int | None) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def prep(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keep_freed_memory()
        for b in batches:
            text = b.column("text")
            toks = tokenize_arrow(text, qgram)
            reason = row_reasons(b.column("id"), text, pc.list_value_length(toks).to_numpy(zero_copy_only=False))
            yield pa.RecordBatch.from_arrays([b.column("side"), b.column("id"), text, toks, reason],
                                             ["side", "id", "text", "tokens", "reason"])

    return prep


def prepare(df: DataFrame, qgram: int | None) -> DataFrame:
    """(side, id, text) -> (side, id, text, tokens, reason), one vectorized pass.

    ``tokens`` are lower-cased words split on whitespace or character q-grams, duplicates inside
    a record removed (``simjoin.operators.tokenizer``). ``reason`` is '' for a good row; otherwise it
    names every broken rule: null id, null text, empty text, text without tokens.
    """
    return df.mapInArrow(_prepare(qgram), PREPARED_SCHEMA)


def _task_partition() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx else 0






def _reader(qgram: int | None, tokenized: bool) -> Callable[[Iterator[pa.RecordBatch]], Partition | None]:
    """How a partition is read: prepared rows (``tokenized``), or (side, id, text) rows tokenized with ``qgram``."""
    if tokenized:
        return lambda batches: from_prepared(batches, _task_partition())
    return lambda batches: from_text(batches, qgram, _task_partition())


def _is_prepared(df: DataFrame) -> bool:
    return "tokens" in df.columns





def _profile(read: Callable[[Iterator[pa.RecordBatch]], Partition | None]
             ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def prof(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keep_freed_memory()
        p = read(batches)
        if p is not None:
            yield from profile_partition(p)

    return prof


def profile(rows: DataFrame, qgram: int | None = None) -> TokenProfile:
    """Profile (side, id, text) rows, tokenizing them with ``qgram`` on the way (nothing is cached), or
    rows already ``prepare``d."""
    read = _reader(qgram, _is_prepared(rows))
    agg = (rows.mapInArrow(_profile(read), PROFILE_SCHEMA)
           .groupBy("kind", "side", "key", "token").agg(F.sum("n").alias("n"), F.max("aux").alias("aux")))
    prof, overlap = summarize_profile(agg.toArrow())
    if overlap:  # two partitions' id intervals meet: find the repeated ids with a shuffle of the ids
        good = rows if _is_prepared(rows) else prepare(rows, qgram)
        rep = (good.filter(F.col("reason") == "").groupBy("side", "id").count().filter(F.col("count") > 1)
               .select("side", "id").collect())
        prof = replace(prof, duplicates=[(int(r["side"]), int(r["id"])) for r in rep])
    return prof





def drop_duplicates(prepared: DataFrame, duplicates: list[tuple[int, int]]) -> DataFrame:
    """Keep one good row per repeated (side, id), the first by text; mark the others
    ``duplicate id <id>``. Only the rows of the repeated keys are shuffled."""
    spark = prepared.sparkSession
    keys = F.broadcast(spark.createDataFrame(duplicates, "side int, id long"))
    rest = prepared.join(keys, ["side", "id"], "left_anti")
    dup = prepared.join(keys, ["side", "id"], "left_semi")
    w = Window.partitionBy("side", "id", (F.col("reason") == "")).orderBy("text")
    dup = dup.withColumn("reason", F.when(
        (F.col("reason") == "") & (F.row_number().over(w) > 1),
        F.concat(F.lit("duplicate id "), F.col("id").cast("string"))).otherwise(F.col("reason")))
    return rest.unionByName(dup.select(*prepared.columns))


def _encode(read: Callable[[Iterator[pa.RecordBatch]], Partition | None], dictionary: pa.Array,
            rid_base: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]
            ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A partition -> its encoded rows (``encode_partition``)."""

    def encode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keep_freed_memory()
        p = read(batches)
        if p is not None:
            yield from encode_partition(p, dictionary, rid_base)

    return encode


def encode(rows: DataFrame, prof: TokenProfile, qgram: int | None = None) -> DataFrame:
    """The encoded rows (``ENCODED_SCHEMA``) of the rows ``prof`` profiled: (side, id, text) rows,
    tokenized again here with ``qgram``, or ``prepare``d rows. Good rows become records with integer
    tokens by ascending global frequency and a dense ``rid`` in length order; bad rows keep their reason."""
    return rows.mapInArrow(_encode(_reader(qgram, _is_prepared(rows)), prof.dictionary, prof.rid_base),
                           ENCODED_SCHEMA)


def plan_to_df(spark: SparkSession, plan: Plan) -> DataFrame:
    """The plan table's rows (``plan_rows``) as a DataFrame."""
    return small_frame(spark, plan_rows(plan), PLAN_SCHEMA)








def route_to_units(records: DataFrame, plan: Plan) -> DataFrame:
    """Replicate each record to exactly the units its length and rid % m require (never twice to
    one unit), then shuffle so that each unit is alone in its own partition."""
    keys = partition_keys(plan.n_units)

    def route(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keep_freed_memory()
        for b in batches:
            if b.num_rows == 0:
                continue
            lengths = b.column("length").to_numpy(zero_copy_only=False)
            rids = b.column("rid").to_numpy(zero_copy_only=False)
            pos, unit, is_index, is_probe = plan.assign_units(lengths, rids)
            order = np.argsort(unit, kind="stable")
            cuts = np.flatnonzero(np.diff(unit[order])) + 1
            us, blobs = [], []
            for sel in np.split(order, cuts):
                if sel.size == 0:
                    continue
                take = pa.array(pos[sel])
                blobs.append(pack(pa.RecordBatch.from_arrays(
                    [b.column("rid").take(take), b.column("side").take(take), b.column("id").take(take),
                     b.column("tokens").take(take), pa.array(is_index[sel]), pa.array(is_probe[sel])],
                    ["rid", "side", "id", "tokens", "is_index", "is_probe"])))
                us.append(int(unit[sel[0]]))
            u = np.array(us, dtype=np.int32)
            yield pa.RecordBatch.from_arrays([pa.array(u), pa.array(keys[u]), binary(blobs)],
                                             ["unit", "pkey", "records"])

    routed = records.select("rid", "side", "id", "length", "tokens").mapInArrow(route, ROUTED_SCHEMA)
    return routed.repartition(max(1, plan.n_units), "pkey")











def join_units(routed: DataFrame, plan: Plan, rs: bool) -> DataFrame:
    """One local PPJoin per unit. Rows of ``UNIT_RESULT_SCHEMA``: pairs (``kind`` = ``RowKind.PAIR``)
    and one stats row per unit (``RowKind.STATS``)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        table = unpack(batches)
        if table is None:
            return
        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx else -1
        yield from unit_kernel(table, plan, rs, part)

    return routed.mapInArrow(run, UNIT_RESULT_SCHEMA)


def measure_slices(records: DataFrame, theta: float, sim: str, rs: bool, n_records: int,
                   work_rows: int = 500_000, result_rows: int = 20_000
                   ) -> tuple[dict[int, float], float, dict[int, float], float]:
    """What each slice costs, from one scan of the encoded records (rid, side, id, tokens):

    - W(i), the posting visits of PPJoin's candidate generation (``simjoin.core.setsim.work``),
      counted from the prefixes of a deterministic sample of ``work_rows`` records (``record_keys``) and scaled by
      1/fraction² (both ends of a visit are sampled);
    - the result pairs per slice, from a join on the driver of a nested sample of
      ``result_rows`` records, scaled likewise. This is where candidate skew shows: a
      near-duplicate cluster puts k²/2 results in one slice.

    Each partition sums its counts and packs them with its sampled records into one row (no
    shuffle); the driver merges them. Returns (W, its fraction, results, their fraction)."""
    f_work, f_res = measure_fractions(n_records, work_rows, result_rows)

    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keep_freed_memory()
        yield from measure_partition(batches, theta, sim, f_work, f_res)

    got = records.select("rid", "side", "id", "tokens").mapInArrow(scan, MEASURE_SCHEMA).toArrow()
    return merge_measures(got, theta, sim, rs, f_work, f_res)






def unit_budget(spark: SparkSession | None, memory_gb: float | None = None,
                conf: dict[str, str] | None = None) -> UnitBudget:
    """How much memory one unit may use, and how many units run at once.

    A unit runs in one Spark Python worker, one per task slot. Slots: ``local[N]``'s N (all
    cores for ``local[*]``), else ``spark.executor.cores`` × executors (or ``spark.cores.max``).
    Memory per slot: ``spark.executor.pyspark.memory`` / executor cores when it is set (Spark
    enforces it); in local mode the machine's memory less the driver's JVM heap and 1 GiB for
    the OS; on a cluster this host's memory less the executor heap, per executor core.
    ``memory_gb`` (``--memory-gb``), when given, caps the result. Without a session (``spark``
    None: the in-process path) the same rules read ``conf`` (Spark's keys: the local master and
    driver memory a session of this configuration would have).
    """
    import os
    import re

    from simjoin.spark.session import is_remote

    remote = spark is not None and is_remote(spark)
    given = dict(conf or {})

    class _Conf:  # the session's conf: a Spark Connect session has no SparkContext
        @staticmethod
        def get(key: str, default: str | None = None) -> str | None:
            if spark is None:
                return given.get(key, default)
            try:
                return spark.conf.get(key, default)
            except Exception:
                return default

    cf = _Conf()
    master = cf.get("spark.master", "local[*]") or "local[*]"
    phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    cores = os.cpu_count() or 1
    local = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master)
    if local:
        n = local.group(1)
        slots = cores if n in (None, "*") else int(n) if n else 1
        exec_cores = slots
    else:
        exec_cores = int(cf.get("spark.executor.cores", "0") or 0) or cores
        execs = 1 if remote or spark is None else max(
            1, len(spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()) - 1)
        cap = int(cf.get("spark.cores.max", "0") or 0)
        slots = cap or exec_cores * execs
    pyspark_mem = size_bytes(cf.get("spark.executor.pyspark.memory", None))
    if pyspark_mem:
        per, source = pyspark_mem // exec_cores, f"spark.executor.pyspark.memory / {exec_cores} cores"
    elif local:
        heap = size_bytes(cf.get("spark.driver.memory", "1g")) or 2**30
        per = max(2**28, (phys - heap - 2**30) // max(1, slots))
        source = f"local: {phys / 2**30:.1f} GiB less the {heap / 2**30:.1f} GiB driver heap and 1 GiB, / {slots} slots"
    else:
        heap = size_bytes(cf.get("spark.executor.memory", "1g")) or 2**30
        per = max(2**28, (phys - heap - 2**30) // exec_cores)
        source = (f"host {phys / 2**30:.1f} GiB less the {heap / 2**30:.1f} GiB executor heap and 1 GiB, "
                  f"/ {exec_cores} cores")
    if memory_gb is not None and memory_gb * 2**30 < per:
        per, source = int(memory_gb * 2**30), f"--memory-gb {memory_gb:g} (below {source})"
    return UnitBudget(memory_bytes=int(per), slots=max(1, int(slots)), source=source)
