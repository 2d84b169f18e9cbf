"""The set-similarity join's stage functions on Arrow (Fier & Freytag), what every task of either
executor runs: tokenize a partition of (side, id, text) rows (``tokenize_partition``), profile it
(``profile_partition``: token counts, lengths, ids), encode it in the global token order with dense
rids (``encode_partition``), measure the optimizer's slice costs (``measure_partition``), and join
one plan unit (``join_unit``, the numba PPJoin of ``simjoin.core.setsim``). The drivers' halves
(``summarize_profile``, ``merge_measures``) turn the partitions' small rows into one answer.
No pyspark: ``jobs.ssj``'s stages run these through the run's executor (``simjoin.runtime.executor``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from simjoin.contracts import RowKind
from simjoin.core.setsim import Plan, PlanUnit, gather_rows, ppjoin
from simjoin.core.unique import unique
from simjoin.operators.tokenizer import sort_within, token_codes


def check_input_types(types: dict[str, str], id_col: str, text_col: str, what: str) -> None:
    """The input rule on column -> Spark type name (``bigint``, ``string``...), for either path."""
    for col, allowed in ((id_col, ("bigint", "int", "smallint", "tinyint")), (text_col, ("string",))):
        if col not in types:
            raise ValueError(f"{what}: column {col!r} not found; allowed: one of {sorted(types)}")
        if types[col] not in allowed:
            raise ValueError(f"{what}: column {col!r} has type {types[col]}; allowed: {', '.join(allowed)}")


#: Side offset of a record appended since an incremental run's base: side 2 = an appended left
#: record, 3 = an appended right record (``jobs.ssj.increment``).
APPENDED = 2


def _reasons(rules: list[tuple[pa.Array, str]], n: int) -> pa.Array:
    """Every broken rule's reason, '; '-joined; '' for a good row (as ``quarantine.split_quarantine`` writes it)."""
    reason = pa.array([""] * n, pa.string())
    for bad, why in rules:
        bad = pc.fill_null(bad, False)
        joined = pc.if_else(pc.equal(reason, ""), pa.scalar(why),
                            pc.binary_join_element_wise(reason, pa.scalar(why), "; "))
        reason = pc.if_else(bad, joined, reason)
    return reason


def row_reasons(ids: pa.Array, text: pa.Array, n_tokens: np.ndarray) -> pa.Array:
    """Each row's reason ('' for a good row): null id, null text, empty text, text without tokens."""
    has_text = pc.invert(pc.is_null(text))
    empty = pc.and_(has_text, pc.equal(pc.utf8_trim_whitespace(pc.fill_null(text, "")), ""))
    no_tokens = pc.and_(pc.and_(has_text, pc.invert(empty)), pa.array(n_tokens == 0))
    return _reasons([(pc.is_null(ids), "null id"), (pc.is_null(text), "null text"), (empty, "empty text"),
                     (no_tokens, "no tokens")], len(text))


@dataclass(frozen=True)
class Partition:
    """One input partition, tokenized as a whole: every row (side, id, text, reason), and the good
    rows' tokens as codes into a dictionary of this partition: good row k's tokens are
    ``dictionary[codes[offsets[k]:offsets[k + 1]]]``."""

    part: int
    rows: pa.Table
    good: np.ndarray  # bool per row
    offsets: np.ndarray  # int64, one more than the good rows
    dictionary: pa.Array
    codes: np.ndarray  # int32

    @property
    def good_rows(self) -> pa.Table:
        return self.rows if self.good.all() else self.rows.filter(pa.array(self.good))

    def to_table(self) -> pa.Table:
        """The partition as one Arrow table (``TOKENIZED_ARROW``): its rows, and each row's tokens
        as a list of codes into this partition's dictionary (a bad row's: empty). What the
        tokenizer keeps between its passes on either executor."""
        lengths = np.zeros(self.rows.num_rows, np.int64)
        lengths[self.good] = np.diff(self.offsets)
        off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        values = pa.DictionaryArray.from_arrays(pa.array(self.codes, pa.int32()), self.dictionary)
        tokens = pa.ListArray.from_arrays(pa.array(off), values)
        return conform_rows(self.rows).append_column("tokens", tokens)

    @staticmethod
    def from_table(t: pa.Table, part: int) -> Partition:
        """:meth:`to_table` read back (``part``: its number)."""
        t = t.combine_chunks()
        col = t.column("tokens")
        tokens = col.chunk(0) if col.num_chunks else pa.array([], TOKENIZED_ARROW.field("tokens").type)
        raw = tokens.offsets.to_numpy()
        values = tokens.values
        codes = values.indices.to_numpy(zero_copy_only=False)[raw[0]:raw[-1]].astype(np.int32)
        good = pc.equal(t.column("reason"), "").to_numpy(zero_copy_only=False)
        lengths = np.diff(raw)[good]
        off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return Partition(part, t.drop_columns(["tokens"]), good, off, values.dictionary, codes)


