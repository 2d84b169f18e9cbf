"""Spark adapter for the distributed set-similarity join of Fier & Freytag.

Stage 1 (tokenize + length statistics, Sec. 2 step 1): raw text -> sets of integer tokens in
the canonical order (ascending global frequency), records ordered by length with a dense rid.
Stage 2 (optimizer, Sec. 2.1-2.5) runs on the driver with ``simjoin.core.setsim.optimizer``.
Stage 3 (join, Sec. 2 step 3): every record is replicated to the plan units that need it
(``Plan.assign_units`` inside ``mapInArrow``), each unit lands in its own shuffle partition,
and one local PPJoin (``simjoin.core.setsim.ppjoin``, numba) runs per unit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from simjoin.core.setsim import Plan, PlanUnit, ppjoin
from simjoin.quality import quarantine as q

__all__ = [
    "SSJTables",
    "check_input_columns",
    "select_input",
    "tokenize",
    "input_rules",
    "canonicalize",
    "plan_to_df",
    "plan_from_rows",
    "route_to_units",
    "join_units",
    "UNIT_RESULT_SCHEMA",
]


@dataclass(frozen=True)
class SSJTables:
    """The Delta tables of one set-similarity join, named after its output path."""

    output: str

    def _side(self, suffix: str) -> str:
        return f"{self.output.rstrip('/')}_{suffix}"

    @property
    def tokens(self) -> str:
        return self._side("tokens")

    @property
    def lengths(self) -> str:
        return self._side("lengths")

    @property
    def plan(self) -> str:
        return self._side("plan")

    @property
    def staging(self) -> str:
        return self._side("staging")

    @property
    def stats(self) -> str:
        return self._side("stats")

    @property
    def quarantine(self) -> str:
        return self._side("quarantine")

    def all(self) -> dict[str, str]:
        return {"pairs": self.output, "tokens": self.tokens, "lengths": self.lengths, "plan": self.plan,
                "stats": self.stats, "quarantine": self.quarantine}


def check_input_columns(df: DataFrame, id_col: str, text_col: str, what: str) -> None:
    """Fail early, naming the column and what is there, before any work is done."""
    types = dict(df.dtypes)
    for col, allowed in ((id_col, ("bigint", "int", "smallint", "tinyint")), (text_col, ("string",))):
        if col not in types:
            raise ValueError(f"{what}: column {col!r} not found; allowed: one of {sorted(types)}")
        if types[col] not in allowed:
            raise ValueError(f"{what}: column {col!r} has type {types[col]}; allowed: {', '.join(allowed)}")


def _token_expr(text_col: str, qgram: int | None) -> Column:
    text = F.lower(F.col(text_col))
    if qgram is None:
        toks = F.filter(F.split(text, r"\s+"), lambda t: t != "")
    else:
        toks = F.expr(
            f"transform(sequence(1, greatest(char_length(lower(`{text_col}`)) - {qgram} + 1, 1)), "
            f"i -> substring(lower(`{text_col}`), i, {qgram}))"
        )
    return F.array_distinct(toks)


def select_input(df: DataFrame, id_col: str, text_col: str, side: int) -> DataFrame:
    """(side, id, text) from a user table."""
    return df.select(F.lit(side).cast("int").alias("side"), F.col(id_col).cast("long").alias("id"),
                     F.col(text_col).alias("text"))


def tokenize(df: DataFrame, qgram: int | None) -> DataFrame:
    """Add ``tokens array<string>`` to (side, id, text): lower-cased whitespace words or character
    q-grams, duplicates inside a record removed. Strings shorter than q give one token, the string."""
    return df.withColumn("tokens", _token_expr("text", qgram))


def input_rules(qgram: int | None) -> list[q.Rule]:
    """Null id or text, empty text, and text that yields no token (checked without materialising tokens)."""
    no_tokens = F.col("text").isNotNull() & (F.trim(F.col("text")) != "") & (F.size(_token_expr("text", qgram)) == 0)
    return q.not_null("id", "text") + [q.nonempty_text("text"), q.Rule(no_tokens, "no tokens")]


def token_order(tok: DataFrame) -> pa.Array:
    """The canonical token order: ascending global frequency, ties by token text (the order the
    prefix filter needs). Position in the returned array = integer token id."""
    freq = (tok.select(F.explode("tokens").alias("token")).groupBy("token").agg(F.count("*").alias("freq"))
            .orderBy("freq", "token"))
    table = pa.Table.from_batches(freq._collect_as_arrow())
    return table.column("token").combine_chunks() if table.num_rows else pa.array([], pa.string())


def _encode_batches(dictionary: pa.Array) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Map each record's string tokens to integer ids and sort them, vectorized per Arrow batch."""

    def encode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            toks = b.column("tokens")
            raw = toks.offsets.to_numpy().astype(np.int64)
            values = toks.values.slice(int(raw[0]), int(raw[-1] - raw[0]))
            ids = pc.index_in(values, value_set=dictionary).to_numpy(zero_copy_only=False).astype(np.int32)
            offsets = raw - raw[0]
            lengths = np.diff(offsets)
            row = np.repeat(np.arange(b.num_rows, dtype=np.int64), lengths)
            ids = ids[np.lexsort((ids, row))]  # sort tokens inside each record
            arr = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(ids, pa.int32()))
            yield pa.RecordBatch.from_arrays(
                [b.column("side"), b.column("id"), pa.array(lengths.astype(np.int32)), arr],
                ["side", "id", "length", "tokens"])

    return encode


