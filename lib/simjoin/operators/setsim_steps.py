"""The set-similarity join's steps over an executor's partitions (Fier & Freytag, Sec. 2): each
step is written once, as Arrow functions a partition or a task runs, and handed to the run's
executor (``simjoin.runtime.executor``: the in-process executor's thread pool, or Spark's
``mapInArrow`` and shuffle). Both executors run the very same functions, so they give the same
records, the same plan and the same pairs (``tests/spark/test_ssj_executors.py``).

- :func:`input_rows`: (side, id, text) from the inputs at their pinned versions; a row appended
  since an incremental run's base gets side + ``APPENDED``.
- :func:`tokenize`: each partition tokenized once (``Partition.to_table``: its rows and their
  tokens as codes into its own dictionary), kept (``persist``) for the passes that follow: the
  profile (token counts, record lengths, ids; ``profile_partition``), which the driver sums into
  the global token order and each partition's dense rids, and the encode
  (``encode_partition``). Repeated ids keep the first good row by text.
- :func:`measure_slices`: the optimizer's slice costs, one scan.
- :func:`join_units`: every record to the plan units ``Plan.assign_units`` names, one PPJoin per
  unit (``join_unit``), as one shuffle of the executor.
- :func:`increment_blocks`, :func:`self_pairs`, :func:`appended_id_clash`: an incremental run's
  R-S blocks, its self-join's pairs once each, and the appended id that forces a full join.

No pyspark: ``ex`` is whichever executor runs the stage.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from simjoin.contracts import RowKind
from simjoin.core.setsim import Plan
from simjoin.core.unique import unique
from simjoin.io.rows import aggregate_table
from simjoin.log import get_logger
from simjoin.operators.setsim import (
    APPENDED,
    ENCODED_ARROW,
    MEASURE_ARROW,
    PROFILE_ARROW,
    RECORD_COLUMNS,
    TOKENIZED_ARROW,
    UNIT_ARROW,
    Partition,
    TokenProfile,
    check_input_types,
    encode_partition,
    join_task,
    measure_fractions,
    measure_partition,
    merge_measures,
    profile_partition,
    summarize_profile,
    tokenize_partition,
    with_duplicates,
)

__all__ = ["INPUT_ARROW", "RECORD_ARROW", "PAIR_ARROW", "check_input_schema", "input_rows",
           "Tokenized", "tokenize", "measure_slices", "join_units", "increment_blocks", "self_pairs",
           "appended_id_clash", "retag_full"]

log = get_logger("simjoin.ssj")

INPUT_ARROW = pa.schema([("side", pa.int32()), ("id", pa.int64()), ("text", pa.string())])
RECORD_ARROW = pa.schema([f for f in ENCODED_ARROW if f.name in RECORD_COLUMNS])
BAD_ARROW = pa.schema([("side", pa.int32()), ("id", pa.int64()), ("text", pa.string()), ("reason", pa.string())])
PAIR_ARROW = pa.schema([("left_id", pa.int64()), ("right_id", pa.int64()), ("similarity", pa.float64())])
ROUTED_ARROW = pa.schema([("rid", pa.int64()), ("side", pa.int32()), ("id", pa.int64()),
                          ("tokens", pa.list_(pa.int32())), ("is_index", pa.bool_()), ("is_probe", pa.bool_())])

#: Arrow's input types by the Spark type name the input rule (``check_input_types``) names.
_SPARK_NAMES = {pa.int64(): "bigint", pa.int32(): "int", pa.int16(): "smallint", pa.int8(): "tinyint",
                pa.string(): "string", pa.large_string(): "string", pa.string_view(): "string"}


def check_input_schema(schema: pa.Schema, id_col: str, text_col: str, what: str) -> None:
    """The input rule on an Arrow schema: an integer id column and a string text column."""
    check_input_types({f.name: _SPARK_NAMES.get(f.type, str(f.type)) for f in schema}, id_col, text_col, what)


def canonical(t: pa.Table) -> pa.Table:
    """A scanned partition (``id``, ``text``, ``side``, and ``_appended`` on an incremental run) as
    the (side, id, text) rows the tokenizer reads: an appended row's side + ``APPENDED``, the id as
    int64, the text as string. Done inside each task, so the scan itself runs no task function."""
    side = t.column("side").to_numpy().astype(np.int32)
    if "_appended" in t.column_names:
        side = np.where(np.asarray(t.column("_appended").to_numpy(zero_copy_only=False), bool),
                        side + APPENDED, side).astype(np.int32)
    return pa.table({"side": pa.array(side, pa.int32()), "id": t.column("id").cast(pa.int64()),
                     "text": t.column("text").cast(pa.string())}, schema=INPUT_ARROW)


def input_rows(ex: Any, sources: list[tuple[int, str, int, int | None]], id_col: str, text_col: str) -> Any:
    """The rows of every ``(side, path, version, appended_since)`` source, as scanned: ``id``,
    ``text``, ``side`` (and ``_appended``), read by :func:`canonical` in each task."""
    return ex.union([ex.scan(path, [id_col, text_col], version=version, appended_since=since,
                             rename={id_col: "id", text_col: "text"}, literals={"side": side})
                     for side, path, version, since in sources])


def _retag(t: pa.Table, part: int) -> pa.Table:
    return t.drop_columns(["_appended"]) if "_appended" in t.column_names else t


_SCANNED = pa.schema([("id", pa.int64()), ("text", pa.string()), ("side", pa.int32())])


def retag_full(ex: Any, rows: Any) -> Any:
    """The rows of an incremental run joined in full after all: no row is appended any more."""
    return ex.map(rows, _retag, _SCANNED)


def _partition(t: pa.Table, part: int, drops: dict[int, np.ndarray] | None = None) -> Partition | None:
    """Tokenized partition ``part``, with the good rows ``drops`` names marked as duplicates."""
    if t.num_rows == 0:
        return None
    p = Partition.from_table(t, part)
    if not drops or part not in drops:
        return p
    mask = np.zeros(p.rows.num_rows, bool)
    mask[drops[part]] = True
    return with_duplicates(p, mask)


def _profile_of(p: Partition | None) -> pa.Table:
    """A partition's profile rows, summed by key (what ``summarize_profile`` sums over partitions)."""
    if p is None:
        return PROFILE_ARROW.empty_table()
    return aggregate_table(pa.Table.from_batches(list(profile_partition(p)), PROFILE_ARROW), PROFILE_KEYS,
                           PROFILE_AGGS)