#: A tokenized partition (``Partition.to_table``)
TOKENIZED_ARROW = pa.schema([("side", pa.int32()), ("id", pa.int64()), ("text", pa.string()), ("reason", pa.string()),
                             ("tokens", pa.list_(pa.dictionary(pa.int32(), pa.string())))])


def conform_rows(rows: pa.Table) -> pa.Table:
    """A partition's rows as ``TOKENIZED_ARROW`` has them (side, id, text, reason)."""
    return pa.table({f.name: rows.column(f.name).cast(f.type) for f in TOKENIZED_ARROW if f.name != "tokens"})


def _partition(rows: pa.Table, offsets: np.ndarray, dictionary: pa.Array, codes: np.ndarray,
               part: int) -> Partition:
    """The view of one partition from every row's tokens (codes) and reason: only good rows keep tokens.
    ``part``: its number (default: the Spark task's partition, 0 outside a task)."""
    good = pc.equal(rows.column("reason"), "").to_numpy(zero_copy_only=False)
    lengths = np.diff(offsets)
    if not good.all():
        codes = codes[np.repeat(good, lengths)]
        lengths = lengths[good]
    off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return Partition(part, rows, good, off, dictionary, codes)


def from_text(batches: Iterator[pa.RecordBatch], qgram: int | None, part: int) -> Partition | None:
    """(side, id, text) batches of one partition, tokenized here as a whole (``token_codes``)."""
    bs = [b for b in batches if b.num_rows]
    if not bs:
        return None
    t = pa.Table.from_batches(bs).combine_chunks()
    text = t.column("text").chunk(0) if t.column("text").num_chunks else pa.array([], pa.string())
    offsets, dictionary, codes = token_codes(text, qgram)
    reason = row_reasons(t.column("id"), text, np.diff(offsets))
    return _partition(t.select(["side", "id", "text"]).append_column("reason", reason), offsets, dictionary, codes,
                      part)


def tokenize_partition(rows: pa.Table, qgram: int | None, part: int) -> Partition | None:
    """One partition of (side, id, text) rows tokenized (what a Spark task of ``profile`` and ``encode``
    does with its partition): the in-process executor's unit of tokenizing."""
    return from_text(iter(rows.to_batches()), qgram, part)


def with_duplicates(p: Partition, drop: np.ndarray) -> Partition:
    """``p`` with the good rows where ``drop`` (bool per row) holds marked ``duplicate id <id>``."""
    if not drop.any():
        return p
    ids = p.rows.column("id")
    why = pc.binary_join_element_wise(pa.scalar("duplicate id "), pc.cast(ids, pa.string()), "")
    reason = pc.if_else(pa.array(drop), why, p.rows.column("reason"))
    rows = p.rows.set_column(p.rows.column_names.index("reason"), "reason", reason)
    lengths = np.diff(p.offsets)
    keep = ~drop[p.good]
    codes = p.codes[np.repeat(keep, lengths)]
    off = np.concatenate([[0], np.cumsum(lengths[keep])]).astype(np.int64)
    return Partition(p.part, rows, p.good & ~drop, off, p.dictionary, codes)


# One shuffle profiles the rows: global token frequencies, record lengths per input partition
# (for dense rids without a global sort), bad-row counts, and the ids: each partition reports its
# repeated (side, id) keys and up to 64 id intervals per side. Only when the intervals of two
# partitions overlap do the ids themselves get shuffled, in a second job.


PROFILE_ARROW = pa.schema([("kind", pa.int32()), ("side", pa.int32()), ("key", pa.int64()), ("token", pa.string()),
                            ("n", pa.int64()), ("aux", pa.int64())])