def canonicalize(tok: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Integer tokens by ascending global frequency (ties by token text), records ordered by
    (length, side, id) with a dense ``rid``. Returns (records, lengths)."""
    dictionary = token_order(tok)
    rec = tok.select("side", "id", "tokens").mapInArrow(
        _encode_batches(dictionary), "side int, id long, length int, tokens array<int>").persist()
    lengths = rec.groupBy("length").agg(F.count("*").alias("count")).orderBy("length")
    # rid = records shorter than this one + rank within its length: dense and in length order.
    offsets = lengths.select(
        "length", (F.sum("count").over(Window.orderBy("length")) - F.col("count")).alias("offset"))
    rid = F.col("offset") + F.row_number().over(Window.partitionBy("length").orderBy("side", "id")) - 1
    records = rec.join(F.broadcast(offsets), "length").select(
        rid.cast("long").alias("rid"), "side", "id", "length", "tokens")
    return records, lengths


def plan_to_df(spark: SparkSession, plan: Plan) -> DataFrame:
    rows = [
        (u.unit, u.node, u.modgroup, list(u.index_lengths), list(u.probe_lengths), float(u.est_cost),
         int(u.est_ram_bytes), plan.n, plan.m, float(plan.theta), plan.sim, float(plan.deviation))
        for u in plan.units
    ]
    schema = ("unit int, node int, modgroup int, index_lengths array<int>, probe_lengths array<int>, "
              "est_cost double, est_ram_bytes long, n int, m int, theta double, similarity string, "
              "deviation double")
    return spark.createDataFrame(rows, schema)


def plan_from_rows(rows: list) -> Plan:
    if not rows:
        raise ValueError("the plan table has no units for this run: run the optimize stage first")
    rows = sorted(rows, key=lambda r: r["unit"])
    units = tuple(
        PlanUnit(unit=r["unit"], node=r["node"], modgroup=r["modgroup"], index_lengths=tuple(r["index_lengths"]),
                 probe_lengths=tuple(r["probe_lengths"]), est_cost=r["est_cost"], est_ram_bytes=r["est_ram_bytes"])
        for r in rows
    )
    r0 = rows[0]
    return Plan(theta=r0["theta"], sim=r0["similarity"], n=r0["n"], m=r0["m"], units=units,
                deviation=r0["deviation"])


def _partition_keys(spark: SparkSession, n: int) -> list[int]:
    """For each partition p in [0, n): a long key k with pmod(hash(k), n) == p, so that
    ``repartition(n, key)`` (Murmur3, seed 42, like ``hash()``) puts unit p alone in partition p."""
    need, start, found = set(range(n)), 0, {}
    while need:
        span = max(64, 8 * n)
        rows = (spark.range(start, start + span)
                .select("id", F.pmod(F.hash("id"), F.lit(n)).alias("p")).collect())
        for r in rows:
            if r["p"] in need:
                found[r["p"]] = r["id"]
                need.discard(r["p"])
        start += span
    return [found[p] for p in range(n)]


ROUTED_SCHEMA = "unit int, pkey long, rid long, side int, id long, tokens array<int>, is_index boolean, is_probe boolean"


def route_to_units(records: DataFrame, plan: Plan) -> DataFrame:
    """Replicate each record to exactly the units its length and rid % m require (never twice to
    one unit), then shuffle so that each unit is alone in its own partition."""
    spark = records.sparkSession
    keys = np.asarray(_partition_keys(spark, plan.n_units), dtype=np.int64)

    def route(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            if b.num_rows == 0:
                continue
            lengths = b.column("length").to_numpy(zero_copy_only=False)
            rids = b.column("rid").to_numpy(zero_copy_only=False)
            pos, unit, is_index, is_probe = plan.assign_units(lengths, rids)
            take = pa.array(pos)
            yield pa.RecordBatch.from_arrays(
                [pa.array(unit.astype(np.int32)), pa.array(keys[unit]), b.column("rid").take(take),
                 b.column("side").take(take), b.column("id").take(take), b.column("tokens").take(take),
                 pa.array(is_index), pa.array(is_probe)],
                ["unit", "pkey", "rid", "side", "id", "tokens", "is_index", "is_probe"],
            )

    routed = records.select("rid", "side", "id", "length", "tokens").mapInArrow(route, ROUTED_SCHEMA)
    return routed.repartition(max(1, plan.n_units), "pkey")


UNIT_RESULT_SCHEMA = (
    "row_type string, unit int, left_id long, right_id long, similarity double, "
    "records_indexed long, records_probed long, candidates long, verified long, results long, "
    "wall_seconds double, task_partition int"
)


_WARM: set[str] = set()


def _warm_up(sim: str) -> None:
    """Load the numba kernel once per Python worker, so unit wall times measure the join only."""
    if sim not in _WARM:
        one = np.array([0, 1], dtype=np.int32)
        ppjoin(one, np.array([0, 1, 2]), np.array([0, 1]), np.ones(2, bool), np.ones(2, bool), 1.0, sim)
        _WARM.add(sim)


def _unit_kernel(table: pa.Table, plan: Plan, rs: bool, partition: int) -> Iterator[pa.RecordBatch]:
    _warm_up(plan.sim)
    units = table.column("unit").to_numpy()
    for u in np.unique(units):
        t0 = time.perf_counter()
        sub = table.filter(pa.array(units == u))
        order = np.argsort(sub.column("rid").to_numpy(), kind="stable")
        sub = sub.take(pa.array(order))
        toks = sub.column("tokens").combine_chunks()
        raw = toks.offsets.to_numpy().astype(np.int64)
        flat = toks.values.to_numpy(zero_copy_only=False)[raw[0]: raw[-1]].astype(np.int32, copy=False)
        offsets = raw - raw[0]
        rids = sub.column("rid").to_numpy()
        sides = sub.column("side").to_numpy().astype(np.int8)
        ids = sub.column("id").to_numpy()
        left, right, sim, st = ppjoin(flat, offsets, rids, sub.column("is_index").to_numpy(zero_copy_only=False),
                                      sub.column("is_probe").to_numpy(zero_copy_only=False), plan.theta, plan.sim,
                                      side=sides if rs else None)
        li, ri = np.searchsorted(rids, left), np.searchsorted(rids, right)
        a, b = ids[li], ids[ri]
        if rs:  # (left input, right input)
            swap = sides[li] == 1
            a, b = np.where(swap, b, a), np.where(swap, a, b)
        else:  # self-join: each unordered pair once with left_id < right_id
            a, b = np.minimum(a, b), np.maximum(a, b)
        n = a.size
        yield pa.RecordBatch.from_pydict({
            "row_type": pa.array(["pair"] * n, pa.string()), "unit": pa.array(np.full(n, u, np.int32)),
            "left_id": pa.array(a, pa.int64()), "right_id": pa.array(b, pa.int64()),
            "similarity": pa.array(sim, pa.float64()),
            **{k: pa.nulls(n, pa.int64()) for k in ("records_indexed", "records_probed", "candidates",
                                                     "verified", "results")},
            "wall_seconds": pa.nulls(n, pa.float64()), "task_partition": pa.nulls(n, pa.int32()),
        })
        yield pa.RecordBatch.from_pydict({
            "row_type": ["stats"], "unit": pa.array([u], pa.int32()), "left_id": pa.nulls(1, pa.int64()),
            "right_id": pa.nulls(1, pa.int64()), "similarity": pa.nulls(1, pa.float64()),
            "records_indexed": [st.indexed], "records_probed": [st.probed], "candidates": [st.candidates],
            "verified": [st.verified], "results": [st.results],
            "wall_seconds": [time.perf_counter() - t0], "task_partition": pa.array([partition], pa.int32()),
        })


def join_units(routed: DataFrame, plan: Plan, rs: bool) -> DataFrame:
    """One local PPJoin per unit. Rows of ``UNIT_RESULT_SCHEMA``: pairs and one stats row per unit."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        bs = [b for b in batches if b.num_rows]
        if not bs:
            return
        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx else -1
        yield from _unit_kernel(pa.Table.from_batches(bs), plan, rs, part)

    return routed.mapInArrow(run, UNIT_RESULT_SCHEMA)
