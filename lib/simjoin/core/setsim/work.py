"""Measured slice costs: how many postings each slice's probes really visit.

Eq. 1 prices a slice i as P(i)·|R_i|·Σ_p P(p)·|R_p|, as if every prefix token
of a probe met every prefix token of an index record. Real data are skewed:
frequent tokens, near-duplicate clusters and planted copies make a few
slices far costlier than their lengths say, and the paper notes its heuristic
"is not robust against candidate skew by design". This module counts, from
the records' prefixes, the posting visits of PPJoin's candidate generation
per index length i:

    W(i) = Σ_t Σ_{p ∈ [i, maxlen(i)]} I(t, i) · Q(t, p)

where I(t, i) is the number of records of length i with token t in their
index prefix and Q(t, p) the number of records of length p with t in their
probe prefix. Within one length only the earlier record probes the later
one's postings, so the p = i term is halved (after removing each record
meeting itself). In an R-S join only postings of the other side count.

``prefix_counts`` runs per Arrow batch (in ``mapInArrow``); ``sum_prefix_counts``
sums the per-batch counts by (token, length, side) and ``slice_work`` turns them
into W(i). All are numpy, no per-record Python. ``sample_mask`` picks the same
records of a large input wherever it runs.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from simjoin.core.unique import unique

from .ppjoin import gather_rows, ppjoin
from .similarity import check_similarity, check_threshold, index_prefix_array, max_length_array, probe_prefix_array

__all__ = [
    "RESULT_VISITS",
    "RESULT_VISITS_PER_TOKEN",
    "measured_costs",
    "prefix_counts",
    "sample_mask",
    "slice_results",
    "slice_work",
    "sum_prefix_counts",
]

#: A result pair of index length l costs about RESULT_VISITS + RESULT_VISITS_PER_TOKEN·l posting
#: visits (about 7 ns each): its row in the unit's output (3 visits in the kernel) and its
#: hand-over to Spark (10-20 ns to serialize), and its verification, a merge of both records (the
#: per-token part). Fitted with ``optimizer.UnitCosts`` on 270 units' steady CPU times: Zipf,
#: AOL-like and near-duplicate data.
RESULT_VISITS = 5.0
RESULT_VISITS_PER_TOKEN = 0.9

IntArray = npt.NDArray[np.int64]


def measured_costs(
    lengths: npt.ArrayLike, work: dict[int, float], results: dict[int, float]
) -> dict[int, float]:
    """Slice cost in posting visits per index length: W(i) (``slice_work``) plus the slice's
    result pairs (``slice_results``, scaled to the input) at their length's verification cost."""
    return {
        int(i): work.get(int(i), 0.0) + (RESULT_VISITS + RESULT_VISITS_PER_TOKEN * int(i)) * results.get(int(i), 0.0)
        for i in np.asarray(lengths).ravel().tolist()
    }


def prefix_counts(
    tokens: npt.ArrayLike,
    offsets: npt.ArrayLike,
    sides: npt.ArrayLike,
    theta: float,
    sim: str = "jaccard",
) -> tuple[IntArray, IntArray, IntArray, IntArray, IntArray]:
    """Per (token, length, side): records with the token in their index prefix, and in their probe prefix.

    ``tokens`` flat, record k is ``tokens[offsets[k]:offsets[k+1]]`` in canonical order
    (its prefix is its first tokens). Returns ``(token, length, side, n_index, n_probe)``,
    sorted by (token, length, side).
    """
    theta, sim = check_threshold(theta), check_similarity(sim)
    tok = np.asarray(tokens, dtype=np.int64).ravel()
    off = np.asarray(offsets, dtype=np.int64).ravel()
    side = np.asarray(sides, dtype=np.int64).ravel()
    lengths = np.diff(off)
    pp = probe_prefix_array(sim, theta, lengths)
    ip = np.minimum(index_prefix_array(sim, theta, lengths), pp)
    rec = np.repeat(np.arange(lengths.size, dtype=np.int64), pp)
    pos = np.arange(rec.size, dtype=np.int64) - np.repeat(np.cumsum(pp) - pp, pp)
    t = tok[off[rec] + pos]
    ln = lengths[rec]
    sd = side[rec]
    in_index = pos < ip[rec]
    span_l = int(lengths.max(initial=0)) + 1
    key = (t * span_l + ln) * 2 + sd
    order = np.argsort(key, kind="stable")
    key, in_index = key[order], in_index[order]
    first = np.ones(key.size, dtype=bool)
    first[1:] = key[1:] != key[:-1]
    starts = np.flatnonzero(first)
    n_probe = np.diff(np.append(starts, key.size))
    n_index = np.add.reduceat(in_index.astype(np.int64), starts) if starts.size else np.zeros(0, np.int64)
    uk = key[starts]
    return uk // 2 // span_l, uk // 2 % span_l, uk % 2, n_index.astype(np.int64), n_probe.astype(np.int64)