_K_TOKEN, _K_LENGTH, _K_ID, _K_BAD, _K_RANGE = 0, 1, 2, 3, 4


#: Intervals per partition and side that cover its ids (cut at the widest gaps).
ID_INTERVALS = 64


def id_intervals(ids: np.ndarray, k: int = ID_INTERVALS) -> tuple[np.ndarray, np.ndarray]:
    """Up to ``k`` disjoint intervals [lo, hi] that cover the sorted ``ids``, cut at the k-1
    widest gaps. Two partitions whose intervals do not meet share no id, so repeated ids can be
    found inside each partition; a partition read from several files (id blocks) stays a few
    intervals, not one range that spans the others."""
    gaps = np.diff(ids)
    cut = np.flatnonzero(gaps > 1)
    if k <= 1:
        cut = cut[:0]
    elif cut.size > k - 1:
        cut = np.sort(cut[np.argpartition(gaps[cut], cut.size - (k - 1))[cut.size - (k - 1):]])
    return ids[np.concatenate([[0], cut + 1])], ids[np.concatenate([cut, [ids.size - 1]])]


def _profile_rows(kind: int, side: Any = None, key: Any = None, token: Any = None, n: Any = None,
                  aux: Any = None) -> pa.RecordBatch:
    k = len(n)
    cols = [pa.array(np.full(k, kind, np.int32)), side, key, token, n, aux]
    return pa.RecordBatch.from_arrays(
        [pa.nulls(k, f.type) if c is None else pa.array(c, f.type) for c, f in zip(cols, PROFILE_ARROW)],
        schema=PROFILE_ARROW)


def profile_partition(p: Partition) -> Iterator[pa.RecordBatch]:
    """One tokenized partition's profile rows (``PROFILE_ARROW``): its bad-row count, token counts,
    record lengths, id intervals and repeated ids: what ``summarize_profile`` sums over partitions."""
    yield _profile_rows(_K_BAD, n=[int(p.good.size - np.count_nonzero(p.good))])
    if not p.good.any():
        return
    counts = np.bincount(p.codes, minlength=len(p.dictionary))
    seen = np.flatnonzero(counts)
    yield _profile_rows(_K_TOKEN, token=p.dictionary.take(pa.array(seen)), n=counts[seen].astype(np.int64))
    ls, cs = np.unique(np.diff(p.offsets), return_counts=True)
    yield _profile_rows(_K_LENGTH, key=(np.int64(p.part) << 32) + ls.astype(np.int64), n=cs.astype(np.int64))
    t = p.good_rows
    side = t.column("side").to_numpy().astype(np.int32)
    ids = t.column("id").to_numpy().astype(np.int64)
    for sd in unique(side):
        v = np.sort(ids[side == sd])
        lo, hi = id_intervals(v)
        yield _profile_rows(_K_RANGE, side=np.full(lo.size, sd, np.int32),
                            key=np.int64(p.part) * ID_INTERVALS + np.arange(lo.size), n=lo, aux=hi)
        rep = v[1:][v[1:] == v[:-1]]
        if rep.size:
            u, c = np.unique(rep, return_counts=True)
            yield _profile_rows(_K_ID, side=np.full(u.size, sd, np.int32), key=u, n=c + 1)


@dataclass(frozen=True)
class TokenProfile:
    """What one pass over the rows tells the driver."""

    dictionary: pa.Array  # string tokens; position = integer token id (ascending frequency, ties by text)
    lengths: np.ndarray  # distinct record lengths, ascending
    counts: np.ndarray  # records per length
    # partition -> (its lengths, the first rid of each there, its records of each)
    rid_base: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]
    duplicates: list[tuple[int, int]]  # (side, id) keys held by more than one good row
    good: int
    bad: int


