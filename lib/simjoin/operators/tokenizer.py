"""Vectorized tokenizers over Arrow string arrays (run inside ``mapInArrow``).

- ``word``: lower-cased words split on Unicode whitespace (as Python's ``str.lower().split()``).
- ``qgram:q``: lower-cased character q-grams; a string shorter than q is one token, the string.

Duplicate tokens inside a record are removed. Everything is numpy/pyarrow (and one numba kernel)
over whole batches: no per-row Python.

The q-gram path (issue 16) never builds a string per gram, nor hashes strings. numpy finds the
characters (UTF-8 lead bytes) and each gram's byte range in the batch's one byte buffer, and packs
the 8 bytes at each gram's start into a uint64 (one unaligned little-endian window read). A numba
kernel then walks the records: a gram's key is its window cut to its length; a small hash set per
record keeps the first gram of every distinct value (equal keys and lengths are equal grams up to 8
bytes, every gram of ASCII text with q <= 8; longer ones, multi-byte characters, compare their
remaining bytes, so every q is exact), and copies only those grams' bytes out, straight into the
result's string buffer. Each record's tokens come out in first-appearance order.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

__all__ = ["tokenize", "token_codes", "sort_within"]


def _string_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(UTF-8 bytes, absolute int64 offsets) of a string array; nulls are empty strings."""
    arr = pc.fill_null(arr.cast(pa.string()), "")
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset: arr.offset + len(arr) + 1].astype(np.int64)
    data = arr.buffers()[2]
    return (np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)), offsets