def sum_prefix_counts(
    parts: list[tuple[IntArray, IntArray, IntArray, IntArray, IntArray]],
) -> tuple[IntArray, IntArray, IntArray, IntArray, IntArray]:
    """Several ``prefix_counts`` results (of disjoint records) summed by (token, length, side),
    sorted by that key."""
    if not parts:
        return tuple(np.zeros(0, np.int64) for _ in range(5))  # type: ignore[return-value]
    t, ln, sd, ci, cp = (np.concatenate([np.asarray(p[k], dtype=np.int64) for p in parts]) for k in range(5))
    span_l = int(ln.max(initial=0)) + 1
    uk, inv = np.unique((t * span_l + ln) * 2 + sd, return_inverse=True)
    return (uk // 2 // span_l, uk // 2 % span_l, uk % 2, np.bincount(inv, ci, uk.size).astype(np.int64),
            np.bincount(inv, cp, uk.size).astype(np.int64))


def sample_mask(rids: npt.ArrayLike, fraction: float) -> npt.NDArray[np.bool_]:
    """A deterministic Bernoulli(``fraction``) sample of records by rid: splitmix64 of the rid as a
    uniform number in [0, 1). The same rid is in or out wherever it is drawn, and the sample of a
    smaller fraction is inside that of a larger one."""
    r = np.asarray(rids, dtype=np.int64).ravel()
    if fraction >= 1.0:
        return np.ones(r.size, dtype=bool)
    z = r.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53) < fraction


def slice_work(
    token: npt.ArrayLike,
    length: npt.ArrayLike,
    side: npt.ArrayLike,
    n_index: npt.ArrayLike,
    n_probe: npt.ArrayLike,
    theta: float,
    sim: str = "jaccard",
    rs: bool = False,
) -> dict[int, float]:
    """W(i) per index length i from summed ``prefix_counts`` rows (one row per (token, length, side)).

    Self-join: all sides are 0. R-S join (``rs``): index postings of one side are visited by
    probes of the other side only.
    """
    theta, sim = check_threshold(theta), check_similarity(sim)
    t = np.asarray(token, dtype=np.int64).ravel()
    ln = np.asarray(length, dtype=np.int64).ravel()
    sd = np.asarray(side, dtype=np.int64).ravel() % 2
    ci = np.asarray(n_index, dtype=np.float64).ravel()
    cp = np.asarray(n_probe, dtype=np.float64).ravel()
    if t.size == 0:
        return {}
    if not rs:
        sd = np.zeros_like(sd)
    span_l = int(ln.max()) + 1
    # probe rows sorted by (token, side, length) with running sums of their counts
    pkey = (t * 2 + sd) * span_l + ln
    order = np.argsort(pkey, kind="stable")
    pkey, pc = pkey[order], cp[order]
    csum = np.concatenate([[0.0], np.cumsum(pc)])
    # index rows look up the probe rows of the same token (other side in R-S) over [i, maxlen(i)]
    sel = ci > 0
    it, il, isd, ic = t[sel], ln[sel], sd[sel], ci[sel]
    other = 1 - isd if rs else isd
    hi = np.minimum(max_length_array(sim, theta, il), span_l - 1)
    base = (it * 2 + other) * span_l
    lo_p = np.searchsorted(pkey, base + il, side="left")
    hi_p = np.searchsorted(pkey, base + hi, side="right")
    eq_p = np.searchsorted(pkey, base + il, side="right")
    same = csum[eq_p] - csum[lo_p]  # Q(t, i) of the probe side
    longer = csum[hi_p] - csum[eq_p]
    if rs:
        same_len = ic * same / 2.0
    else:
        same_len = np.maximum(ic * same - ic, 0.0) / 2.0  # every record is in both prefixes of its own length
    w = ic * longer + same_len
    lengths_out = unique(ln)
    total = np.bincount(np.searchsorted(lengths_out, il), weights=w, minlength=lengths_out.size)
    return {int(k): float(v) for k, v in zip(lengths_out.tolist(), total.tolist(), strict=True)}


def slice_results(
    tokens: npt.ArrayLike,
    offsets: npt.ArrayLike,
    rids: npt.ArrayLike,
    sides: npt.ArrayLike,
    theta: float,
    sim: str = "jaccard",
    rs: bool = False,
) -> dict[int, int]:
    """Result pairs per index length (the earlier record's length) of a join of these records.

    Run on a sample of the records, it shows where the results are (near-duplicate clusters
    sit in a few slices, whatever their posting visits say): a pair survives the sample with
    probability fraction², so the caller scales by 1/fraction². Records in rid order need not
    be given sorted: they are sorted here.
    """
    tok = np.asarray(tokens, dtype=np.int32).ravel()
    off = np.asarray(offsets, dtype=np.int64).ravel()
    rid = np.asarray(rids, dtype=np.int64).ravel()
    if rid.size == 0:
        return {}
    lengths = np.diff(off)
    order = np.lexsort((rid, lengths))
    k = lengths[order]
    flat, new_off = gather_rows(tok, off, order)
    side = np.asarray(sides, dtype=np.int8).ravel()[order] % 2
    ones = np.ones(rid.size, dtype=bool)
    left, _, _, _ = ppjoin(flat, new_off, np.arange(rid.size, dtype=np.int64), ones, ones, theta, sim,
                           side=side if rs else None)
    got = np.bincount(k[left], minlength=int(k.max(initial=0)) + 1)
    return {int(length): int(c) for length, c in enumerate(got.tolist()) if c}