def summarize_profile(got: pa.Table) -> tuple[TokenProfile, bool]:
    """The driver's half of ``profile``: the summed profile rows -> the profile, and whether two
    partitions' id intervals of one side meet (then ``duplicates`` holds only the repeats found
    inside partitions, and the caller must look across them)."""
    t = (pa.Table.from_arrays([got.column(f.name).cast(f.type) for f in PROFILE_ARROW], schema=PROFILE_ARROW)
         if got.num_rows else PROFILE_ARROW.empty_table())
    kind = t.column("kind").to_numpy()
    tok = t.filter(pa.array(kind == _K_TOKEN))
    tok = tok.take(pc.sort_indices(tok, [("n", "ascending"), ("token", "ascending")]))
    dictionary = tok.column("token").combine_chunks() if tok.num_rows else pa.array([], pa.string())
    ln = t.filter(pa.array(kind == _K_LENGTH))
    key = ln.column("key").to_numpy().astype(np.int64)
    n = ln.column("n").to_numpy().astype(np.int64)
    part, length = key >> 32, key & 0xFFFFFFFF
    lengths, inv = np.unique(length, return_inverse=True)
    counts = np.bincount(inv, weights=n, minlength=lengths.size).astype(np.int64)
    # rid = records shorter than this one + records of its length in earlier partitions + rank inside
    # its partition: dense and in length order.
    start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    order = np.lexsort((part, length))
    base: dict[int, tuple[list[int], list[int], list[int]]] = {}
    seen = np.zeros(lengths.size, np.int64)
    for i in order:
        li = inv[i]
        b = base.setdefault(int(part[i]), ([], [], []))
        b[0].append(int(length[i]))
        b[1].append(int(start[li] + seen[li]))
        b[2].append(int(n[i]))
        seen[li] += n[i]
    rid_base = {p: (np.array(a, np.int64), np.array(c, np.int64), np.array(k, np.int64))
                for p, (a, c, k) in base.items()}
    rng = t.filter(pa.array(kind == _K_RANGE))
    overlap = ranges_overlap(rng.column("side").to_numpy(), rng.column("n").to_numpy(), rng.column("aux").to_numpy())
    dup = t.filter(pa.array(kind == _K_ID))
    duplicates = list(zip(dup.column("side").to_pylist(), dup.column("key").to_pylist()))
    bad = int(t.filter(pa.array(kind == _K_BAD)).column("n").to_numpy().sum())
    return TokenProfile(dictionary, lengths.astype(np.int64), counts, rid_base, duplicates, int(counts.sum()),
                        bad), overlap


