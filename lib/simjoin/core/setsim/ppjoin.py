"""Local PPJoin for one unit of the distributed set-similarity join.

Fier & Freytag, Sec. 2 / Sec. 3: each unit runs a single-node
filter-and-verification join restricted by the optimizer's indexLengths,
probeLengths and modgroup (here: the ``is_index``/``is_probe`` flags the
optimizer's ``Plan.assign_units`` produced). The join itself is PPJoin
(Xiao et al., WWW 2008) as in the Mann et al. framework the paper extends:

* records are processed in rid order, which must equal length order;
* a probe record y scans the postings of its probe prefix P(|y|) tokens;
* length filter: postings of records shorter than minlen(|y|) are skipped
  for good (records arrive sorted by length);
* position filter: a candidate is dropped as soon as the matches seen so far
  plus the tokens left after the current positions cannot reach α;
* bitmap filter (Sandes et al., "Fast and exact set similarity joins with
  bitmap filters", 2020): each record carries a 64-bit signature, the OR of
  one hashed bit per token. A bit set in x's signature and not in y's stands
  for at least one token of x missing from y, so
  |x ∩ y| <= min(|x| - popcount(Bx & ~By), |y| - popcount(By & ~Bx)).
  It is checked when a candidate is first met, from the posting itself (the
  posting repeats its record's signature, so nothing is read at random), and
  drops almost every candidate that the merge would reject;
* verification: merge of the sorted token lists with early termination;
* then, if y is an index record, its (shorter) index prefix is inserted.

The inverted index is built up front in CSR form, sorted by record order, so
"inserted so far" is simply "posting record < current record". The whole loop
is one numba function; only vectorized numpy runs before it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

from simjoin.core.unique import unique

from .similarity import (
    EPS,
    SIMILARITIES,
    check_similarity,
    check_threshold,
    index_prefix_array,
    min_length_array,
    probe_prefix_array,
)

__all__ = ["PPJoinStats", "gather_rows", "ppjoin"]

I32Array = npt.NDArray[np.int32]
I64Array = npt.NDArray[np.int64]
F64Array = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class PPJoinStats:
    """Counters of one ``ppjoin`` call.

    indexed: records inserted into the index; probed: records that probed;
    candidates: distinct (x, y) met in the index after the length filter;
    verified: candidates surviving the position and bitmap filters (merged); results: pairs out.
    """

    indexed: int
    probed: int
    candidates: int
    verified: int
    results: int


# The three bounds below repeat similarity.min_overlap_array / similarity()
# operation for operation, so the kernel and the numpy side round alike.
@njit(cache=True, nogil=True)
def _min_overlap(code: int, theta: float, lx: int, ly: int) -> int:
    if code == 0:
        v = theta * (lx + ly) / (1.0 + theta)
    elif code == 1:
        v = theta * math.sqrt(float(lx) * float(ly))
    else:
        v = theta * (lx + ly) / 2.0
    return math.ceil(v - EPS)


@njit(cache=True, nogil=True)
def _similarity(code: int, overlap: int, lx: int, ly: int) -> float:
    if code == 0:
        return overlap / (lx + ly - overlap)
    if code == 1:
        return overlap / math.sqrt(float(lx) * float(ly))
    return 2.0 * overlap / (lx + ly)


@njit(cache=True, nogil=True)
def _overlap(tokens: I32Array, ox: int, lx: int, oy: int, ly: int, alpha: int) -> int:
    """|x ∩ y| by merge; stops early (returning < alpha) once alpha is out of reach."""
    i = 0
    j = 0
    o = 0
    while i < lx and j < ly:
        if o + min(lx - i, ly - j) < alpha:
            return o
        a = tokens[ox + i]
        b = tokens[oy + j]
        if a == b:
            o += 1
            i += 1
            j += 1
        elif a < b:
            i += 1
        else:
            j += 1
    return o


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True, nogil=True)
def _bitmaps(tokens: I32Array, offsets: I64Array) -> npt.NDArray[np.uint64]:
    out = np.zeros(offsets.size - 1, dtype=np.uint64)
    for r in range(offsets.size - 1):
        b = np.uint64(0)
        for j in range(offsets[r], offsets[r + 1]):
            b |= np.uint64(1) << ((np.uint64(tokens[j]) * _GOLDEN) >> np.uint64(58))
        out[r] = b
    return out


def bitmaps(tokens: npt.ArrayLike, offsets: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    """Per record the 64-bit OR of one bit per token (Fibonacci hash: top 6 bits of t·φ·2^64)."""
    return _bitmaps(np.ascontiguousarray(tokens, dtype=np.int32), np.ascontiguousarray(offsets, dtype=np.int64))


@njit(cache=True, nogil=True)
def _postings(keys: I64Array, rec: I64Array, pos: I64Array, n_keys: int) -> tuple[I64Array, I64Array, I32Array]:
    """CSR of the postings by key, each key's postings in record order (a counting sort)."""
    ptr = np.zeros(n_keys + 1, np.int64)
    for k in keys:
        ptr[k + 1] += 1
    for k in range(n_keys):
        ptr[k + 1] += ptr[k]
    fill = ptr[:-1].copy()
    post_rec = np.empty(keys.size, np.int64)
    post_pos = np.empty(keys.size, np.int32)
    for j in range(keys.size):
        q = fill[keys[j]]
        post_rec[q] = rec[j]
        post_pos[q] = pos[j]
        fill[keys[j]] = q + 1
    return ptr, post_rec, post_pos