def _profile_part(t: pa.Table, part: int, drops: dict[int, np.ndarray] | None) -> pa.Table:
    return _profile_of(_partition(t, part, drops))


def _tokenize_profile_part(rows: pa.Table, part: int, qgram: int | None) -> tuple[pa.Table, pa.Table]:
    """A partition of scanned rows tokenized (``Partition.to_table``: what the later passes read),
    and its profile: one pass."""
    from simjoin.operators.setsim import keep_freed_memory

    keep_freed_memory()
    p = tokenize_partition(canonical(rows), qgram, part)
    return (TOKENIZED_ARROW.empty_table() if p is None else p.to_table()), _profile_of(p)


def _encode_part(t: pa.Table, part: int, drops: dict[int, np.ndarray] | None, dictionary: pa.Array,
                 rid_base: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]],
                 measure: Measure | None = None) -> tuple[pa.Table, ...]:
    """A tokenized partition's records (``RECORD_ARROW``) and bad rows (``BAD_ARROW``), and with
    ``measure`` its share of the slice measurements (``MEASURE_ARROW``)."""
    from simjoin.operators.setsim import keep_freed_memory

    keep_freed_memory()
    p = _partition(t, part, drops)
    if p is None:
        return RECORD_ARROW.empty_table(), BAD_ARROW.empty_table(), *([MEASURE_ARROW.empty_table()] if measure else [])
    enc = pa.Table.from_batches(list(encode_partition(p, dictionary, rid_base)), ENCODED_ARROW)
    good = pc.equal(enc.column("reason"), "")
    bad = enc.filter(pc.invert(good)).select(BAD_ARROW.names)
    records = enc.filter(good).select(list(RECORD_COLUMNS))
    if measure is None:
        return records, _bad_side(bad, part)
    took = _measure_part(records, part, *measure) if records.num_rows else MEASURE_ARROW.empty_table()
    return records, _bad_side(bad, part), took