def _split(low: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Split on whitespace: (int64 record offsets, the words; empty strings included, callers drop them)."""
    sp = pc.utf8_split_whitespace(pc.fill_null(low, ""))
    if isinstance(sp, pa.ChunkedArray):
        sp = sp.combine_chunks()
    raw = sp.offsets.to_numpy().astype(np.int64)
    return raw - raw[0], sp.values.slice(int(raw[0]), int(raw[-1] - raw[0]))


# _LOW[k]: a uint64 mask of its k low bytes (the first k bytes of a little-endian 8-byte window).
_LOW = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)
_MIX = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: the high bits of key * _MIX


def _windows(buf: np.ndarray) -> np.ndarray:
    """``w[p]`` = the bytes ``buf[p:p + 8]`` as one little-endian uint64: an overlapping, unaligned view (no copy).

    Positions up to ``len(buf) - 8``, so ``buf`` needs 8 bytes of padding after its last real byte."""
    return np.ndarray(shape=(len(buf) - 7,), dtype="<u8", buffer=buf, offset=0, strides=(1,))


@njit(cache=True, nogil=True)
def _distinct_grams(buf: np.ndarray, window: np.ndarray, b0: np.ndarray, b1: np.ndarray, gram_off: np.ndarray,
                    offsets: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Record r has the grams ``gram_off[r]:gram_off[r + 1]``; gram j is ``buf[b0[j]:b1[j]]`` and ``window[j]``
    the 8 bytes at ``b0[j]`` packed into a uint64. Writes out the first gram of every distinct value of each
    record, in record order: returns (distinct grams per record, a buffer of at least ``cap`` bytes that starts
    with their bytes), their string offsets in ``offsets[:count + 1]``.

    A gram's key is its window cut to its first (up to) 8 bytes; grams with equal keys and lengths are equal
    up to 8 bytes, longer ones compare the rest. One small hash set per record: open addressing, at most half
    full, reused without clearing (a slot counts only if it was filled for this record).
    ``buf`` must have 8 readable bytes after every gram's start; ``cap`` must be at least their total bytes + 8."""
    n = gram_off.shape[0] - 1
    biggest = 1
    for r in range(n):
        biggest = max(biggest, gram_off[r + 1] - gram_off[r])
    bits = 1
    while (1 << bits) < 2 * biggest:
        bits += 1
    slot = np.empty(1 << bits, np.int64)  # the gram in a slot ...
    owner = np.full(1 << bits, -1, np.int64)  # ... if the slot was filled for record owner[slot]
    counts = np.zeros(n, np.int64)
    data = np.empty(cap, np.uint8)
    offsets[0] = 0
    u = 0
    p = 0
    for r in range(n):
        bits = 1
        while (1 << bits) < 2 * (gram_off[r + 1] - gram_off[r]):  # a record of m grams: 2^bits >= 2m slots
            bits += 1
        mask = (1 << bits) - 1
        shift = np.uint64(64 - bits)
        c = 0
        for j in range(gram_off[r], gram_off[r + 1]):
            a = b0[j]
            length = b1[j] - a
            k = window[j] & _LOW[min(length, 8)]
            h = np.int64((k * _MIX) >> shift)
            while owner[h] == r:
                o = slot[h]
                if b1[o] - b0[o] == length and window[o] & _LOW[min(length, 8)] == k:
                    same = True
                    for t in range(8, length):
                        if buf[b0[o] + t] != buf[a + t]:
                            same = False
                            break
                    if same:
                        break
                h = (h + 1) & mask
            else:  # a new value in this record: keep it, copy its bytes (8 at once, then the rest)
                owner[h] = r
                slot[h] = j
                for t in range(8):
                    data[p + t] = buf[a + t]
                for t in range(8, length):
                    data[p + t] = buf[a + t]
                p += length
                u += 1
                offsets[u] = p
                c += 1
        counts[r] = c
    return counts, data


def _qgrams(low: pa.Array, q: int) -> tuple[np.ndarray, pa.Array]:
    """Record offsets and values of every record's distinct q-grams (each record's in first-appearance order)."""
    data, offs = _string_parts(low)
    lo, hi = int(offs[0]), int(offs[-1])
    nbytes = hi - lo
    offs = offs - lo
    pad = q + 8  # zero bytes after the batch: whole 8-byte windows, and q characters past any string's start
    buf = np.zeros(nbytes + pad, np.uint8)
    buf[:nbytes] = data[lo:hi]

    # Characters start at the bytes that are not UTF-8 continuation bytes (10xxxxxx); each padding byte is one.
    # char_at[c] = the byte position of character c (c < n_char: the batch's; then nbytes, nbytes + 1, ...).
    lead = (buf & 0xC0) != 0x80
    if int(np.count_nonzero(lead)) == len(buf):  # ASCII: character c is byte c
        char_at = None
        first_char = offs
    else:
        char_at = np.flatnonzero(lead)
        first_char = np.searchsorted(char_at, offs)
    nchar = np.diff(first_char)
    n_char = int(first_char[-1])

    # Grams start at every character but the last q - 1 of its string; a string of 1 to q - 1 characters
    # is one gram, the whole string.
    short = np.flatnonzero((nchar > 0) & (nchar < q))
    ngram = np.where(nchar >= q, nchar - q + 1, 0)
    ngram[short] = 1
    gram_off = np.concatenate([[0], np.cumsum(ngram)]).astype(np.int64)
    starts = np.ones(n_char, bool)
    ends = first_char[1:]
    for k in range(1, q):
        starts[ends[nchar >= k] - k] = False
    starts[first_char[short]] = True
    g0 = np.flatnonzero(starts)
    if char_at is None:
        b0, b1 = g0, g0 + q
    else:
        b0, b1 = char_at[g0], char_at[g0 + q]
    b1[gram_off[short]] = offs[short + 1]

    # The 8 bytes at each gram's start as one uint64, straight from the byte buffer (the kernel cuts them to
    # the gram's length); then the distinct grams of each record, written out as strings.
    window = _windows(buf)[b0].astype(np.uint64, copy=False)
    cap = q * nbytes + 8  # every byte is in at most q grams
    offsets = np.empty(len(g0) + 1, np.int32 if cap <= np.iinfo(np.int32).max else np.int64)
    counts, v_data = _distinct_grams(buf, window, b0, b1, gram_off, offsets, cap)
    offsets = offsets[: int(counts.sum()) + 1]
    used = int(offsets[-1])
    if used > np.iinfo(np.int32).max:
        raise ValueError(f"the q-grams of this batch take {used} bytes (> 2 GiB): tokenize smaller batches")
    # (v_data past ``used`` + 8 bytes was never written: no memory is committed for it.)
    values = pa.StringArray.from_buffers(len(offsets) - 1, pa.py_buffer(offsets.astype(np.int32, copy=False)),
                                         pa.py_buffer(v_data[:used]))
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), values


