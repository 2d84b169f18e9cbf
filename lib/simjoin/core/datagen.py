"""Synthetic inputs for every join family, numpy (pyarrow for set texts), deterministic per (seed, chunk).

Data are produced in chunks of ``CHUNK_ROWS`` rows so that Spark can generate them in
parallel; chunk ``c`` draws from ``SeedSequence([seed, c])``, so the same seed always gives
the same table whatever the parallelism.

- sets: Zipf-distributed tokens, record lengths like the zipf (Poisson), aol (short queries) or
  long (ENRON-like) inputs, with planted near-duplicates: scattered perturbed copies of earlier
  records, or (near-duplicates) skewed clusters of copies of global seeds that span every chunk,
  so Jaccard joins at 0.6-0.9 have results.
- vectors: the S3J authors' generators (uniform U[-1,1]^d, gaussian N(-1, 2), skewed
  gaussian, Pareto(scale 1, shape 10)) plus a clustered mixture; optionally drifting over time
  (``gen_drift_vectors``: a wandering hot cluster, or a stream that turns skewed).
- ineq: (a, b) pairs as in SPO-Join's POWER/COOL style workloads, uniform or Pareto a.
- keys: Zipf(alpha) join keys over a domain of K values (Streaming HyperCube workloads).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "CHUNK_ROWS",
    "VECTOR_DISTS",
    "VECTOR_DRIFTS",
    "INEQ_DISTS",
    "chunk_bounds",
    "chunk_rng",
    "zipf_probabilities",
    "SET_LENGTHS",
    "SET_DISTS",
    "set_universe",
    "set_alpha",
    "cluster_probabilities",
    "set_clusters",
    "gen_set_tokens",
    "gen_sets",
    "gen_vectors",
    "gen_drift_vectors",
    "drift_periods",
    "wander_centres",
    "skew_centre",
    "gen_ineq",
    "gen_keys",
    "timestamps_us",
    "T0_US",
]

CHUNK_ROWS = 50_000
VECTOR_DISTS = ("uniform", "gaussian", "skewed", "pareto", "clustered")
INEQ_DISTS = ("uniform", "pareto", "correlated")
#: none: stationary; wander: a hot cluster whose centre moves every period; skew: ``dist`` for the
#: first ``after`` periods, then mostly one small blob.
VECTOR_DRIFTS = ("none", "wander", "skew")
WANDER_FRAC, WANDER_SD, WANDER_SPEED, WANDER_BOX = 0.8, 0.08, 0.35, 0.7
SKEW_FRAC, SKEW_SD = 0.9, 0.05
#: correlated: b = a + N(0, CORRELATED_SIGMA). Q1 (l.a < r.a AND l.b > r.b) then matches only pairs whose
#: noise inverts their order: about 0.56 * sigma * (window / 75,000) tuples per probe.
CORRELATED_SIGMA = 2.0
# 2026-01-01T00:00:00Z in microseconds: generated streams start here, so reruns are identical.
T0_US = 1_767_225_600_000_000


def chunk_bounds(rows: int, chunk_rows: int = CHUNK_ROWS) -> list[tuple[int, int]]:
    return [(s, min(rows, s + chunk_rows)) for s in range(0, rows, chunk_rows)]


def chunk_rng(seed: int, chunk: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(chunk)]))


def zipf_probabilities(domain: int, alpha: float) -> np.ndarray:
    p = np.arange(1, domain + 1, dtype=np.float64) ** (-float(alpha))
    return p / p.sum()


def _zipf_draw(rng: np.random.Generator, cdf: np.ndarray, size: int) -> np.ndarray:
    return np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), len(cdf) - 1)


def timestamps_us(start: int, stop: int, rate: float) -> np.ndarray:
    """Ingestion timestamps: row i arrives at T0 + i / rate seconds."""
    return T0_US + np.floor(np.arange(start, stop, dtype=np.float64) * (1e6 / rate)).astype(np.int64)


# --- sets ---------------------------------------------------------------------------------------
#
# A record is a row of distinct token ranks (0 = the most frequent), kept sorted, in CSR form: one
# flat int64 array of tokens and row offsets. Everything is vectorized over a whole chunk; the only
# Python loops are over redraw rounds (a few, see ``_fill``) and chunks.
#
# Prefix stability: every random stream of a chunk is consumed in row order, a fixed number of draws
# (or a number fixed by earlier rows) per row, so rows [b0, b0 + m) of a chunk are the same whether
# m or all CHUNK_ROWS rows are generated. ``gen_sets`` therefore gives the same rows for any split
# of [start, stop), like ``gen_drift_vectors``.

#: Record lengths of ``gen_sets``: zipf, Poisson(avg_len) at least 1 (the default, as before; the
#: tokens are Zipf in every mode); aol, short like the AOL query log; long, 100-300 like ENRON.
SET_LENGTHS = ("zipf", "aol", "long")
#: uniform: near-duplicates are scattered perturbed copies of earlier records of the same chunk;
#: near-duplicates: perturbed copies of global cluster seeds, Zipf-skewed cluster sizes (capped).
SET_DISTS = ("uniform", "near-duplicates")
#: aol: P(length = 1, 2, 3, 4), 0.80 in all; the other 0.20 over 5..AOL_MAX_LEN in proportion to
#: length^-AOL_TAIL_EXP (mean length about 3.5, 4 % of the records 10+ tokens).
AOL_SHORT = (0.16, 0.30, 0.22, 0.12)
AOL_MAX_LEN, AOL_TAIL_EXP = 30, 3.0
#: aol: tokens Zipf(AOL_ALPHA) (unless alpha is given) over max(universe, AOL_UNIVERSE) ranks. The
#: AOL benchmark set holds distinct queries; with the default Zipf(1) over 20,000 words the 16 % of
#: one-word records would repeat a handful of head words (about 200M identical pairs per 1M rows);
#: this law gives about 2M.
AOL_UNIVERSE, AOL_ALPHA = 1_000_000, 0.7
LONG_MIN_LEN, LONG_MAX_LEN = 100, 300
#: long: tokens over max(universe, LONG_UNIVERSE) ranks, so that 100-300 distinct Zipf tokens do not
#: make records alike (two random records: Jaccard about 0.07).
LONG_UNIVERSE = 200_000
#: near-duplicates: ND_CLUSTERS cluster seeds; a copy's cluster has probability
#: min(ND_CLUSTER_CAP, c * rank^-ND_CLUSTER_EXP) (``cluster_probabilities``).
ND_CLUSTERS, ND_CLUSTER_EXP, ND_CLUSTER_CAP = 65_536, 0.8, 0.012
#: near-duplicates: every block of ND_BLOCK_ROWS rows has its own ND_CLUSTERS clusters, so cluster
#: sizes (and the pairs per row) stay the same whatever the number of rows: the join grows linearly.
ND_BLOCK_ROWS = 1_000_000
#: Copies of records of at least this many tokens replace round(U(0, 1/4) * L) tokens (1/8 on
#: average, so their Jaccard to the original spreads over 0.6-1); shorter ones max(1, L // 8) as
#: before (none for L <= 2).
SPREAD_MIN_LEN = 32
_MAX_ROUNDS = 64
_M64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
# stream tags of a chunk (the third entry of its SeedSequence)
_S_LEN, _S_ROW, _S_TOK, _S_TOK_RE, _S_DROP, _S_REPL = 101, 102, 103, 104, 105, 106
# hash tags of the cluster seeds (redraw round r uses _H_SEED_RE + r)
_H_SEED_LEN, _H_SEED_TOK, _H_SEED_RE = 1, 2, 3

Csr = tuple[np.ndarray, np.ndarray]  # (tokens, offsets)


def _stream(seed: int, chunk: int, *tag: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(chunk), *tag]))


def _mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on a uint64 array (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _hash_uniform(seed: int, tag: int, counter: np.ndarray) -> np.ndarray:
    """Uniforms in [0, 1) that depend only on (seed, tag, counter): counter-based splitmix64."""
    key = _mix64(np.array([int(seed) & _M64], dtype=np.uint64))
    key = _mix64(key + np.array([(int(tag) * _GAMMA) & _M64], dtype=np.uint64))
    z = _mix64(np.asarray(counter).astype(np.uint64) * np.uint64(_GAMMA) + key)
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def _from_cdf(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draw: the index whose cumulative probability first exceeds u."""
    return np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1).astype(np.int64)