def _key_task(side: np.ndarray, ids: np.ndarray, n: int) -> np.ndarray:
    """A task in [0, n) per (side, id): the same on every executor and in every process."""
    h = (ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ side.astype(np.uint64)
    return ((h >> np.uint64(33)) % np.uint64(max(1, n))).astype(np.int64)


_KEYS = pa.schema([("side", pa.int32()), ("id", pa.int64())])


def _good_keys(rows: pa.Table, part: int, n: int) -> tuple[np.ndarray, pa.Table]:
    p = _partition(rows, part)
    if p is None:
        return np.zeros(0, np.int64), _KEYS.empty_table()
    t = p.good_rows
    side, ids = t.column("side").to_numpy().astype(np.int32), t.column("id").to_numpy().astype(np.int64)
    return _key_task(side, ids, n), pa.table({"side": pa.array(side), "id": pa.array(ids)}, schema=_KEYS)


def _repeated_keys(t: pa.Table, task: int) -> pa.Table:
    side, ids = t.column("side").to_numpy(), t.column("id").to_numpy()
    order = np.lexsort((ids, side))
    s, i = side[order], ids[order]
    rep = (s[1:] == s[:-1]) & (i[1:] == i[:-1])
    if not rep.any():
        return _KEYS.empty_table()
    keys = np.unique(np.stack([s[1:][rep].astype(np.int64), i[1:][rep]], axis=1), axis=0)
    return pa.table({"side": pa.array(keys[:, 0].astype(np.int32)), "id": pa.array(keys[:, 1])}, schema=_KEYS)


_DUP_ROWS = pa.schema([("side", pa.int32()), ("id", pa.int64()), ("text", pa.string()), ("part", pa.int64()),
                       ("row", pa.int64())])


def _dup_rows(rows: pa.Table, part: int, keys: tuple[tuple[int, int], ...]) -> pa.Table:
    """This partition's good rows of the repeated keys, with where they are (part, row)."""
    p = _partition(rows, part)
    if p is None:
        return _DUP_ROWS.empty_table()
    g = np.flatnonzero(p.good)
    side = p.rows.column("side").to_numpy().astype(np.int64)[g]
    ids = p.good_rows.column("id").to_numpy().astype(np.int64)
    ks = np.array(keys, np.int64).reshape(-1, 2)
    hit = np.zeros(g.size, bool)
    for sd in unique(ks[:, 0]).tolist():
        hit |= (side == sd) & np.isin(ids, ks[ks[:, 0] == sd, 1])
    at = g[hit]
    return pa.table({"side": pa.array(side[hit].astype(np.int32)), "id": pa.array(ids[hit]),
                     "text": p.rows.column("text").take(pa.array(at)), "part": pa.array(np.full(at.size, part)),
                     "row": pa.array(at.astype(np.int64))}, schema=_DUP_ROWS)


def _duplicate_drops(ex: Any, rows: Any, keys: list[tuple[int, int]]) -> dict[int, np.ndarray]:
    """Per partition, the good rows to mark ``duplicate id``: of each repeated (side, id), every
    good row but the first by text."""
    got = ex.collect(ex.map(rows, functools.partial(_dup_rows, keys=tuple(sorted((int(s), int(i)) for s, i in keys))),
                            _DUP_ROWS))
    if not got.num_rows:
        return {}
    t = got.take(pc.sort_indices(got, [(c, "ascending") for c in ("side", "id", "text", "part", "row")]))
    s, i = t.column("side").to_numpy(), t.column("id").to_numpy()
    later = np.concatenate([[False], (s[1:] == s[:-1]) & (i[1:] == i[:-1])])
    part, row = t.column("part").to_numpy()[later], t.column("row").to_numpy()[later]
    return {int(p): row[part == p] for p in unique(part)}


#: what the slice measurements need (``measure_slices``): θ, the similarity, and the sampled
#: fractions of the prefix work and of the results (``measure_fractions``)
Measure = tuple[float, str, float, float]


@dataclass(frozen=True)
class Tokenized:
    """The tokenize step's result: the records (``RECORD_ARROW`` partitions) and the bad rows
    (``BAD_ARROW``: side, id, text, reason), persisted together by the encode pass (several steps
    read the records), and the profile. ``release`` the records after the tokenized partitions
    (on Spark, releasing a persisted frame drops what was persisted from it)."""

    records: Any
    bad: Any
    prof: TokenProfile
    #: the tokenized partitions (persisted: the repeated ids and the encode read them)
    tokenized: Any
    #: with ``measure``: each partition's slice measurements (``MEASURE_ARROW``), taken by the
    #: encode pass (``merge_measured`` turns them into the optimizer's costs)
    measures: Any
    #: tokenize (the profile pass), statistics (the repeated ids, when any), encode (the encode
    #: pass; on Spark, planned here and run by the first action on the records)
    seconds: dict[str, float]


#: how profile rows of one key add up (``summarize_profile`` reads the sums)
PROFILE_KEYS = ["kind", "side", "key", "token"]
PROFILE_AGGS = {"n": "sum", "aux": "max"}


def _profile(ex: Any, parts: Any, drops: dict[int, np.ndarray] | None) -> tuple[TokenProfile, bool]:
    got = ex.aggregate(ex.map(parts, functools.partial(_profile_part, drops=drops), PROFILE_ARROW),
                       PROFILE_KEYS, PROFILE_AGGS)
    return summarize_profile(got)


def tokenize(ex: Any, rows: Any, qgram: int | None, measure: tuple[float, str] | None = None) -> Tokenized:
    """(side, id, text) rows -> records with integer tokens in the global order (ascending
    frequency) and dense rids in length order, and the bad rows with their reason. ``measure``
    (θ, similarity): the encode pass also takes the optimizer's slice measurements (one pass over
    the records fewer than :func:`measure_slices`)."""
    import time

    t0 = time.perf_counter()
    # each partition tokenized once and profiled in the same pass, kept for the passes below
    parts, profiles = ex.persist_many(rows, functools.partial(_tokenize_profile_part, qgram=qgram),
                                      [TOKENIZED_ARROW, PROFILE_ARROW])
    prof, overlap = summarize_profile(aggregate_table(ex.collect(profiles), PROFILE_KEYS, PROFILE_AGGS))
    t1 = time.perf_counter()
    keys = prof.duplicates
    if overlap:  # two partitions' id intervals meet: the repeated ids by a shuffle of the good ids
        n = max(1, int(getattr(ex, "parallelism", 1)))
        got = ex.collect(ex.shuffle(parts, functools.partial(_good_keys, n=n), n, _repeated_keys, _KEYS))
        keys = list(zip(got.column("side").to_pylist(), got.column("id").to_pylist(), strict=True))
    drops: dict[int, np.ndarray] | None = None
    if keys:
        drops = _duplicate_drops(ex, parts, keys)
        log.info("ssj tokenize: %d rows repeat the id of a good row; keeping the first row of each (by text)",
                 sum(int(d.size) for d in drops.values()))
        prof, _ = _profile(ex, parts, drops)
        if prof.duplicates:  # every repeat was marked: a partition finding one is a bug
            raise AssertionError(f"ssj tokenize: ids still repeated after marking duplicates: {prof.duplicates[:5]}")
    t2 = time.perf_counter()
    # the records and the bad rows of each partition in one pass, kept (the next action runs it)
    m = (*measure, *measure_fractions(prof.good)) if measure is not None else None
    got = ex.persist_many(parts, functools.partial(_encode_part, drops=drops, dictionary=prof.dictionary,
                                                   rid_base=prof.rid_base, measure=m),
                          [RECORD_ARROW, BAD_ARROW, *([MEASURE_ARROW] if m else [])])
    seconds = {"tokenize": t1 - t0, "statistics": t2 - t1, "encode": time.perf_counter() - t2}
    return Tokenized(got[0], got[1], prof, parts, got[2] if m else None, seconds)


def _bad_side(b: pa.Table, part: int) -> pa.Table:
    """A quarantined row named by its input side (an appended row's side + APPENDED is dropped)."""
    return b.set_column(0, "side", pa.array(b.column("side").to_numpy().astype(np.int32) % APPENDED, pa.int32()))


def _measure_part(t: pa.Table, part: int, theta: float, sim: str, f_work: float, f_res: float) -> pa.Table:
    from simjoin.operators.setsim import keep_freed_memory

    keep_freed_memory()
    return pa.Table.from_batches(list(measure_partition(t.select(["rid", "side", "id", "tokens"]).to_batches(),
                                                        theta, sim, f_work, f_res)), MEASURE_ARROW)


def measure_slices(ex: Any, records: Any, theta: float, sim: str, rs: bool, n_records: int,
                   work_rows: int = 500_000, result_rows: int = 20_000
                   ) -> tuple[dict[int, float], float, dict[int, float], float]:
    """What each slice costs, from one scan of the records (``measure_partition`` per partition,
    ``merge_measures`` in the driver): (W, its sampled fraction, results, their fraction)."""
    f_work, f_res = measure_fractions(n_records, work_rows, result_rows)
    got = ex.collect(ex.map(records, functools.partial(_measure_part, theta=theta, sim=sim, f_work=f_work,
                                                       f_res=f_res), MEASURE_ARROW))
    return merge_measures(got, theta, sim, rs, f_work, f_res)


def merge_measured(measures: pa.Table, theta: float, sim: str, rs: bool, n_records: int
                   ) -> tuple[dict[int, float], float, dict[int, float], float]:
    """:func:`measure_slices` from the measurements the encode pass took (``Tokenized.measures``,
    collected)."""
    return merge_measures(measures, theta, sim, rs, *measure_fractions(n_records))


def _route_units(t: pa.Table, part: int, plan: Plan) -> tuple[np.ndarray, pa.Table]:
    """A partition's records to the units ``Plan.assign_units`` names (never twice to one unit)."""
    pos, unit, is_index, is_probe = plan.assign_units(t.column("length").to_numpy(zero_copy_only=False),
                                                      t.column("rid").to_numpy(zero_copy_only=False))
    take = pa.array(pos)
    out = pa.table({"rid": t.column("rid").take(take), "side": t.column("side").take(take),
                    "id": t.column("id").take(take), "tokens": t.column("tokens").take(take),
                    "is_index": pa.array(is_index), "is_probe": pa.array(is_probe)}, schema=ROUTED_ARROW)
    return unit, out


def join_units(ex: Any, records: Any, plan: Plan, rs: bool) -> tuple[Any, list[dict[str, Any]], Any]:
    """One PPJoin per plan unit (each record replicated to the units it needs, as one shuffle of
    the executor; the costliest units start first where the executor orders them): the pairs
    (``PAIR_ARROW`` partitions, persisted with the counters), each unit's counters (``UNIT_STATS``
    with ``unit``), and what to ``release`` when the pairs are written."""
    from simjoin.operators.setsim import unit_stats

    cost = sorted(plan.units, key=lambda u: -float(u.est_cost))
    res = ex.shuffle(records, functools.partial(_route_units, plan=plan), plan.n_units,
                     functools.partial(join_task, plan=plan, rs=rs), UNIT_ARROW, order=[u.unit for u in cost])
    pairs, got = ex.persist_many(res, _pairs_and_stats, [PAIR_ARROW, _UNIT_STATS])
    stats = [unit_stats(r) for r in ex.collect(got).to_pylist()]
    return pairs, sorted(stats, key=lambda s: s["unit"]), pairs


_UNIT_STATS = pa.schema([("unit", pa.int32()), ("stats", pa.string())])


def _pairs_and_stats(t: pa.Table, task: int) -> tuple[pa.Table, pa.Table]:
    """A join task's pairs (``PAIR_ARROW``) and its counters (``unit``, ``stats``)."""
    kind = t.column("kind")
    return (t.filter(pc.equal(kind, int(RowKind.PAIR))).select(PAIR_ARROW.names),
            t.filter(pc.equal(kind, int(RowKind.STATS))).select(_UNIT_STATS.names))


def _block(t: pa.Table, part: int, left: tuple[int, ...], right: tuple[int, ...]) -> pa.Table:
    side = t.column("side").to_numpy()
    out = []
    for sd, keep in ((0, left), (1, right)):
        b = t.filter(pa.array(np.isin(side, keep)))
        out.append(b.set_column(1, "side", pa.array(np.full(b.num_rows, sd, np.int32)))
                   .set_column(0, "rid", pa.array(b.column("rid").to_numpy() * 2 + sd, pa.int64())))
    return pa.concat_tables(out)


def increment_blocks(ex: Any, records: Any, rs: bool) -> list[Any]:
    """The R-S joins that find exactly the pairs with at least one appended record.

    Self-join: appended records (left) against all records (right); every pair of two appended
    records comes twice, and each appended record meets itself (:func:`self_pairs` cleans both
    up). R-S join: appended left against all right, then earlier left against appended right. A
    record in both sides of a block gets rid ``2 rid + side``: still unique, still in length order."""
    specs: list[tuple[tuple[int, ...], tuple[int, ...]]]
    if not rs:
        specs = [((APPENDED,), (0, APPENDED))]
    else:
        specs = [((APPENDED,), (1, 1 + APPENDED)), ((0,), (1 + APPENDED,))]
    return [ex.map(records, functools.partial(_block, left=a, right=b), RECORD_ARROW) for a, b in specs]


def _pair_split(t: pa.Table, part: int, n: int) -> tuple[np.ndarray, pa.Table]:
    a, b = t.column("left_id").to_numpy(), t.column("right_id").to_numpy()
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    keep = a != b
    out = pa.table({"left_id": pa.array(lo[keep]), "right_id": pa.array(hi[keep]),
                    "similarity": t.column("similarity").filter(pa.array(keep))}, schema=PAIR_ARROW)
    return _key_task(lo[keep], hi[keep], n), out


def _unique_pairs(t: pa.Table, task: int) -> pa.Table:
    lo, hi = t.column("left_id").to_numpy(), t.column("right_id").to_numpy()
    order = np.lexsort((hi, lo))
    lo, hi, sim = lo[order], hi[order], t.column("similarity").to_numpy()[order]
    first = np.ones(lo.size, bool)
    first[1:] = (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])
    return pa.table({"left_id": pa.array(lo[first]), "right_id": pa.array(hi[first]),
                     "similarity": pa.array(sim[first])}, schema=PAIR_ARROW)


