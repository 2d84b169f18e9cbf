"""The set-similarity join's in-process executor (issue 43): the stages of ``simjoin.spark.setsim``
without a JVM, for inputs that fit in this process.

Each stage runs the very per-partition functions a Spark task of the Spark path runs, on a thread
pool over Arrow slices of the input (its "partitions"): ``tokenize_partition`` and
``profile_partition`` (profile), ``encode_partition`` (encode), ``measure_partition`` (the
optimizer's slice costs), and ``join_unit`` per plan unit. Only the driver's part differs: the
profile rows are summed with Arrow's group-by instead of a Spark aggregation, and a unit's records
are gathered from the records in memory instead of a shuffle. So both paths give the same records,
the same plan and the same pairs (``tests/spark/test_ssj_executors.py``). The numba kernels release
the GIL; Arrow compute and numpy's large operations do too.

Delta is read and written with ``deltalake`` (``simjoin.spark.delta``'s Arrow functions).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from simjoin.core.setsim import Plan, gather_rows
from simjoin.log import get_logger
from simjoin.operators import setsim as O

__all__ = ["Tokenized", "tokenize", "measure_slices", "join_units", "slices", "threads", "read_input",
           "check_input_schema"]

log = get_logger("simjoin.ssj")
T = TypeVar("T")
R = TypeVar("R")

#: The rows of one in-process partition of the input (a Spark path partition is about this size too).
PARTITION_ROWS = 200_000


def threads() -> int:
    """Worker threads: one per core (the task slots of ``local[*]``)."""
    return max(1, os.cpu_count() or 1)


def slices(t: pa.Table, rows: int = PARTITION_ROWS, parts: int | None = None) -> list[pa.Table]:
    """``t`` cut into consecutive slices (zero-copy) of about ``rows`` rows, at least ``parts`` of
    them (default: one per thread) when ``t`` has that many rows."""
    n = t.num_rows
    k = max(1, -(-n // rows), min(n, parts if parts is not None else threads()))
    cuts = np.linspace(0, n, k + 1).astype(np.int64)
    return [t.slice(int(a), int(b - a)) for a, b in pairwise(cuts)] or [t]


def pool_map(fn: Callable[[T], R], items: Sequence[T], workers: int | None = None) -> list[R]:
    """``fn`` over ``items`` on a thread pool, results in order."""
    if len(items) <= 1 or (workers or threads()) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(min(len(items), workers or threads()), thread_name_prefix="ssj") as pool:
        return list(pool.map(fn, items))


#: Arrow's input types by the Spark type name the input rule (``setsim.check_input_types``) names.
_SPARK_NAMES = {pa.int64(): "bigint", pa.int32(): "int", pa.int16(): "smallint", pa.int8(): "tinyint",
                pa.string(): "string", pa.large_string(): "string", pa.string_view(): "string"}


def check_input_schema(schema: pa.Schema, id_col: str, text_col: str, what: str) -> None:
    """``check_input_columns`` on an Arrow schema: the same rule, the same message."""
    O.check_input_types({f.name: _SPARK_NAMES.get(f.type, str(f.type)) for f in schema}, id_col, text_col, what)


def read_input(local: str, version: int, id_col: str, text_col: str, side: int, what: str,
               appended_since: int | None = None) -> pa.Table:
    """(side, id, text) of the Delta table at ``local``, at ``version``, read with deltalake. With
    ``appended_since``, the rows in data files that version did not have get side + ``APPENDED``
    (as ``pins.appended`` tags them on the Spark path: exact when the commits since only appended)."""
    from deltalake import DeltaTable

    dt = DeltaTable(local, version=version)
    check_input_schema(pa.schema(dt.schema().to_arrow()), id_col, text_col, what)
    if appended_since is None:
        t = dt.to_pyarrow_table(columns=[id_col, text_col])
        sides = np.full(t.num_rows, side, np.int32)
    else:  # the files of version ``appended_since`` hold the old rows (the commits since only appended)
        from urllib.parse import unquote

        def names(t: DeltaTable) -> set[str]:
            return {unquote(f) for f in t.get_add_actions(flatten=True).column("path").to_pylist()}

        old, now = names(DeltaTable(local, version=appended_since)), names(dt)
        ds = dt.to_pyarrow_dataset()
        parts, flags = [], []
        for frag in ds.get_fragments():
            if frag.path not in now:  # a name this reader spells otherwise than the log: never guess
                raise RuntimeError(f"{what}: the data file {frag.path} is not named in the Delta log as read; "
                                   "run with --executor spark")
            got = frag.to_table(columns=[id_col, text_col])
            parts.append(got)
            flags.append(np.full(got.num_rows, frag.path not in old))
        t = (pa.concat_tables(parts) if parts else pa.schema(ds.schema).empty_table().select([id_col, text_col]))
        new = np.concatenate(flags) if flags else np.zeros(0, bool)
        sides = np.where(new, side + O.APPENDED, side).astype(np.int32)
    return pa.table({"side": pa.array(sides, pa.int32()), "id": t.column(id_col).cast(pa.int64()),
                     "text": t.column(text_col).cast(pa.string())})


@dataclass(frozen=True)
class Tokenized:
    """The tokenize stage's result: the records (``RECORD_COLUMNS``), the bad rows (side, id, text,
    reason) and the profile."""

    records: pa.Table
    bad: pa.Table
    prof: O.TokenProfile
    seconds: dict[str, float]  # tokenize, statistics (profile and its sum), encode


def _duplicate_drops(parts: list[Any]) -> list[np.ndarray]:
    """Per partition, the good rows to mark ``duplicate id``: of each (side, id) held by more than
    one good row, all but the first by text (``setsim.drop_duplicates``' rule)."""
    sides = np.concatenate([p.rows.column("side").to_numpy().astype(np.int64) for p in parts])
    ids = np.concatenate([p.rows.column("id").to_numpy(zero_copy_only=False) for p in parts])
    good = np.concatenate([p.good for p in parts])
    sizes = [p.rows.num_rows for p in parts]
    drops = [np.zeros(n, bool) for n in sizes]
    g = np.flatnonzero(good)
    if g.size < 2:
        return drops
    ids_g = ids[g].astype(np.int64)
    order = np.lexsort((ids_g, sides[g]))
    ks, ki = sides[g][order], ids_g[order]
    same = (ks[1:] == ks[:-1]) & (ki[1:] == ki[:-1])
    if not same.any():
        return drops
    rep = np.zeros(order.size, bool)
    rep[1:] |= same
    rep[:-1] |= same
    rows = g[order[rep]]  # every good row of a repeated key, in global row numbers
    text = pa.concat_arrays([p.rows.column("text").combine_chunks() for p in parts]).take(pa.array(rows))
    t = pa.table({"side": sides[rows], "id": ids[rows].astype(np.int64), "text": text, "row": rows})
    t = t.take(pc.sort_indices(t, [("side", "ascending"), ("id", "ascending"), ("text", "ascending")]))
    s, i = t.column("side").to_numpy(), t.column("id").to_numpy()
    later = np.concatenate([[False], (s[1:] == s[:-1]) & (i[1:] == i[:-1])])
    start = np.concatenate([[0], np.cumsum(sizes)])
    for r in t.column("row").to_numpy()[later]:
        k = int(np.searchsorted(start, r, side="right") - 1)
        drops[k][r - start[k]] = True
    return drops


_WARMING: list[Any] = []


def warm_kernels(sim: str) -> None:
    """Load the later stages' numba kernels (the optimizer's slice measurements, PPJoin, the row
    gather) from numba's cache in a background thread, once per process: a kernel's first call
    in a process costs 0.1-0.5 s of loading, mostly in LLVM without the GIL, so it overlaps the
    tokenize stage's work on the other core instead of adding to the optimize and join stages."""
    import threading

    if _WARMING:
        return

    def warm() -> None:
        from simjoin.core.setsim import make_plan

        try:
            O.keep_freed_memory()
            toy = pa.table({"rid": pa.array([0, 1], pa.int64()), "side": pa.array([0, 0], pa.int32()),
                            "id": pa.array([1, 2], pa.int64()), "length": pa.array([2, 2], pa.int32()),
                            "tokens": pa.array([[0, 1], [0, 1]], pa.list_(pa.int32()))})
            measure_slices(toy, 0.8, sim, False, 2)
            join_units(toy, make_plan(np.array([2]), np.array([2]), 0.8, sim, n=1, m=1), False)
        except Exception as e:  # only a warm-up: the stages load what they need themselves
            log.info("ssj: the kernels' warm-up failed (%s)", e)

    t = threading.Thread(target=warm, name="ssj-warm", daemon=True)
    _WARMING.append(t)
    t.start()


def tokenize(rows: pa.Table, qgram: int | None) -> Tokenized:
    """(side, id, text) rows -> records with integer tokens in the global order and dense rids,
    and the bad rows with their reason; what ``profile`` then ``encode`` give on Spark."""
    t0 = time.perf_counter()
    chunks = slices(rows)
    parts = [p for p in pool_map(lambda it: O.tokenize_partition(it[1], qgram, it[0]), list(enumerate(chunks)))
             if p is not None]
    t1 = time.perf_counter()
    if parts:
        drops = _duplicate_drops(parts)
        n_dup = int(sum(d.sum() for d in drops))
        if n_dup:
            log.info("ssj tokenize: %d rows repeat the id of a good row; keeping the first row of each", n_dup)
            parts = [O.with_duplicates(p, d) for p, d in zip(parts, drops)]
    got = [b for bs in pool_map(lambda p: list(O.profile_partition(p)), parts) for b in bs]
    prof, _ = O.summarize_profile(O.sum_profile_rows(pa.Table.from_batches(got, O.PROFILE_ARROW)))
    if prof.duplicates:  # every repeat was marked above: a partition finding one is a bug
        raise AssertionError(f"ssj tokenize: ids still repeated after marking duplicates: {prof.duplicates[:5]}")
    t2 = time.perf_counter()
    enc = [b for bs in pool_map(lambda p: list(O.encode_partition(p, prof.dictionary, prof.rid_base)), parts)
           for b in bs]
    table = pa.Table.from_batches(enc, O.ENCODED_ARROW)
    ok = pc.equal(table.column("reason"), "")
    records = table.filter(ok).select(list(O.RECORD_COLUMNS))
    bad = table.filter(pc.invert(ok)).select(["side", "id", "text", "reason"])
    # a quarantined row is named by its input side (an appended row's side + APPENDED is dropped)
    bad = bad.set_column(0, "side", pa.array(bad.column("side").to_numpy().astype(np.int32) % O.APPENDED,
                                             pa.int32()))
    t3 = time.perf_counter()
    log.info("ssj tokenize: %d rows in %d partitions: tokenized %.2fs, profiled %.2fs, encoded %.2fs",
             rows.num_rows, len(chunks), t1 - t0, t2 - t1, t3 - t2)
    return Tokenized(records, bad, prof, {"tokenize": t1 - t0, "statistics": t2 - t1, "encode": t3 - t2})


def measure_slices(records: pa.Table, theta: float, sim: str, rs: bool, n_records: int
                   ) -> tuple[dict[int, float], float, dict[int, float], float]:
    """``setsim.measure_slices`` in process: the same per-partition scan, the same merge."""
    f_work, f_res = O.measure_fractions(n_records)
    cols = records.select(["rid", "side", "id", "tokens"])
    got = [b for bs in pool_map(lambda c: list(O.measure_partition(c.to_batches(), theta, sim, f_work, f_res)),
                                slices(cols)) for b in bs]
    return O.merge_measures(pa.Table.from_batches(got, O.MEASURE_ARROW), theta, sim, rs, f_work, f_res)


@dataclass(frozen=True)
class Joined:
    """Every unit's pairs (left_id, right_id, similarity) and its counters (``UNIT_STATS`` with ``unit``)."""

    pairs: pa.Table
    stats: list[dict[str, Any]]


def join_units(records: pa.Table, plan: Plan, rs: bool) -> Joined:
    """One local PPJoin per plan unit on the thread pool, the costliest units first: each record
    goes to the units ``Plan.assign_units`` names, as on the Spark path's shuffle. No records: no
    unit runs (as no Spark task does)."""
    empty = pa.table({"left_id": pa.array([], pa.int64()), "right_id": pa.array([], pa.int64()),
                      "similarity": pa.array([], pa.float64())})
    if records.num_rows == 0:
        return Joined(empty, [])
    flat, offsets = O.token_csr(records.column("tokens"))
    rids = records.column("rid").to_numpy()
    order = np.argsort(rids, kind="stable")
    if not (order == np.arange(order.size)).all():
        flat, offsets = gather_rows(flat, offsets, order)
    rids = rids[order]
    lengths = records.column("length").to_numpy()[order]
    ids = records.column("id").to_numpy()[order]
    sides = records.column("side").to_numpy().astype(np.int8)[order]
    pos, unit, is_index, is_probe = plan.assign_units(lengths, rids)
    by_unit = np.argsort(unit, kind="stable")  # positions stay in rid order within a unit
    cuts = np.flatnonzero(np.diff(unit[by_unit])) + 1
    groups = {int(unit[g[0]]): g for g in np.split(by_unit, cuts) if g.size}
    cost = {u.unit: float(u.est_cost) for u in plan.units}
    todo = sorted(groups, key=lambda u: -cost.get(u, 0.0))
    # a unit's task slot: its place in the cost order over the threads, never which thread took it
    # (that varies from run to run; a retried run's stats table must equal a clean run's)
    slot_of = {u: k % threads() for k, u in enumerate(todo)}

    def run(u: int) -> tuple[int, Any]:
        slot = slot_of[u]
        g = groups[u]
        p = pos[g]
        f, o = gather_rows(flat, offsets, p)
        rec = O.UnitRecords(f, o, rids[p], ids[p], sides[p], is_index[g], is_probe[g])
        return u, O.join_unit(rec, plan, rs, slot)

    done = dict(pool_map(run, todo))
    stats, cols = [], []
    for u in sorted(done):
        a, b, sim, counters = done[u]
        stats.append({"unit": u, **counters})
        cols.append((a, b, sim))
    if not cols:
        return Joined(empty, stats)
    return Joined(pa.table({"left_id": pa.array(np.concatenate([c[0] for c in cols]), pa.int64()),
                            "right_id": pa.array(np.concatenate([c[1] for c in cols]), pa.int64()),
                            "similarity": pa.array(np.concatenate([c[2] for c in cols]), pa.float64())}), stats)


def appended_id_clash(records: pa.Table) -> int | None:
    """``setsim.appended_id_clash`` on the records: an id an appended record shares with an earlier
    record of the same input, if any."""
    side = records.column("side").to_numpy()
    ids = records.column("id").to_numpy()
    for s in (0, 1):
        new, old = ids[side == s + O.APPENDED], ids[side == s]
        hit = np.intersect1d(new, old)
        if hit.size:
            return int(hit[0])
    return None


def increment_blocks(records: pa.Table, rs: bool) -> list[pa.Table]:
    """``setsim.increment_blocks`` on Arrow records: the R-S joins that find exactly the pairs with
    an appended record, a record in both sides of a block with rid ``2 rid + side``."""
    side = records.column("side").to_numpy()

    def block(left: np.ndarray, right: np.ndarray) -> pa.Table:
        parts = []
        for sd, mask in ((0, left), (1, right)):
            t = records.filter(pa.array(mask))
            parts.append(t.set_column(1, "side", pa.array(np.full(t.num_rows, sd, np.int32)))
                         .set_column(0, "rid", pa.array(t.column("rid").to_numpy() * 2 + sd, pa.int64())))
        return pa.concat_tables(parts)

    if not rs:
        return [block(side == O.APPENDED, np.ones(side.size, bool))]
    return [block(side == O.APPENDED, np.isin(side, (1, 1 + O.APPENDED))), block(side == 0, side == 1 + O.APPENDED)]


def self_pairs(pairs: pa.Table) -> pa.Table:
    """``setsim.self_pairs`` on Arrow pairs: no record with itself, each unordered pair once,
    ``left_id < right_id``."""
    a, b = pairs.column("left_id").to_numpy(), pairs.column("right_id").to_numpy()
    sim = pairs.column("similarity").to_numpy()
    keep = a != b
    lo, hi, sim = np.minimum(a, b)[keep], np.maximum(a, b)[keep], sim[keep]
    order = np.lexsort((hi, lo))
    lo, hi, sim = lo[order], hi[order], sim[order]
    first = np.ones(lo.size, bool)
    first[1:] = (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])
    return pa.table({"left_id": pa.array(lo[first], pa.int64()), "right_id": pa.array(hi[first], pa.int64()),
                     "similarity": pa.array(sim[first], pa.float64())})