class _Zipf:
    """Inverse-CDF draws of Zipf(alpha) ranks over [0, domain), with a guide table: bucket j of
    ``m`` holds the answer for u = j / m, the answer for u in the bucket is at most a few ranks
    further (a few gathers per draw instead of a binary search)."""

    def __init__(self, domain: int, alpha: float) -> None:
        self.cdf = np.cumsum(zipf_probabilities(domain, alpha))
        self.m = min(4 * domain, 1 << 19)
        self.guide = np.searchsorted(self.cdf, np.arange(self.m) / self.m, side="right").astype(np.int64)

    def __call__(self, u: np.ndarray) -> np.ndarray:
        cdf, last = self.cdf, len(self.cdf) - 1
        i = np.minimum(self.guide[(u * self.m).astype(np.int64)], last)
        todo = np.flatnonzero((cdf[i] <= u) & (i < last))
        while todo.size:  # the smallest i with cdf[i] > u, as searchsorted(cdf, u, "right")
            i[todo] += 1
            todo = todo[(cdf[i[todo]] <= u[todo]) & (i[todo] < last)]
        return i


@functools.lru_cache(maxsize=8)
def _zipf(domain: int, alpha: float) -> _Zipf:
    return _Zipf(domain, alpha)


@functools.lru_cache(maxsize=8)
def _vocabulary(universe: int) -> pa.Array:
    """Token strings w0 .. w<universe-1>."""
    return pc.binary_join_element_wise("w", pa.array(np.arange(universe)).cast(pa.string()), "")