def self_pairs(ex: Any, pairs: Any) -> Any:
    """Pairs of an incremental self-join block as the self-join gives them: no record with itself,
    each unordered pair once, ``left_id < right_id``."""
    n = max(1, int(getattr(ex, "parallelism", 1)))
    return ex.shuffle(pairs, functools.partial(_pair_split, n=n), n, _unique_pairs, PAIR_ARROW)


_CLASH = pa.schema([("id", pa.int64())])
_ID_SIDE = pa.schema([("side", pa.int32()), ("id", pa.int64()), ("new", pa.bool_())])


def _id_split(t: pa.Table, part: int, n: int) -> tuple[np.ndarray, pa.Table]:
    side = t.column("side").to_numpy().astype(np.int32)
    ids = t.column("id").to_numpy().astype(np.int64)
    out = pa.table({"side": pa.array(side % APPENDED), "id": pa.array(ids), "new": pa.array(side >= APPENDED)},
                   schema=_ID_SIDE)
    return _key_task(side % APPENDED, ids, n), out


def _clashes(t: pa.Table, task: int) -> pa.Table:
    side, ids = t.column("side").to_numpy(), t.column("id").to_numpy()
    new = t.column("new").to_numpy(zero_copy_only=False)
    hits = [np.intersect1d(ids[(side == s) & new], ids[(side == s) & ~new]) for s in (0, 1)]
    return pa.table({"id": pa.array(np.concatenate(hits).astype(np.int64))}, schema=_CLASH)