@njit(cache=True, nogil=True, inline="always")
def _popcount(v: np.uint64) -> int:
    v = v - ((v >> np.uint64(1)) & np.uint64(0x5555555555555555))
    v = (v & np.uint64(0x3333333333333333)) + ((v >> np.uint64(2)) & np.uint64(0x3333333333333333))
    v = (v + (v >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return int((v * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(cache=True, nogil=True)
def _kernel(
    tokens: I32Array,
    dense: I32Array,
    offsets: I64Array,
    lengths: I64Array,
    bm: npt.NDArray[np.uint64],
    is_probe: BoolArray,
    side: npt.NDArray[np.int8],
    cross: bool,
    probe_pref: I64Array,
    min_len: I64Array,
    post_ptr: I64Array,
    post_rec: I64Array,
    post_pos: I32Array,
    post_len: I32Array,
    post_bm: npt.NDArray[np.uint64],
    pstart: I64Array,
    count: npt.NDArray[Any],
    touched: I64Array,
    y_from: int,
    pending: int,
    out_x: I64Array,
    out_y: I64Array,
    out_s: F64Array,
    counters: I64Array,
    code: int,
    theta: float,
) -> tuple[int, int, int]:
    """Probe records ``y_from``.. into the caller's output buffers; returns (y, n_out, pending).

    It stops before verifying a record whose candidates might overflow the buffers and
    returns that record with its candidate count (``pending``, its candidates are left in
    ``touched`` and ``count``); the caller drains the buffers and calls again with it. The
    buffers never grow in here: reallocating them inside the loop halves the loop's speed.
    ``pstart`` (per key the first posting not cut by the length filter), ``count`` (matches so
    far per candidate, -1 = pruned, as narrow an int as the prefixes allow: it is the one
    array read at random, so a small one stays in the cache) and ``touched`` persist between
    calls. ``post_len``/``post_bm`` repeat each posting's record length and bitmap, so the
    filters read the postings in order.
    """
    n = lengths.shape[0]
    cap = out_x.shape[0]
    n_out = 0
    for y in range(y_from, n):
        ly = lengths[y]
        if ly == 0 or not is_probe[y]:
            continue
        oy = offsets[y]
        if pending >= 0 and y == y_from:
            n_touched = pending  # resumed: its candidates are already gathered
        else:
            key_side = np.int64(side[y])
            if cross:
                key_side = 1 - key_side
            by = bm[y]
            minlen = min_len[y]
            n_touched = 0
            for i in range(probe_pref[y]):
                d = dense[oy + i]
                if d < 0:
                    continue
                key = 2 * np.int64(d) + key_side
                p = pstart[key]
                end = post_ptr[key + 1]
                while p < end and post_len[p] < minlen:
                    p += 1
                pstart[key] = p
                while p < end:
                    x = post_rec[p]
                    if x >= y:
                        break
                    c = count[x]
                    if c >= 0:
                        lx = post_len[p]
                        alpha = _min_overlap(code, theta, lx, ly)
                        if c == 0:
                            touched[n_touched] = x
                            n_touched += 1
                            bx = post_bm[p]
                            if min(lx - _popcount(bx & ~by), ly - _popcount(by & ~bx)) < alpha:
                                count[x] = -1  # the bitmap filter
                                p += 1
                                continue
                        rest = min(lx - post_pos[p] - 1, ly - i - 1)
                        if c + 1 + rest >= alpha:
                            count[x] = c + 1
                        else:
                            count[x] = -1
                    p += 1
            counters[0] += n_touched
        if n_out + n_touched > cap:
            return y, n_out, n_touched
        for k in range(n_touched):
            x = touched[k]
            if count[x] > 0:
                counters[1] += 1
                lx = lengths[x]
                alpha = _min_overlap(code, theta, lx, ly)
                o = _overlap(tokens, offsets[x], lx, oy, ly, alpha)
                if o >= alpha:
                    out_x[n_out] = x
                    out_y[n_out] = y
                    out_s[n_out] = _similarity(code, o, lx, ly)
                    n_out += 1
            count[x] = 0
    return n, n_out, -1


@njit(cache=True, nogil=True)
def _gather_rows(tokens: I32Array, offsets: I64Array, order: I64Array, out_off: I64Array, out: I32Array) -> None:
    for i in range(order.size):
        r = order[i]
        s, o = offsets[r], out_off[i]
        for k in range(offsets[r + 1] - s):
            out[o + k] = tokens[s + k]


def gather_rows(tokens: npt.ArrayLike, offsets: npt.ArrayLike, order: npt.ArrayLike) -> tuple[I32Array, I64Array]:
    """Records of a CSR (flat int32 ``tokens``, int64 ``offsets`` from 0) in the row order
    ``order``: record i of the result is record ``order[i]`` of the input. One pass, no per-row
    Python and no index array the size of the tokens."""
    tok = np.ascontiguousarray(tokens, dtype=np.int32).ravel()
    off = np.ascontiguousarray(offsets, dtype=np.int64).ravel()
    idx = np.ascontiguousarray(order, dtype=np.int64).ravel()
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= off.size - 1):
        raise ValueError(f"order must index the {off.size - 1} records, got values in "
                         f"[{int(idx.min())}, {int(idx.max())}]")
    out_off = np.zeros(idx.size + 1, dtype=np.int64)
    np.cumsum(np.diff(off)[idx], out=out_off[1:])
    out = np.empty(int(out_off[-1]), dtype=np.int32)
    _gather_rows(tok, off, idx, out_off, out)
    return out, out_off


def _as_flags(name: str, values: npt.ArrayLike, n: int) -> BoolArray:
    arr = np.asarray(values)
    if arr.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.bool_)


def ppjoin(
    tokens: npt.ArrayLike,
    offsets: npt.ArrayLike,
    rids: npt.ArrayLike,
    is_index: npt.ArrayLike,
    is_probe: npt.ArrayLike,
    theta: float,
    sim: str = "jaccard",
    side: npt.ArrayLike | None = None,
    positions: bool = False,
) -> tuple[I64Array, I64Array, F64Array, PPJoinStats]:
    """All pairs (x, y), x.rid < y.rid, with sim(x, y) >= θ among one unit's records.

    ``tokens``: flat int32, record k is ``tokens[offsets[k]:offsets[k+1]]``,
    strictly ascending (canonical frequency order, no repeats). ``rids``:
    strictly ascending; lengths must not decrease with rid. A pair is
    reported when its later record is a probe record and its earlier one an
    index record. With ``side`` (0 = left input, 1 = right input) only pairs
    across sides are reported (one inverted index per side). Empty records
    are ignored.

    Returns ``(left_rid, right_rid, similarity, stats)`` with
    left_rid < right_rid (in R-S mode, left_rid is the earlier rid, not
    necessarily side 0). With ``positions`` the pairs are given as the records'
    positions in the input (0..n-1) instead of their rids: what a caller needs to
    gather its own per-record columns, without mapping rids back.
    """
    theta, sim = check_threshold(theta), check_similarity(sim)
    tok = np.ascontiguousarray(tokens, dtype=np.int32).ravel()
    off = np.ascontiguousarray(offsets, dtype=np.int64).ravel()
    if off.size == 0 or off[0] != 0 or off[-1] != tok.size or np.any(np.diff(off) < 0):
        raise ValueError(
            "offsets must start at 0, never decrease and end at len(tokens) "
            f"({tok.size}); got {off.size} offsets"
        )
    n = off.size - 1
    rid = np.ascontiguousarray(rids, dtype=np.int64).ravel()
    if rid.size != n:
        raise ValueError(f"rids must have one entry per record ({n}), got {rid.size}")
    if np.any(np.diff(rid) <= 0):
        raise ValueError("rids must be strictly ascending")
    lengths = np.diff(off)
    if np.any(np.diff(lengths) < 0):
        raise ValueError(
            "records must be sorted by length (rid order == length order), "
            "so that every index partner of a probe record is no longer than it"
        )
    if tok.size > 1:
        ascending = np.diff(tok) > 0
        boundary = off[1:-1]
        boundary = boundary[(boundary > 0) & (boundary < tok.size)]
        ascending[boundary - 1] = True
        if not ascending.all():
            raise ValueError("tokens of each record must be strictly ascending (sorted, no repeats)")
    idx_flag = _as_flags("is_index", is_index, n)
    prb_flag = _as_flags("is_probe", is_probe, n)
    if side is None:
        sides = np.zeros(n, dtype=np.int8)
        cross = False
    else:
        sides = np.ascontiguousarray(side, dtype=np.int8).ravel()
        if sides.shape != (n,) or np.any((sides != 0) & (sides != 1)):
            raise ValueError(f"side must hold one 0 (left) or 1 (right) per record ({n})")
        cross = True
    code = SIMILARITIES.index(sim)

    # Inverted index over the index prefixes, CSR by key = 2*dense_token + side,
    # postings in record order.
    ipref = np.where(idx_flag, index_prefix_array(sim, theta, lengths), 0)
    total = int(ipref.sum())
    rec = np.repeat(np.arange(n, dtype=np.int64), ipref)
    pos = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(ipref) - ipref, ipref)
    ptok = tok[off[rec] + pos]
    top = int(tok.max(initial=0))
    if tok.size and int(tok.min()) >= 0 and top < max(4 * tok.size, 1 << 22):
        seen = np.zeros(top + 1, dtype=np.bool_)  # tokens are canonical ranks: a lookup table
        seen[ptok] = True
        vocab = np.flatnonzero(seen)
        lut = np.full(top + 1, -1, dtype=np.int32)
        lut[vocab] = np.arange(vocab.size, dtype=np.int32)
        dense = lut[tok]
    else:
        vocab = unique(ptok)
        dense = np.full(tok.size, -1, dtype=np.int32)
        if vocab.size:
            found = np.minimum(np.searchsorted(vocab, tok), vocab.size - 1)
            dense = np.where(vocab[found] == tok, found, -1).astype(np.int32)
    keys = 2 * dense[off[rec] + pos].astype(np.int64) + sides[rec]
    bm = bitmaps(tok, off)
    post_ptr, post_rec, post_pos = _postings(keys, rec, pos, 2 * vocab.size)

    probe_pref = probe_prefix_array(sim, theta, lengths)
    min_len = min_length_array(sim, theta, lengths)
    post_len = lengths[post_rec].astype(np.int32)
    post_bm = bm[post_rec]
    pstart = post_ptr[:-1].copy()
    count = np.zeros(n, dtype=np.int16 if int(lengths.max(initial=0)) < 2**15 - 1 else np.int64)
    touched = np.empty(n, np.int64)
    counters = np.zeros(2, np.int64)  # candidates, verified
    cap = max(1 << 16, n)
    parts: list[tuple[I64Array, I64Array, F64Array]] = []
    y, pending = 0, -1
    while not parts or y < n:
        out_x = np.empty(cap, np.int64)
        out_y = np.empty(cap, np.int64)
        out_s = np.empty(cap, np.float64)
        y, n_out, pending = _kernel(
            tok, dense, off, lengths, bm, prb_flag, sides, cross, probe_pref, min_len,
            post_ptr, post_rec, post_pos, post_len, post_bm, pstart, count, touched,
            y, pending, out_x, out_y, out_s, counters, code, theta,
        )
        parts.append((out_x[:n_out], out_y[:n_out], out_s[:n_out]))
        cap = max(2 * cap, pending)
    xs, ys, sims = (np.concatenate(c) for c in zip(*parts))
    nonempty = lengths > 0
    n_indexed = int(np.count_nonzero(idx_flag & nonempty))
    n_probed = int(np.count_nonzero(prb_flag & nonempty))
    n_cand, n_ver = int(counters[0]), int(counters[1])
    stats = PPJoinStats(
        indexed=n_indexed,
        probed=n_probed,
        candidates=n_cand,
        verified=n_ver,
        results=int(xs.size),
    )
    if positions:
        return xs, ys, sims, stats
    return rid[xs], rid[ys], sims, stats
