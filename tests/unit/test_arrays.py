"""Packed arrays (``simjoin.core.arrays``): exact round trips, read in place, and old ``np.savez`` bytes."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pytest

from simjoin.core.arrays import pack, unpack


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "ids": rng.integers(-(2**63), 2**63 - 1, 1001, dtype=np.int64),
        "values": rng.normal(size=(17, 3)),
        "empty": np.zeros((0, 2), np.int64),
        "scalar": np.asarray(2, np.int64),
        "flags": rng.integers(0, 2, 5).astype(bool),
        "last_empty": np.zeros(0, np.int32),
    }


def test_round_trip_is_exact_and_reads_in_place() -> None:
    want = _arrays()
    blob = pack(want)
    buf = pa.array([blob], pa.binary())[0].as_buffer()  # as a state table's column hands it over
    got = unpack(buf)
    assert list(got) == list(want)
    for name, a in want.items():
        assert got[name].dtype == a.dtype and got[name].shape == a.shape
        np.testing.assert_array_equal(got[name], a)
    ids = got["ids"]
    assert not ids.flags.writeable
    assert buf.address <= ids.ctypes.data < buf.address + buf.size  # a view, not a copy


def test_savez_bytes_still_read() -> None:
    want = _arrays()
    b = io.BytesIO()
    np.savez(b, **want)
    got = unpack(b.getvalue())
    for name, a in want.items():
        np.testing.assert_array_equal(got[name], a)


def test_anything_else_is_refused_with_one_line() -> None:
    with pytest.raises(ValueError, match="not packed arrays"):
        unpack(b"hello, world")
    with pytest.raises(ValueError, match="Python objects"):
        pack({"x": np.asarray([object()])})