@njit(cache=True, nogil=True)
def _distinct_codes(rec_off: np.ndarray, codes: np.ndarray, d: int, skip: int) -> tuple[np.ndarray, np.ndarray]:
    """Each record's distinct codes in first-appearance order, ``skip`` (the empty token's code, or -1)
    dropped: (new record offsets, codes). One pass: ``last[c]`` is the last record that kept code c."""
    n = rec_off.shape[0] - 1
    last = np.full(d, -1, np.int64)
    out = np.empty(codes.shape[0], np.int32)
    off = np.empty(n + 1, np.int64)
    p = 0
    for r in range(n):
        off[r] = p
        for j in range(rec_off[r], rec_off[r + 1]):
            c = codes[j]
            if c != skip and last[c] != r:
                last[c] = r
                out[p] = c
                p += 1
    off[n] = p
    return off, out[:p]


@njit(cache=True, nogil=True)
def sort_within(offsets: np.ndarray, values: np.ndarray) -> None:
    """Sort each record's slice ``values[offsets[r]:offsets[r + 1]]`` in place (insertion sort for the
    short ones, numpy's sort for the long)."""
    for r in range(offsets.shape[0] - 1):
        a, b = offsets[r], offsets[r + 1]
        if b - a > 32:
            values[a:b] = np.sort(values[a:b])
            continue
        for i in range(a + 1, b):
            v = values[i]
            j = i - 1
            while j >= a and values[j] > v:
                values[j + 1] = values[j]
                j -= 1
            values[j + 1] = v


def token_codes(text: pa.Array, qgram: int | None) -> tuple[np.ndarray, pa.Array, np.ndarray]:
    """Each string's distinct tokens as codes into one dictionary of the batch: (int64 record offsets,
    the dictionary (strings), int32 codes). A null string has no tokens. Record r's tokens are
    ``dictionary[codes[offsets[r]:offsets[r + 1]]]``, in first-appearance order. The dictionary may
    hold an entry no code uses (the empty string)."""
    if qgram is not None and qgram < 1:
        raise ValueError(f"qgram must be at least 1, not {qgram}")
    low = pc.utf8_lower(text)
    if isinstance(low, pa.ChunkedArray):
        low = low.combine_chunks()
    if qgram is not None:
        rec_off, values = _qgrams(low, qgram)
        enc = pc.dictionary_encode(values)
        return rec_off, enc.dictionary, enc.indices.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    raw, values = _split(low)
    enc = pc.dictionary_encode(values)
    dictionary = enc.dictionary
    empty = pc.index_in(pa.array([""]), value_set=dictionary)[0].as_py()
    codes = enc.indices.to_numpy(zero_copy_only=False)
    rec_off, out = _distinct_codes(raw, codes, len(dictionary), -1 if empty is None else int(empty))
    return rec_off, dictionary, out


def tokenize(text: pa.Array, qgram: int | None) -> pa.ListArray:
    """Each string's distinct tokens as ``list<string>``; a null string gives an empty list."""
    if qgram is not None and qgram < 1:
        raise ValueError(f"qgram must be at least 1, not {qgram}")
    if qgram is not None:
        low = pc.utf8_lower(text)
        rec_off, values = _qgrams(low.combine_chunks() if isinstance(low, pa.ChunkedArray) else low, qgram)
    else:
        rec_off, dictionary, codes = token_codes(text, None)
        values = dictionary.take(pa.array(codes))
    return pa.ListArray.from_arrays(pa.array(rec_off.astype(np.int32)), values)
