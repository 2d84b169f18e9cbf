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
* verification: merge of the sorted token lists with early termination;
* then, if y is an index record, its (shorter) index prefix is inserted.

The inverted index is built up front in CSR form, sorted by record order, so
"inserted so far" is simply "posting record < current record". The whole loop
is one numba function; only vectorized numpy runs before it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numba import njit

from .similarity import (
    EPS,
    SIMILARITIES,
    check_similarity,
    check_threshold,
    index_prefix_array,
    min_length_array,
    probe_prefix_array,
)

__all__ = ["PPJoinStats", "ppjoin"]

I32Array = npt.NDArray[np.int32]
I64Array = npt.NDArray[np.int64]
F64Array = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class PPJoinStats:
    """Counters of one ``ppjoin`` call.

    indexed: records inserted into the index; probed: records that probed;
    candidates: distinct (x, y) met in the index after the length filter;
    verified: candidates surviving the position filter; results: pairs out.
    """

    indexed: int
    probed: int
    candidates: int
    verified: int
    results: int


# The three bounds below repeat similarity.min_overlap_array / similarity()
# operation for operation, so the kernel and the numpy side round alike.
@njit(cache=True)
def _min_overlap(code: int, theta: float, lx: int, ly: int) -> int:
    if code == 0:
        v = theta * (lx + ly) / (1.0 + theta)
    elif code == 1:
        v = theta * math.sqrt(float(lx) * float(ly))
    else:
        v = theta * (lx + ly) / 2.0
    return math.ceil(v - EPS)


@njit(cache=True)
def _similarity(code: int, overlap: int, lx: int, ly: int) -> float:
    if code == 0:
        return overlap / (lx + ly - overlap)
    if code == 1:
        return overlap / math.sqrt(float(lx) * float(ly))
    return 2.0 * overlap / (lx + ly)


@njit(cache=True)
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


@njit(cache=True)
def _kernel(
    tokens: I32Array,
    dense: I64Array,
    offsets: I64Array,
    lengths: I64Array,
    is_index: BoolArray,
    is_probe: BoolArray,
    side: npt.NDArray[np.int8],
    cross: bool,
    probe_pref: I64Array,
    min_len: I64Array,
    post_ptr: I64Array,
    post_rec: I64Array,
    post_pos: I32Array,
    post_len: I32Array,
    count: npt.NDArray[np.integer],
    code: int,
    theta: float,
) -> tuple[I64Array, I64Array, F64Array, int, int, int, int]:
    # ``post_len`` repeats each posting's record length, so the length filter and the positional
    # filter read the postings in order; ``count`` (zeros, as narrow an int as the prefixes allow)
    # is the one array a probe reads at random: a small one stays in the cache at millions of records.
    n = lengths.shape[0]
    pstart = post_ptr[:-1].copy()  # per key: first posting not cut by the length filter
    # count: matches so far per candidate; -1 = pruned
    touched = np.empty(n, np.int64)
    cap = 1024
    out_x = np.empty(cap, np.int64)
    out_y = np.empty(cap, np.int64)
    out_s = np.empty(cap, np.float64)
    n_res = 0
    n_indexed = 0
    n_probed = 0
    n_cand = 0
    n_ver = 0
    for y in range(n):
        ly = lengths[y]
        if ly == 0:
            continue
        if is_index[y]:
            n_indexed += 1  # its postings are live once y has probed
        if not is_probe[y]:
            continue
        n_probed += 1
        key_side = np.int64(side[y])
        if cross:
            key_side = 1 - key_side
        oy = offsets[y]
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
                    if c == 0:
                        touched[n_touched] = x
                        n_touched += 1
                    lx = post_len[p]
                    alpha = _min_overlap(code, theta, lx, ly)
                    rest = min(lx - post_pos[p] - 1, ly - i - 1)
                    if c + 1 + rest >= alpha:
                        count[x] = c + 1
                    else:
                        count[x] = -1
                p += 1
        n_cand += n_touched
        for k in range(n_touched):
            x = touched[k]
            if count[x] > 0:
                n_ver += 1
                lx = lengths[x]
                alpha = _min_overlap(code, theta, lx, ly)
                o = _overlap(tokens, offsets[x], lx, oy, ly, alpha)
                if o >= alpha:
                    if n_res == cap:
                        cap *= 2
                        nx = np.empty(cap, np.int64)
                        ny = np.empty(cap, np.int64)
                        ns = np.empty(cap, np.float64)
                        nx[:n_res] = out_x[:n_res]
                        ny[:n_res] = out_y[:n_res]
                        ns[:n_res] = out_s[:n_res]
                        out_x = nx
                        out_y = ny
                        out_s = ns
                    out_x[n_res] = x
                    out_y[n_res] = y
                    out_s[n_res] = _similarity(code, o, lx, ly)
                    n_res += 1
            count[x] = 0
    return (
        out_x[:n_res].copy(),
        out_y[:n_res].copy(),
        out_s[:n_res].copy(),
        n_indexed,
        n_probed,
        n_cand,
        n_ver,
    )


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
    necessarily side 0).
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
    flat = off[rec] + pos
    vocab = np.unique(tok[flat])
    if vocab.size:
        found = np.minimum(np.searchsorted(vocab, tok), vocab.size - 1)
        dense = np.where(vocab[found] == tok, found, -1).astype(np.int64)
    else:
        dense = np.full(tok.size, -1, dtype=np.int64)
    keys = 2 * dense[flat] + sides[rec]
    order = np.argsort(keys, kind="stable")
    post_rec = rec[order]
    post_pos = pos[order].astype(np.int32)
    post_ptr = np.zeros(2 * vocab.size + 1, dtype=np.int64)
    post_ptr[1:] = np.cumsum(np.bincount(keys, minlength=2 * vocab.size))

    xs, ys, sims, n_indexed, n_probed, n_cand, n_ver = _kernel(
        tok,
        dense,
        off,
        lengths,
        idx_flag,
        prb_flag,
        sides,
        cross,
        probe_prefix_array(sim, theta, lengths),
        min_length_array(sim, theta, lengths),
        post_ptr,
        post_rec,
        post_pos,
        lengths[post_rec].astype(np.int32),
        np.zeros(n, dtype=np.int16 if int(lengths.max(initial=0)) < 2**15 - 1 else np.int64),
        code,
        theta,
    )
    stats = PPJoinStats(
        indexed=int(n_indexed),
        probed=int(n_probed),
        candidates=int(n_cand),
        verified=int(n_ver),
        results=int(xs.size),
    )
    return rid[xs], rid[ys], sims, stats