@functools.lru_cache(maxsize=16)
def _length_table(lengths: str, avg_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, cdf) of a record's length."""
    if lengths == "zipf":
        lam = float(avg_len)
        k = np.arange(int(lam + 12 * math.sqrt(lam) + 20) + 1)
        logfact = np.concatenate([[0.0], np.cumsum(np.log(k[1:]))])
        p = np.exp(k * math.log(lam) - lam - logfact)
        values = np.maximum(1, k)
    elif lengths == "aol":
        values = np.arange(1, AOL_MAX_LEN + 1)
        tail = values[4:].astype(np.float64) ** -AOL_TAIL_EXP
        p = np.concatenate([AOL_SHORT, (1.0 - sum(AOL_SHORT)) * tail / tail.sum()])
    else:
        values = np.arange(LONG_MIN_LEN, LONG_MAX_LEN + 1)
        p = np.ones(len(values))
    cdf = np.cumsum(p)
    return values.astype(np.int64), cdf / cdf[-1]


def set_universe(universe: int, lengths: str) -> int:
    """The token universe ``gen_sets`` draws from (``AOL_UNIVERSE``, ``LONG_UNIVERSE``)."""
    return max(universe, {"aol": AOL_UNIVERSE, "long": LONG_UNIVERSE}.get(lengths, 0))


def set_alpha(alpha: float | None, lengths: str) -> float:
    """The tokens' Zipf exponent: alpha, by default 1.0 (``AOL_ALPHA`` for aol lengths)."""
    return float(alpha) if alpha is not None else AOL_ALPHA if lengths == "aol" else 1.0


@functools.lru_cache(maxsize=1)
def cluster_probabilities() -> np.ndarray:
    """near-duplicates: the probability of each of the ND_CLUSTERS clusters, by rank: a Zipf law
    rank^-ND_CLUSTER_EXP, water-filled so that no cluster exceeds ND_CLUSTER_CAP."""
    w = np.arange(1, ND_CLUSTERS + 1, dtype=np.float64) ** -ND_CLUSTER_EXP
    tail = np.concatenate([np.cumsum(w[::-1])[::-1], [0.0]])  # tail[m] = sum of w[m:]
    for m in range(ND_CLUSTERS):  # m clusters at the cap; the first m whose rest fits below it
        lam = (1.0 - m * ND_CLUSTER_CAP) / tail[m]
        if lam * w[m] <= ND_CLUSTER_CAP:
            break
    p = np.minimum(ND_CLUSTER_CAP, lam * w)
    return p / p.sum()


@functools.lru_cache(maxsize=1)
def _cluster_cdf() -> np.ndarray:
    return np.cumsum(cluster_probabilities())


