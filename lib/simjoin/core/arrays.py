"""Named numpy arrays as one byte string, read back without copying.

A stream's state keeps serialized indexes (an inequality join's PO-Join batches: ten arrays of a
batch's size each) in a Delta table and reads them back on every micro-batch. ``np.savez`` costs
two copies per read (the zip member into memory, then into the array); :func:`pack` lays the
arrays out as raw aligned buffers behind a small JSON header, and :func:`unpack` returns read-only
views into whatever buffer holds the bytes (``bytes``, a pyarrow ``Buffer`` of the table's column),
so reading a batch costs nothing but the Parquet decode. :func:`unpack` still reads ``np.savez``
bytes, written before this layout.

Layout: ``MAGIC`` (8 bytes), the header length (8 bytes, little-endian), the header (UTF-8 JSON: a
list of ``[name, dtype, shape, offset]``), then each array's bytes at its offset, 64-byte aligned.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["MAGIC", "pack", "unpack"]

MAGIC = b"SJARRAY1"
_ALIGN = 64
_ZIP = b"PK\x03\x04"


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def pack(arrays: Mapping[str, np.ndarray]) -> bytes:
    """``arrays`` (numeric, any shape) as one byte string for :func:`unpack`."""
    items = [(name, np.require(a, requirements='C')) for name, a in arrays.items()]  # 0-d stays 0-d
    for name, a in items:
        if a.dtype.hasobject:
            raise ValueError(f"array {name!r} holds Python objects; allowed: numeric arrays")
    entries: list[list[Any]] = []
    offset = 0
    for name, a in items:
        entries.append([name, a.dtype.str, list(a.shape), offset])
        offset = _aligned(offset + a.nbytes)
    header = json.dumps(entries, separators=(",", ":")).encode()
    start = _aligned(len(MAGIC) + 8 + len(header))
    out = bytearray(start + offset)
    out[: len(MAGIC)] = MAGIC
    out[len(MAGIC) : len(MAGIC) + 8] = len(header).to_bytes(8, "little")
    out[len(MAGIC) + 8 : len(MAGIC) + 8 + len(header)] = header
    for (_, a), (_, _, _, off) in zip(items, entries, strict=True):
        out[start + off : start + off + a.nbytes] = a.reshape(-1).view(np.uint8).data
    return bytes(out)


def unpack(data: Any) -> dict[str, np.ndarray]:
    """The arrays of :func:`pack`'s bytes as read-only views into ``data`` (any buffer), or the
    arrays of ``np.savez`` bytes (copied). Raises ``ValueError`` for anything else."""
    mv = memoryview(data).cast("B")
    head = bytes(mv[: len(MAGIC)])
    if head[:4] == _ZIP:
        with np.load(io.BytesIO(mv), allow_pickle=False) as z:
            return {name: z[name] for name in z.files}
    if head != MAGIC:
        raise ValueError(f"not packed arrays (starts with {head!r}; allowed: {MAGIC!r} or an np.savez archive)")
    n = int.from_bytes(mv[len(MAGIC) : len(MAGIC) + 8], "little")
    entries = json.loads(bytes(mv[len(MAGIC) + 8 : len(MAGIC) + 8 + n]))
    start = _aligned(len(MAGIC) + 8 + n)
    out: dict[str, np.ndarray] = {}
    for name, dtype, shape, off in entries:
        dt = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        a = np.frombuffer(mv, dtype=dt, count=count, offset=start + int(off)) if count else np.empty(0, dt)
        a.flags.writeable = False  # a view into the caller's buffer (e.g. a state table's column)
        out[name] = a.reshape(tuple(shape))
    return out
