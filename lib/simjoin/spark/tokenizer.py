"""Vectorized tokenizers over Arrow string arrays (run inside ``mapInArrow``).

- ``word``: lower-cased words split on Unicode whitespace (as Python's ``str.lower().split()``).
- ``qgram:q``: lower-cased character q-grams; a string shorter than q is one token, the string.

Duplicate tokens inside a record are removed. Everything is numpy/pyarrow over whole batches:
no per-row Python.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["tokenize"]


def _prev_cumsum(x: np.ndarray) -> np.ndarray:
    c = np.cumsum(x, dtype=np.int64)
    return c - x


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + l)`` for every (s, l)."""
    total = int(lengths.sum())
    return np.repeat(starts.astype(np.int64) - _prev_cumsum(lengths), lengths) + np.arange(total, dtype=np.int64)


def _string_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(UTF-8 bytes, absolute int64 offsets) of a string array; nulls are empty strings."""
    arr = pc.fill_null(arr.cast(pa.string()), "")
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset: arr.offset + len(arr) + 1].astype(np.int64)
    data = arr.buffers()[2]
    return (np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)), offsets


def _from_ranges(data: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> pa.Array:
    """A string array whose value j is ``data[b0[j]:b1[j]]``."""
    lens = (b1 - b0).astype(np.int64)
    out = data[_ranges(b0, lens)]
    offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    return pa.StringArray.from_buffers(len(lens), pa.py_buffer(offs), pa.py_buffer(out.tobytes()))


def _words(low: pa.Array) -> tuple[np.ndarray, pa.Array]:
    sp = pc.utf8_split_whitespace(pc.fill_null(low, ""))
    if isinstance(sp, pa.ChunkedArray):
        sp = sp.combine_chunks()
    raw = sp.offsets.to_numpy().astype(np.int64)
    values = sp.values.slice(int(raw[0]), int(raw[-1] - raw[0]))
    keep = pc.not_equal(values, "").to_numpy(zero_copy_only=False)
    row = np.repeat(np.arange(len(sp), dtype=np.int64), np.diff(raw))
    counts = np.bincount(row[keep], minlength=len(sp))
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), values.filter(pa.array(keep))


def _qgrams(low: pa.Array, q: int) -> tuple[np.ndarray, pa.Array]:
    data, offs = _string_parts(low)
    n = len(offs) - 1
    region = data[offs[0]: offs[-1]] if n else data[:0]
    char_pos = np.flatnonzero((region & 0xC0) != 0x80).astype(np.int64) + (offs[0] if n else 0)
    first_char = np.searchsorted(char_pos, offs)  # char index of each string's first char (+ end)
    nchar = np.diff(first_char)
    ngram = np.where(nchar == 0, 0, np.maximum(nchar - q + 1, 1)).astype(np.int64)
    row = np.repeat(np.arange(n, dtype=np.int64), ngram)
    g0 = _ranges(first_char[:-1], ngram)  # char index of each gram's first char
    g1 = np.minimum(g0 + q, first_char[1:][row])  # one past its last char, inside its string
    b0 = char_pos[g0]
    b1 = np.where(g1 >= first_char[1:][row], offs[1:][row], char_pos[np.minimum(g1, max(len(char_pos) - 1, 0))])
    return np.concatenate([[0], np.cumsum(ngram)]).astype(np.int64), _from_ranges(data, b0, b1)


def _distinct(rec_off: np.ndarray, values: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Drop repeated tokens inside each record (tokens come out sorted by first appearance in the batch)."""
    n = len(rec_off) - 1
    if len(values) == 0:
        return np.zeros(n + 1, np.int64), values
    enc = pc.dictionary_encode(values)
    idx = enc.indices.to_numpy().astype(np.int64)
    d = len(enc.dictionary)
    row = np.repeat(np.arange(n, dtype=np.int64), np.diff(rec_off))
    key = np.sort(row * d + idx)
    if key.size:
        key = key[np.concatenate([[True], key[1:] != key[:-1]])]
    row_u = key // d
    counts = np.bincount(row_u, minlength=n)
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), enc.dictionary.take(pa.array(key % d))


def tokenize(text: pa.Array, qgram: int | None) -> pa.ListArray:
    """Each string's distinct tokens as ``list<string>``; a null string gives an empty list."""
    low = pc.utf8_lower(text)
    if isinstance(low, pa.ChunkedArray):
        low = low.combine_chunks()
    rec_off, values = _words(low) if qgram is None else _qgrams(low, qgram)
    rec_off, values = _distinct(rec_off, values)
    return pa.ListArray.from_arrays(pa.array(rec_off.astype(np.int32)), values)