def _segments(offs: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Flat positions of the given rows' segments, in the order of ``rows``."""
    starts = offs[rows]
    lens = offs[rows + 1] - starts
    total = int(lens.sum())
    return np.repeat(starts - (np.cumsum(lens) - lens), lens) + np.arange(total, dtype=np.int64)


def _offsets(lens: np.ndarray) -> np.ndarray:
    offs = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    return offs


def _row_ids(offs: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(len(offs) - 1, dtype=np.int64), np.diff(offs))


Redraw = Callable[[int, np.ndarray, np.ndarray], np.ndarray]


def _sorted_uniforms(e: np.ndarray, offs: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per row of L, the order statistics of L iid U(0, 1), from the row's L + 1 exponentials
    (row i's are e[offs[i] + i : offs[i + 1] + i + 1]): their normalized partial sums. No sort.
    ``rows``: each position's row."""
    c = np.empty(len(e) + 1)
    c[0] = 0.0
    np.cumsum(e, out=c[1:])
    lo = c[offs[:-1] + np.arange(len(offs) - 1)]
    total = c[offs[1:] + np.arange(1, len(offs))] - lo
    at = np.arange(1, len(rows) + 1, dtype=np.int64)
    at += rows
    u = c[at]  # (in place from here: large temporaries are costly)
    u -= lo[rows]
    u /= total[rows]
    return np.minimum(u, 1.0 - 2.0**-53, out=u)


def _sorted_has(sorted_keys: np.ndarray, x: np.ndarray) -> np.ndarray:
    """x in sorted_keys, elementwise."""
    if not sorted_keys.size:
        return np.zeros(len(x), dtype=bool)
    i = np.minimum(np.searchsorted(sorted_keys, x), len(sorted_keys) - 1)
    return sorted_keys[i] == x


def _fill(acc: np.ndarray, rows: np.ndarray, slots: np.ndarray, offs: np.ndarray, universe: int,
          redraw: Redraw) -> Csr:
    """Complete rows laid out by ``offs``: ``acc`` holds their keys row * universe + token so far
    (sorted, distinct), and each pending (rows, slots), listed by row, needs one more token not yet
    in its row. Round r draws them with ``redraw(r, rows, slots)``, keeps the new ones (the first of
    equal draws) and draws again for the rest: sampling without replacement. Each round checks only
    the pending draws (binary search), and one merge at the end."""
    extra = np.empty(0, dtype=np.int64)  # accepted draws, sorted
    for r in range(_MAX_ROUNDS):
        if not rows.size:
            break
        new = rows * universe + redraw(r, rows, slots)
        order = np.argsort(new, kind="stable")
        ns = new[order]  # sorted, so the binary searches stay in cache
        bad = _sorted_has(acc, ns) | _sorted_has(extra, ns)
        bad[1:] |= ns[1:] == ns[:-1]
        got = ns[~bad]
        extra = np.insert(extra, np.searchsorted(extra, got), got)
        ok = np.empty(len(new), dtype=bool)
        ok[order] = ~bad
        rows, slots = rows[~ok], slots[~ok]
    keys = np.insert(acc, np.searchsorted(acc, extra), extra)
    if rows.size:  # rounds exhausted (rows nearly as long as the universe): they stay shorter
        offs = _offsets(np.bincount(keys // universe, minlength=len(offs) - 1))
    return keys % universe, offs


def _draw_rows(lens: np.ndarray, e: np.ndarray, zipf: _Zipf, universe: int, redraw: Redraw) -> Csr:
    """Records of the given lengths of distinct Zipf tokens, sorted: from ``e`` (sum(lens + 1)
    exponentials) sorted uniforms, so sorted tokens; repeats are drawn again with ``redraw``."""
    offs = _offsets(lens)
    rows = _row_ids(offs)
    keys = rows * universe + zipf(_sorted_uniforms(e, offs, rows))
    rep = np.zeros(len(keys), dtype=bool)
    rep[1:] = keys[1:] == keys[:-1]
    at = np.flatnonzero(rep)
    return _fill(keys[~rep], rows[at], at - offs[rows[at]], offs, universe, redraw)


def _stream_redraw(seed: int, chunk: int, tag: int, zipf: _Zipf) -> Redraw:
    return lambda r, rows, slots: zipf(_stream(seed, chunk, tag, r).random(len(rows)))


def _fresh(lens: np.ndarray, rng: np.random.Generator, zipf: _Zipf, universe: int, redraw: Redraw) -> Csr:
    return _draw_rows(lens, rng.standard_exponential(int(lens.sum()) + len(lens)), zipf, universe, redraw)


def _gather(rec: Csr, rows: np.ndarray) -> Csr:
    tok, offs = rec
    return tok[_segments(offs, rows)], _offsets(offs[rows + 1] - offs[rows])


def _perturb(base: Csr, u_frac: np.ndarray, drop: np.random.Generator, universe: int, redraw: Redraw) -> Csr:
    """Copies of the base records with k of their L tokens (a random subset) replaced by fresh Zipf
    tokens (``redraw``), still distinct: k = 0 for L <= 2, max(1, L // 8) for L < SPREAD_MIN_LEN,
    else max(1, round(u_frac * L / 4)) (so U(0, 1/4) of the tokens, 1/8 on average)."""
    tok, offs = base
    lens = np.diff(offs)
    spread = np.maximum(1, np.rint(u_frac * lens / 4).astype(np.int64))
    k = np.where(lens <= 2, 0, np.where(lens < SPREAD_MIN_LEN, np.maximum(1, lens // 8), spread))
    rows = _row_ids(offs)
    slot = np.arange(len(rows), dtype=np.int64) - offs[rows]
    # a random order within each row: sort (row, 20 random bits, slot), packed into one int64; the
    # first k of each row in that order are replaced
    order = np.sort((rows << 40) | (drop.integers(0, 1 << 20, len(rows), dtype=np.int64) << 20) | slot)
    keep = np.ones(len(rows), dtype=bool)
    gone = slot < k[rows]
    keep[offs[rows[gone]] + (order[gone] & ((1 << 20) - 1))] = False
    fresh_rows = np.repeat(np.arange(len(lens), dtype=np.int64), k)
    fresh_slots = np.arange(len(fresh_rows), dtype=np.int64) - _offsets(k)[fresh_rows]
    return _fill(rows[keep] * universe + tok[keep], fresh_rows, fresh_slots, offs, universe, redraw)


def _block_cluster(chunk: int, rank: np.ndarray) -> np.ndarray:
    """The global id of the cluster of this rank in the chunk's block of ND_BLOCK_ROWS rows."""
    return (chunk * CHUNK_ROWS // ND_BLOCK_ROWS) * ND_CLUSTERS + np.asarray(rank, dtype=np.int64)


def _cluster_seeds(seed: int, clusters: np.ndarray, zipf: _Zipf, universe: int,
                   table: tuple[np.ndarray, np.ndarray]) -> Csr:
    """The seed records of the given clusters: like any record, but drawn with counter-based
    hashes of (seed, cluster), so that a cluster's seed is the same in every chunk."""
    values, lcdf = table
    lens = np.minimum(values[_from_cdf(lcdf, _hash_uniform(seed, _H_SEED_LEN, clusters))], universe)
    offs1 = _offsets(lens + 1)  # L + 1 exponentials per seed
    r1 = _row_ids(offs1)
    ctr = (clusters[r1].astype(np.int64) << 20) + (np.arange(len(r1), dtype=np.int64) - offs1[r1])
    e = -np.log1p(-_hash_uniform(seed, _H_SEED_TOK, ctr))

    def redraw(r: int, rr: np.ndarray, slots: np.ndarray) -> np.ndarray:
        return zipf(_hash_uniform(seed, _H_SEED_RE + r, (clusters[rr].astype(np.int64) << 20) + slots))

    return _draw_rows(lens, e, zipf, universe, redraw)


def _interleave(is_b: np.ndarray, a: Csr, b: Csr) -> Csr:
    """Rows from a where not is_b and from b where is_b, each in order."""
    lens = np.empty(len(is_b), dtype=np.int64)
    lens[~is_b], lens[is_b] = np.diff(a[1]), np.diff(b[1])
    offs = _offsets(lens)
    tok = np.empty(int(offs[-1]), dtype=np.int64)
    tok[_segments(offs, np.flatnonzero(~is_b))] = a[0]
    tok[_segments(offs, np.flatnonzero(is_b))] = b[0]
    return tok, offs


def _row_plan(seed: int, chunk: int, n: int, dup_frac: float) -> tuple[np.ndarray, np.ndarray]:
    """Per row of the chunk's first n: whether it is a copy, and two uniforms (which base, the
    replaced share)."""
    u = _stream(seed, chunk, _S_ROW).random((n, 3))
    return u[:, 0] < dup_frac, u[:, 1:]


def _sets_block(seed: int, chunk: int, n: int, universe: int, avg_len: int, dup_frac: float, alpha: float,
                lengths: str, dist: str) -> Csr:
    """The first n rows of chunk ``chunk`` (n <= CHUNK_ROWS); universe and alpha as drawn from."""
    zipf = _zipf(universe, alpha)
    table = _length_table(lengths, avg_len)
    lens = np.minimum(table[0][_from_cdf(table[1], _stream(seed, chunk, _S_LEN).random(n))], universe)
    copy, u = _row_plan(seed, chunk, n, dup_frac)
    if dist == "uniform":
        copy[:1] = False  # the chunk's first record is an original
    orig = ~copy
    origs = _fresh(lens[orig], _stream(seed, chunk, _S_TOK), zipf, universe,
                   _stream_redraw(seed, chunk, _S_TOK_RE, zipf))
    if dist == "uniform":  # a random earlier original of the chunk (one exists after the first row)
        before = np.cumsum(orig) - orig
        base = _gather(origs, (u[copy, 0] * before[copy]).astype(np.int64))
    else:
        uniq, inv = np.unique(_block_cluster(chunk, _from_cdf(_cluster_cdf(), u[copy, 0])), return_inverse=True)
        base = _gather(_cluster_seeds(seed, uniq, zipf, universe, table), inv.reshape(-1))
    copies = _perturb(base, u[copy, 1], _stream(seed, chunk, _S_DROP), universe,
                      _stream_redraw(seed, chunk, _S_REPL, zipf))
    return _interleave(copy, origs, copies)


def _check_sets(universe: int, avg_len: int, dup_frac: float, alpha: float | None, lengths: str,
                dist: str) -> None:
    if lengths not in SET_LENGTHS:
        raise ValueError(f"invalid lengths {lengths!r}: allowed {', '.join(SET_LENGTHS)}")
    if dist not in SET_DISTS:
        raise ValueError(f"invalid dist {dist!r} for sets: allowed {', '.join(SET_DISTS)}")
    if universe < 1 or not 1 <= avg_len <= 100_000:
        raise ValueError(f"invalid universe {universe} / avg_len {avg_len}: allowed universe >= 1, "
                         "1 <= avg_len <= 100000")
    if not 0.0 <= dup_frac <= 1.0:
        raise ValueError(f"invalid dup_frac {dup_frac}: allowed 0 <= dup_frac <= 1")
    if alpha is not None and not alpha >= 0:
        raise ValueError(f"invalid alpha {alpha}: allowed >= 0 (0: uniform)")


def gen_set_tokens(start: int, stop: int, seed: int, universe: int = 20_000, avg_len: int = 12,
                   dup_frac: float = 0.25, alpha: float | None = None, *, lengths: str = "zipf",
                   dist: str = "uniform") -> tuple[np.ndarray, np.ndarray]:
    """``gen_sets`` as token ranks: (tokens, offsets), row start + i's sorted, distinct tokens
    being tokens[offsets[i]:offsets[i + 1]]."""
    _check_sets(universe, avg_len, dup_frac, alpha, lengths, dist)
    universe, a = set_universe(universe, lengths), set_alpha(alpha, lengths)
    toks, lens = [np.empty(0, dtype=np.int64)], [np.empty(0, dtype=np.int64)]
    for b0 in range(start - start % CHUNK_ROWS, stop, CHUNK_ROWS):
        tok, offs = _sets_block(seed, b0 // CHUNK_ROWS, min(stop, b0 + CHUNK_ROWS) - b0, universe, int(avg_len),
                                float(dup_frac), a, lengths, dist)
        lo = max(start, b0) - b0
        toks.append(tok[offs[lo]:])
        lens.append(np.diff(offs[lo:]))
    return np.concatenate(toks), _offsets(np.concatenate(lens))


def set_clusters(start: int, stop: int, seed: int, dup_frac: float = 0.25) -> np.ndarray:
    """near-duplicates: the cluster of rows [start, stop) of ``gen_sets``, -1 for the records that
    are not copies: block * ND_CLUSTERS + rank (``cluster_probabilities``), block = row // ND_BLOCK_ROWS."""
    out = []
    for b0 in range(start - start % CHUNK_ROWS, stop, CHUNK_ROWS):
        copy, u = _row_plan(seed, b0 // CHUNK_ROWS, min(stop, b0 + CHUNK_ROWS) - b0, dup_frac)
        cl = np.full(len(copy), -1, dtype=np.int64)
        cl[copy] = _block_cluster(b0 // CHUNK_ROWS, _from_cdf(_cluster_cdf(), u[copy, 0]))
        out.append(cl[max(start, b0) - b0:])
    return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


def gen_sets(start: int, stop: int, seed: int, universe: int = 20_000, avg_len: int = 12,
             dup_frac: float = 0.25, alpha: float | None = None, *, lengths: str = "zipf",
             dist: str = "uniform") -> tuple[np.ndarray, pa.Array]:
    """Rows [start, stop): ids and texts (a pyarrow string array) of space-separated, distinct word
    tokens ``w<rank>`` (rank 0 the most frequent), sorted by rank, never empty. Row i depends only
    on (seed, i) and the parameters, not on [start, stop): chunk c = i // CHUNK_ROWS draws from its
    own streams (SeedSequence([seed, c, tag])), each consumed in row order.

    - Tokens: Zipf(alpha) ranks, drawn without replacement within a record, over ``universe`` ranks
      (zipf lengths), max(universe, 1M) (aol) or max(universe, 200,000) (long); alpha defaults to
      1.0, 0.7 for aol (``AOL_ALPHA``, so that the many one-word records rarely coincide).
    - ``lengths``: zipf, Poisson(avg_len) at least 1; aol, 80 % of the records 1-4 tokens
      (``AOL_SHORT``: 16, 30, 22, 12 %), the rest a length^-3 tail up to 30, mean about 3.5;
      long, uniform in [100, 300].
    - ``dist`` uniform: a share ``dup_frac`` of the records are copies of a random earlier
      original (not itself a copy) of the same chunk with about 1/8 of their tokens replaced by
      fresh Zipf tokens (``_perturb``: none for records of <= 2 tokens, max(1, L // 8) for
      shorter than 32, a U(0, 1/4) share for longer ones), so Jaccard about 0.8 to the original
      (0.6-1 for long records).
    - ``dist`` near-duplicates (candidate skew): a share ``dup_frac`` of the records are such
      perturbed copies of one of ND_CLUSTERS = 65,536 cluster seeds of their block of ND_BLOCK_ROWS = 1M
      rows, drawn with counter-based hashes of (seed, cluster) alone, so a cluster spans all the
      chunks of its block; the cluster by
      ``cluster_probabilities`` (Zipf(0.8) by rank, capped at 1.2 %). The other records are fresh.
      Per 1M rows with dup_frac 0.25: the largest clusters hold 3,000 records, 9 hold 1,000+, about
      170 hold 100+; two copies of a seed share all but about 2/8 of their tokens (Jaccard about
      0.7 for zipf lengths), so the θ = 0.6 self-join gives about sum(k^2 / 2) = 27M pairs. Sizes
      scale with dup_frac and with rows up to 1M; beyond, each 1M rows has its own clusters, so the
      pairs grow linearly (10M rows: about 270M pairs at θ = 0.6).

    ``set_clusters`` gives each row's cluster; ``gen_set_tokens`` the token ranks.
    """
    tok, offs = gen_set_tokens(start, stop, seed, universe, avg_len, dup_frac, alpha, lengths=lengths, dist=dist)
    words = _vocabulary(set_universe(universe, lengths)).take(pa.array(tok))
    texts = pc.binary_join(pa.LargeListArray.from_arrays(pa.array(offs), words), " ")
    return np.arange(start, stop, dtype=np.int64), texts


def gen_vectors(start: int, stop: int, dim: int, dist: str, seed: int, *, drift: str = "none",
                rate: float = 100.0, period: float = 60.0, after: int = 2) -> np.ndarray:
    """Rows [start, stop) of ``dim``-dimensional vectors from ``dist``; with ``drift`` other than
    ``none``, ``gen_drift_vectors`` (``rate``, ``period``, ``after`` are its)."""
    if drift != "none":
        return gen_drift_vectors(start, stop, dim, dist, seed, drift, rate=rate, period=period, after=after)
    if dist not in VECTOR_DISTS:
        raise ValueError(f"invalid dist {dist!r}: allowed {', '.join(VECTOR_DISTS)}")
    if dim < 1:
        raise ValueError(f"invalid dim {dim}: allowed >= 1")
    rng = chunk_rng(seed, start // CHUNK_ROWS)
    n = stop - start
    if dist == "uniform":
        return rng.uniform(-1.0, 1.0, (n, dim))
    if dist == "gaussian":
        return rng.normal(-1.0, 2.0, (n, dim))
    if dist == "skewed":
        # skew-normal with shape 4 (Azzalini's construction), centred like the gaussian stream
        a = 4.0
        u0, v = rng.normal(size=(n, dim)), rng.normal(size=(n, dim))
        d = a / np.sqrt(1 + a * a)
        return -1.0 + 2.0 * (d * np.abs(u0) + np.sqrt(1 - d * d) * v)
    if dist == "pareto":
        return 1.0 * (1.0 + rng.pareto(10.0, (n, dim)))
    centers = chunk_rng(seed, 2**31).uniform(-1.0, 1.0, (8, dim))
    return centers[rng.integers(0, 8, n)] + rng.normal(0.0, 0.05, (n, dim))


def drift_periods(start: int, stop: int, rate: float, period: float) -> np.ndarray:
    """Drift period of rows [start, stop): floor((ts - T0) / period), on the same integer
    microsecond ts as ``timestamps_us``, so with ``period`` = the window length it is the row's
    tumbling-window index."""
    off = timestamps_us(start, stop, rate) - T0_US
    return np.floor_divide(off, period * 1e6).astype(np.int64)


def _triangle(x: np.ndarray, a: float) -> np.ndarray:
    """Fold x into [-a, a] by reflecting at the walls (a billiard's coordinate)."""
    return a - np.abs(np.mod(x + a, 4.0 * a) - 2.0 * a)


def wander_centres(seed: int, dim: int, k: np.ndarray) -> np.ndarray:
    """The wandering cluster's centre in periods ``k``: a billiard path in [-0.7, 0.7]^dim from a
    seeded start, moving ``WANDER_SPEED`` per period in a seeded direction, reflected at the walls."""
    g = chunk_rng(seed, 2**31 + 1)
    c0 = g.uniform(-WANDER_BOX, WANDER_BOX, dim)
    v = g.normal(size=dim)
    v *= WANDER_SPEED / max(float(np.linalg.norm(v)), 1e-12)
    return _triangle(c0 + np.asarray(k, dtype=np.float64)[:, None] * v, WANDER_BOX)


def skew_centre(seed: int, dim: int) -> np.ndarray:
    """The skewed blob's centre: a seeded direction at radius in [0.4, 0.7] (away from the origin,
    so it is a small region for angular distance too)."""
    g = chunk_rng(seed, 2**31 + 2)
    v = g.normal(size=dim)
    return v / max(float(np.linalg.norm(v)), 1e-12) * g.uniform(0.4, WANDER_BOX)


def _drift_block(b0: int, dim: int, dist: str, seed: int, drift: str, rate: float, period: float,
                 after: int) -> np.ndarray:
    """Rows [b0, b0 + CHUNK_ROWS) of a drifting stream (b0 a multiple of CHUNK_ROWS)."""
    b1 = b0 + CHUNK_ROWS
    x = gen_vectors(b0, b1, dim, dist, seed)
    k = drift_periods(b0, b1, rate, period)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), b0 // CHUNK_ROWS, 1]))
    u, z = rng.random(CHUNK_ROWS), rng.standard_normal((CHUNK_ROWS, dim))
    if drift == "wander":
        hot = u < WANDER_FRAC
        ks, inv = np.unique(k[hot], return_inverse=True)
        centre, sd = wander_centres(seed, dim, ks)[inv], WANDER_SD
    else:
        hot = (u < SKEW_FRAC) & (k >= after)
        centre, sd = skew_centre(seed, dim), SKEW_SD
    x[hot] = np.clip(centre + sd * z[hot], -1.0, 1.0)
    return x


def gen_drift_vectors(start: int, stop: int, dim: int, dist: str, seed: int, drift: str, *,
                      rate: float = 100.0, period: float = 60.0, after: int = 2) -> np.ndarray:
    """Rows [start, stop) of a vector stream whose distribution moves with ts (row i at
    T0 + i / rate s), in drift periods of ``period`` seconds (``drift_periods``):

    - ``wander``: each row is, with probability 0.8, from N(centre_k, 0.08^2 I) (clipped to
      [-1, 1]), else from ``dist`` (the background); centre_k (``wander_centres``) moves 0.35 per
      period across [-0.7, 0.7]^dim, so the hot region crosses space partitions over time.
    - ``skew``: ``dist`` for periods k < ``after``; from period ``after`` on, a row is with
      probability 0.9 from N(c, 0.05^2 I) at one seeded centre c (``skew_centre``), else ``dist``.

    Row i depends only on (seed, i) and the parameters, not on [start, stop): rows are drawn in
    whole CHUNK_ROWS blocks and sliced, so any chunking gives the same table.
    """
    if drift not in VECTOR_DRIFTS:
        raise ValueError(f"invalid drift {drift!r}: allowed {', '.join(VECTOR_DRIFTS)}")
    if dist not in VECTOR_DISTS:
        raise ValueError(f"invalid dist {dist!r}: allowed {', '.join(VECTOR_DISTS)}")
    if dim < 1:
        raise ValueError(f"invalid dim {dim}: allowed >= 1")
    if not rate > 0 or not period > 0:
        raise ValueError(f"invalid rate {rate} / period {period}: allowed > 0")
    if after < 0:
        raise ValueError(f"invalid after {after}: allowed >= 0")
    if drift == "none":
        return gen_vectors(start, stop, dim, dist, seed)
    out = np.empty((max(0, stop - start), dim), dtype=np.float64)
    for b0 in range(start - start % CHUNK_ROWS, stop, CHUNK_ROWS):
        lo, hi = max(start, b0), min(stop, b0 + CHUNK_ROWS)
        out[lo - start: hi - start] = _drift_block(b0, dim, dist, seed, drift, rate, period, after)[lo - b0: hi - b0]
    return out


def gen_ineq(start: int, stop: int, dist: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if dist not in INEQ_DISTS:
        raise ValueError(f"invalid dist {dist!r}: allowed {', '.join(INEQ_DISTS)}")
    rng = chunk_rng(seed, start // CHUNK_ROWS)
    n = stop - start
    a = rng.pareto(3.0, n) * 1000.0 if dist == "pareto" else rng.uniform(0.0, 75_000.0, n)
    b = a + rng.normal(0.0, CORRELATED_SIGMA, n) if dist == "correlated" else rng.uniform(0.0, 75_000.0, n)
    return a, b


def gen_aqi(start: int, stop: int, domain: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Air-quality readings like S2J's case study (Section 1): a station id in ``[0, domain)``,
    PM2.5 (log-normal, median about 35 ug/m3) and PM10 (about 1.6 x PM2.5 plus noise), both to
    0.1 as monitors report them (so ties and exact boundary gaps are common)."""
    if domain < 1:
        raise ValueError(f"invalid domain {domain}: allowed >= 1")
    rng = chunk_rng(seed, start // CHUNK_ROWS)
    n = stop - start
    station = rng.integers(0, domain, n).astype(np.int64)
    pm25 = np.round(rng.lognormal(np.log(35.0), 0.6, n), 1)
    pm10 = np.round(np.maximum(0.0, pm25 * 1.6 + rng.normal(0.0, 12.0, n)), 1)
    return station, pm25, pm10


def gen_keys(start: int, stop: int, alpha: float, domain: int, seed: int) -> np.ndarray:
    if domain < 1:
        raise ValueError(f"invalid domain {domain}: allowed >= 1")
    if alpha < 0:
        raise ValueError(f"invalid alpha {alpha}: allowed >= 0 (0: uniform)")
    rng = chunk_rng(seed, start // CHUNK_ROWS)
    return _zipf_draw(rng, np.cumsum(zipf_probabilities(domain, alpha)), stop - start).astype(np.int64)