def ranges_overlap(side: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> bool:
    """Whether two partitions' id ranges [lo, hi] of the same side share a value."""
    for sd in unique(side):
        m = side == sd
        order = np.argsort(lo[m], kind="stable")
        a, b = lo[m][order], hi[m][order]
        if a.size > 1 and (a[1:] <= np.maximum.accumulate(b)[:-1]).any():
            return True
    return False


RECORD_COLUMNS = ("rid", "side", "id", "length", "tokens")


ENCODED_ARROW = pa.schema([("rid", pa.int64()), ("side", pa.int32()), ("id", pa.int64()), ("length", pa.int32()),
                            ("tokens", pa.list_(pa.int32())), ("text", pa.string()), ("reason", pa.string())])


# Kept at module level, as every function that calls a numba kernel: cloudpickle sends a closure
# by value with the globals it names, and a numba dispatcher pickled that way is rebuilt without
# its on-disk cache, so each Python worker would compile it again (seconds per worker).
def encode_partition(p: Partition, dictionary: pa.Array,
                      rid_base: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> Iterator[pa.RecordBatch]:
    """One partition's records: tokens mapped to integer ids (their global order) and sorted inside
    each record, records by (length, side, id) with the rids the profile gave this partition; and its
    bad rows. All vectorized over the whole partition."""
    bad = ~p.good
    if bad.any():
        b = p.rows.filter(pa.array(bad))
        k = b.num_rows
        yield pa.RecordBatch.from_arrays(
            [pa.nulls(k, pa.int64()), b.column("side").combine_chunks().cast(pa.int32()),
             b.column("id").combine_chunks().cast(pa.int64()), pa.nulls(k, pa.int32()),
             pa.nulls(k, pa.list_(pa.int32())), b.column("text").combine_chunks(),
             b.column("reason").combine_chunks()], schema=ENCODED_ARROW)
    if not p.good.any():
        return
    t = p.good_rows
    to_global = pc.fill_null(pc.index_in(p.dictionary, value_set=dictionary), -1)  # -1: a bad row's token only
    ids = to_global.to_numpy(zero_copy_only=False).astype(np.int32)[p.codes]
    lengths = np.diff(p.offsets)
    side = t.column("side").to_numpy().astype(np.int32)
    rec_id = t.column("id").to_numpy().astype(np.int64)
    order = np.lexsort((rec_id, side, lengths))  # records by (length, side, id)
    sl = lengths[order]
    ul, uc = np.unique(sl, return_counts=True)
    bl, bb, bc = rid_base.get(p.part, (np.zeros(0, np.int64),) * 3)
    if not (np.array_equal(ul, bl) and np.array_equal(uc, bc)):
        raise RuntimeError(f"ssj encode: input partition {p.part} holds other records than when it was "
                           "profiled (the input's partitioning changed between two reads of one version); "
                           "run again")
    first = np.searchsorted(sl, sl, side="left")
    rid = bb[np.searchsorted(bl, sl)] + (np.arange(sl.size) - first)
    starts = p.offsets[:-1][order]
    gather = (np.repeat(starts - np.concatenate([[0], np.cumsum(sl)[:-1]]), sl)
              + np.arange(int(sl.sum())))
    new_off = np.concatenate([[0], np.cumsum(sl)]).astype(np.int64)
    flat = ids[gather]
    sort_within(new_off, flat)  # tokens in ascending global id inside each record
    n = sl.size
    yield pa.RecordBatch.from_arrays(
        [pa.array(rid.astype(np.int64)), pa.array(side[order]), pa.array(rec_id[order]),
         pa.array(sl.astype(np.int32)),
         pa.ListArray.from_arrays(pa.array(new_off.astype(np.int32)), pa.array(flat, pa.int32())),
         pa.nulls(n, pa.string()), pa.array(np.full(n, ""), pa.string())], schema=ENCODED_ARROW)


PLAN_SCHEMA = ("kind string, unit int, node int, modgroup int, index_lengths array<int>, probe_lengths array<int>, "
               "est_cost double, est_ram_bytes long, n int, m int, theta double, similarity string, "
               "deviation double, mod int, t int, mods array<int>, makespan double, verdict string, reason string")


def plan_rows(plan: Plan) -> list[tuple[Any, ...]]:
    """The plan table (``PLAN_SCHEMA``): one ``kind = unit`` row per unit (``mod`` is its node's modulo, ``reason`` why
    this plan), and one ``kind = candidate`` row per (n, m) the search tried, with its verdict
    (chosen, kept or pruned) and the reason."""
    def num(x: float) -> float | None:
        return None if x == float("inf") else float(x)

    rows: list[tuple[Any, ...]] = [
        ("unit", u.unit, u.node, u.modgroup, list(u.index_lengths), list(u.probe_lengths), float(u.est_cost),
         int(u.est_ram_bytes), plan.n, plan.m, float(plan.theta), plan.sim, num(plan.deviation), plan.unit_mod(u),
         None, None, None, None, plan.reason)
        for u in plan.units
    ]
    rows += [
        ("candidate", None, None, None, None, None, None, int(c.est_ram_bytes), c.n, c.m, float(plan.theta),
         plan.sim, num(c.deviation), None, c.t, list(c.mods), num(c.makespan), c.verdict, c.reason)
        for c in plan.search
    ]
    return rows


def plan_from_rows(rows: list) -> Plan:
    """A plan from its table's rows (Spark Rows or dicts)."""
    rows = [r if isinstance(r, dict) else r.asDict() for r in rows]
    rows = [r for r in rows if (r.get("kind") or "unit") == "unit"]
    if not rows:
        raise ValueError("the plan table has no units for this run: run the optimize stage first")
    rows = sorted(rows, key=lambda r: r["unit"])
    r0 = rows[0]
    m = r0["m"]
    units = tuple(
        PlanUnit(unit=r["unit"], node=r["node"], modgroup=r["modgroup"], index_lengths=tuple(r["index_lengths"]),
                 probe_lengths=tuple(r["probe_lengths"]), est_cost=r["est_cost"], est_ram_bytes=r["est_ram_bytes"],
                 mod=0 if (r.get("mod") or m) == m else r["mod"])
        for r in rows
    )
    dev = r0["deviation"]
    return Plan(theta=r0["theta"], sim=r0["similarity"], n=r0["n"], m=m, units=units,
                deviation=float("inf") if dev is None else dev, reason=r0.get("reason") or "")


def pack(data: pa.RecordBatch | pa.Table) -> pa.Buffer:
    """Arrow data as one IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as w:
        w.write(data)
    return sink.getvalue()


def binary(blobs: list[pa.Buffer]) -> pa.BinaryArray:
    """Buffers as one binary array (one batch's worth: far below 2 GiB)."""
    offsets = np.concatenate([[0], np.cumsum([bl.size for bl in blobs])]).astype(np.int32)
    data = np.concatenate([np.frombuffer(bl, dtype=np.uint8) for bl in blobs]) if blobs else np.zeros(0, np.uint8)
    return pa.BinaryArray.from_buffers(pa.binary(), len(blobs), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def unpacked(blob: pa.BinaryScalar) -> pa.Table:
    """A ``pack``ed value, read without a copy."""
    return pa.ipc.open_stream(blob.as_buffer()).read_all()


def token_csr(tokens: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """A ``list<int>`` column as (flat int32 tokens, int64 offsets from 0): record k is
    ``flat[offsets[k]:offsets[k + 1]]``. Chunks are joined by numpy (one copy, in memory numpy
    maps with huge pages), not by Arrow's allocator."""
    chunks = tokens.chunks if isinstance(tokens, pa.ChunkedArray) else [tokens]
    flats, lengths = [], []
    for c in chunks:
        raw = c.offsets.to_numpy()
        flats.append(c.values.to_numpy(zero_copy_only=False)[raw[0]: raw[-1]])
        lengths.append(np.diff(raw))
    if not flats:
        return np.zeros(0, np.int32), np.zeros(1, np.int64)
    flat = (flats[0] if len(flats) == 1 else np.concatenate(flats)).astype(np.int32, copy=False)
    offsets = np.zeros(sum(x.size for x in lengths) + 1, dtype=np.int64)
    np.cumsum(np.concatenate(lengths), out=offsets[1:])
    return flat, offsets


UNIT_STATS = ("records_indexed", "records_probed", "candidates", "verified", "results", "wall_seconds",
              "task_partition", "cpu_seconds")


def unit_stats(row: Any) -> dict[str, Any]:
    """The counters of a ``RowKind.STATS`` row of :func:`join_units`, with its ``unit``."""
    got = json.loads(row["stats"])
    return {"unit": int(row["unit"]), **{k: got[k] for k in UNIT_STATS}}


_WARM: set[str] = set()


#: glibc's mallopt parameters, and what a Python worker running units sets them to
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


UNIT_MMAP_THRESHOLD = 32 * 2**20


UNIT_TRIM_THRESHOLD = 256 * 2**20


UNIT_PREFAULT_BYTES, UNIT_PREFAULT_BLOCK = 192 * 2**20, 8 * 2**20


_KEPT: list[bool] = []


def keep_freed_memory() -> bool:
    """Let this process reuse the memory its units free, instead of faulting in fresh pages.

    glibc gives a freed block above its mmap threshold back to the OS, and trims the heap's free
    top above its trim threshold. Both start low (128 KiB) and only grow as blocks are freed, so
    a Python worker's first units built their postings, candidate buffers and pairs (tens of MB)
    in fresh pages: a unit with a million pairs took 0.22 s of CPU first and 0.08 s once warm,
    the difference being page faults. With blocks under ``UNIT_MMAP_THRESHOLD`` taken from the
    heap, and up to ``UNIT_TRIM_THRESHOLD`` of free heap kept, the first unit costs about what
    the later ones do. The process also faults in ``UNIT_PREFAULT_BYTES`` of heap at once (in
    blocks under the mmap threshold, kept when freed): a fresh Python worker's units otherwise
    paid 10-15 thousand page faults each, 0.1-0.2 s at this VM's 7-20 µs per fault, which made a
    worker's first unit up to twice as slow as its later ones and decided the unit spread of
    short-record data. Every SSJ stage's Python function calls it first (once per process, about
    0.3 s here), so the faults are paid by whichever stage starts the worker, and each worker
    then keeps up to ``UNIT_TRIM_THRESHOLD`` of free heap. A no-op (False) where the C library
    is not glibc."""
    if not _KEPT:
        import ctypes
        import ctypes.util

        try:
            mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
            _KEPT.append(bool(mallopt(M_MMAP_THRESHOLD, UNIT_MMAP_THRESHOLD)
                              and mallopt(M_TRIM_THRESHOLD, UNIT_TRIM_THRESHOLD)))
            if _KEPT[0]:  # fault the heap in once, in blocks it keeps when they are freed
                n_blocks = UNIT_PREFAULT_BYTES // UNIT_PREFAULT_BLOCK
                blocks = [np.ones(UNIT_PREFAULT_BLOCK, np.uint8) for _ in range(n_blocks)]
                del blocks
        except (OSError, AttributeError):
            _KEPT.append(False)
    return _KEPT[0]


def _warm_up(sim: str) -> None:
    """Load the numba kernels once per Python worker, and keep its freed memory
    (:func:`keep_freed_memory`), so unit wall times measure the join only."""
    keep_freed_memory()
    if sim not in _WARM:
        one = np.array([0, 1], dtype=np.int32)
        ppjoin(one, np.array([0, 1, 2]), np.array([0, 1]), np.ones(2, bool), np.ones(2, bool), 1.0, sim)
        gather_rows(one, np.array([0, 1, 2]), np.array([1, 0]))
        _WARM.add(sim)


@dataclass(frozen=True)
class UnitRecords:
    """One unit's records in rid order: tokens as CSR (``flat[offsets[k]:offsets[k + 1]]``) and
    the per-record columns."""

    flat: np.ndarray
    offsets: np.ndarray
    rids: np.ndarray
    ids: np.ndarray
    sides: np.ndarray  # int8
    is_index: np.ndarray
    is_probe: np.ndarray

    def in_rid_order(self) -> UnitRecords:
        if self.rids.size < 2 or (np.diff(self.rids) > 0).all():
            return self
        order = np.argsort(self.rids, kind="stable")  # in numpy, not an Arrow take of the lists
        flat, offsets = gather_rows(self.flat, self.offsets, order)
        return UnitRecords(flat, offsets, *(a[order] for a in (self.rids, self.ids, self.sides, self.is_index,
                                                                 self.is_probe)))


def join_unit(rec: UnitRecords, plan: Plan, rs: bool, partition: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """One unit's local PPJoin, the task both executors run per unit: (left ids, right ids,
    similarities, its counters ``UNIT_STATS``). ``partition``: the task slot it ran in."""
    _warm_up(plan.sim)
    t0, c0 = time.perf_counter(), time.thread_time()
    rec = rec.in_rid_order()
    li, ri, sim, st = ppjoin(rec.flat, rec.offsets, rec.rids, rec.is_index, rec.is_probe, plan.theta, plan.sim,
                             side=rec.sides if rs else None, positions=True)
    a, b = rec.ids[li], rec.ids[ri]
    if rs:  # (left input, right input)
        swap = rec.sides[li] == 1
        a, b = np.where(swap, b, a), np.where(swap, a, b)
    else:  # self-join: each unordered pair once with left_id < right_id
        a, b = np.minimum(a, b), np.maximum(a, b)
    counters = {"records_indexed": int(st.indexed), "records_probed": int(st.probed),
                "candidates": int(st.candidates), "verified": int(st.verified), "results": int(st.results),
                "wall_seconds": time.perf_counter() - t0, "task_partition": int(partition),
                # CPU time: the unit's own work (its thread's), whatever else shares the cores (a
                # background gate, the other slot's unit in this process)
                "cpu_seconds": time.thread_time() - c0}
    return a, b, sim, counters


UNIT_ARROW = pa.schema([("kind", pa.int8()), ("unit", pa.int32()), ("left_id", pa.int64()),
                        ("right_id", pa.int64()), ("similarity", pa.float64()), ("stats", pa.string())])


def join_task(t: pa.Table, unit: int, plan: Plan, rs: bool) -> pa.Table:
    """One unit's task on either executor: its routed records (``rid, side, id, tokens, is_index,
    is_probe``) through ``join_unit``; its pairs, then its counters in one ``STATS`` row
    (``UNIT_ARROW``)."""
    t0, c0 = time.perf_counter(), time.thread_time()
    flat, offsets = token_csr(t.column("tokens"))
    rec = UnitRecords(flat, offsets, t.column("rid").to_numpy(), t.column("id").to_numpy(),
                      t.column("side").to_numpy().astype(np.int8),
                      t.column("is_index").to_numpy(zero_copy_only=False),
                      t.column("is_probe").to_numpy(zero_copy_only=False))
    a, b, sim, counters = join_unit(rec, plan, rs, unit)
    n = a.size
    # the unit's time includes reading its records and handing its pairs on
    counters = {**counters, "wall_seconds": time.perf_counter() - t0, "cpu_seconds": time.thread_time() - c0}
    return pa.table({"kind": pa.array(np.r_[np.full(n, int(RowKind.PAIR), np.int8), int(RowKind.STATS)], pa.int8()),
                     "unit": pa.array(np.full(n + 1, unit, np.int32)),
                     "left_id": pa.array(np.r_[a, 0], pa.int64()),
                     "right_id": pa.array(np.r_[b, 0], pa.int64()),
                     "similarity": pa.array(np.r_[sim, 0.0], pa.float64()),
                     "stats": pa.array([None] * n + [json.dumps(counters)], pa.string())}, schema=UNIT_ARROW)


MEASURE_ARROW = pa.schema([("counts", pa.binary()), ("sample", pa.binary())])


_COUNT_NAMES = ["token", "length", "side", "n_index", "n_probe"]


def measure_fractions(n_records: int, work_rows: int = 500_000, result_rows: int = 20_000) -> tuple[float, float]:
    """The sampled fractions of ``measure_slices``: of the prefix work, of the result pairs."""
    return min(1.0, work_rows / max(1, n_records)), min(1.0, result_rows / max(1, n_records))


def record_keys(ids: np.ndarray, sides: np.ndarray) -> np.ndarray:
    """What the optimizer's samples are drawn by: a record's (input side, id), never its rid, so the
    sample, the measured costs and so the plan do not depend on how the input was partitioned (the
    rids of equally long records do)."""
    return (np.asarray(ids, np.int64) << np.int64(1)) | (np.asarray(sides, np.int64) & np.int64(1))


def measure_partition(batches: Iterable[pa.RecordBatch], theta: float, sim: str, f_work: float, f_res: float
                      ) -> Iterator[pa.RecordBatch]:
    """One partition's share of ``measure_slices`` (both executors run it per partition of the
    records): its prefix counts and its sampled records, packed in one row of ``MEASURE_ARROW``."""
    from simjoin.core.setsim.work import prefix_counts, sample_mask, sum_prefix_counts

    counts, sampled, schema = [], [], None
    for b in batches:
        schema = b.schema
        if b.num_rows == 0:
            continue
        rid = record_keys(b.column("id").to_numpy(zero_copy_only=False),
                          b.column("side").to_numpy(zero_copy_only=False))
        w = sample_mask(rid, f_work)
        if w.any():
            sub = b if w.all() else b.filter(pa.array(w))
            flat, offsets = token_csr(sub.column("tokens"))
            counts.append(prefix_counts(flat, offsets, sub.column("side").to_numpy(zero_copy_only=False) % 2,
                                        theta, sim))
        r = sample_mask(rid, f_res)
        if r.any():
            sampled.append(b.filter(pa.array(r)))
    if schema is None:
        return
    c = pa.RecordBatch.from_arrays([pa.array(x, pa.int64()) for x in sum_prefix_counts(counts)], _COUNT_NAMES)
    kept = pa.Table.from_batches(sampled, schema)
    yield pa.RecordBatch.from_arrays([binary([pack(c)]), binary([pack(kept)])], ["counts", "sample"])


def merge_measures(got: pa.Table, theta: float, sim: str, rs: bool, f_work: float, f_res: float
                   ) -> tuple[dict[int, float], float, dict[int, float], float]:
    """The driver's half of ``measure_slices``: every partition's row of ``measure_partition`` merged."""
    from simjoin.core.setsim.work import slice_results, slice_work, sum_prefix_counts

    count_parts = [tuple(t.column(c).to_numpy() for c in _COUNT_NAMES) for t in map(unpacked, got.column("counts"))]
    samples = [unpacked(blob) for blob in got.column("sample")]
    work = slice_work(*sum_prefix_counts(count_parts), theta=theta, sim=sim, rs=rs)  # type: ignore[arg-type]
    results: dict[int, float] = {}
    sample = pa.concat_tables(samples) if samples else None
    if sample is not None and sample.num_rows:
        flat, offsets = token_csr(sample.column("tokens"))
        got_r = slice_results(flat, offsets, sample.column("rid").to_numpy(), sample.column("side").to_numpy(),
                              theta, sim, rs)
        results = {k: v / f_res**2 for k, v in got_r.items()}
    return {k: v / f_work**2 for k, v in work.items()}, f_work, results, f_res