def appended_id_clash(ex: Any, records: Any) -> int | None:
    """The smallest id an appended record shares with an earlier record of the same input, if any
    (then the run joins in full: which row is kept could change)."""
    n = max(1, int(getattr(ex, "parallelism", 1)))
    got = ex.collect(ex.shuffle(records, functools.partial(_id_split, n=n), n, _clashes, _CLASH))
    return int(pc.min(got.column("id")).as_py()) if got.num_rows else None


_WARMING: list[Any] = []


def warm_kernels(sim: str) -> None:
    """Load the later steps' numba kernels (the slice measurements, PPJoin, the row gather) from
    numba's cache in a background thread, once per process: a kernel's first call in a process
    costs 0.1-0.5 s of loading, mostly in LLVM without the GIL, so it overlaps the tokenize
    stage's work on the other core instead of adding to the optimize and join stages."""
    import threading

    if _WARMING:
        return

    def warm() -> None:
        from simjoin.core.setsim import make_plan
        from simjoin.operators.setsim import keep_freed_memory

        try:
            keep_freed_memory()
            toy = pa.table({"rid": pa.array([0, 1], pa.int64()), "side": pa.array([0, 0], pa.int32()),
                            "id": pa.array([1, 2], pa.int64()), "length": pa.array([2, 2], pa.int32()),
                            "tokens": pa.array([[0, 1], [0, 1]], pa.list_(pa.int32()))})
            merge_measures(_measure_part(toy, 0, 0.8, sim, 1.0, 1.0), 0.8, sim, False, 1.0, 1.0)
            plan = make_plan(np.array([2]), np.array([2]), 0.8, sim, n=1, m=1)
            join_task(_route_units(toy, 0, plan)[1], 0, plan, False)
        except Exception as e:  # only a warm-up: the steps load what they need themselves
            log.info("ssj: the kernels' warm-up failed (%s)", e)

    t = threading.Thread(target=warm, name="ssj-warm", daemon=True)
    _WARMING.append(t)
    t.start()


def warm_up() -> None:
    """A toy input through every ssj step's function, in this thread and process: the modules
    imported and the numba kernels loaded (from numba's cache) before a real task needs them. The
    Spark executors' Python daemon runs it once before it forks its workers
    (``simjoin.spark.worker_daemon``)."""
    from simjoin.core.setsim import SIMILARITIES, make_plan

    rows = pa.table({"side": pa.array([0, 0, 0], pa.int32()), "id": pa.array([1, 2, 3], pa.int64()),
                     "text": pa.array(["a b c", "a b d", "a b c"], pa.string())})
    tok, profile = _tokenize_profile_part(rows, 0, None)
    prof, _ = summarize_profile(profile)
    recs, _ = _encode_part(tok, 0, None, prof.dictionary, prof.rid_base)
    for sim in SIMILARITIES:
        merge_measures(_measure_part(recs, 0, 0.5, sim, 1.0, 1.0), 0.5, sim, False, 1.0, 1.0)
        plan = make_plan(np.array([3]), np.array([3]), 0.5, sim, n=1, m=1)
        join_task(_route_units(recs, 0, plan)[1], 0, plan, False)
