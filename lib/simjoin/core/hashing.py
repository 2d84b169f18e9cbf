"""Spark's Murmur3 ``hash()`` of a long column, vectorized in numpy (pure: the core and the Spark
adapters share it). ``simjoin.spark.routing`` uses it to route task ids to partitions; the Streaming
HyperCube dispatcher hashes keys (light tasks) and ids (grid coordinates) with it."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["spark_hash_long", "splitmix64", "mix_keys"]


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_k1(k: np.ndarray) -> np.ndarray:
    return _rotl(k * np.uint32(0xCC9E2D51), 15) * np.uint32(0x1B873593)


def _mix_h1(h: np.ndarray, k: np.ndarray) -> np.ndarray:
    return _rotl(h ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)


def spark_hash_long(values: np.ndarray, seed: int = 42) -> np.ndarray:
    """Spark's ``hash()`` of a long column (Murmur3_x86_32 ``hashLong``, seed 42), vectorized."""
    v = np.asarray(values, dtype=np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        h = _mix_h1(np.full(v.shape, seed, np.uint32), _mix_k1((v & np.uint64(0xFFFFFFFF)).astype(np.uint32)))
        h = _mix_h1(h, _mix_k1((v >> np.uint64(32)).astype(np.uint32)))
        h ^= np.uint32(8)
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h *= np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    return h.view(np.int32)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser of uint64 values, vectorized (a well-mixed 64-bit hash)."""
    z = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix_into() -> Any:
    """The compiled step of :func:`mix_keys` (``simjoin.core.compiled``: numba is imported on first
    use, so importing this module stays cheap for its numpy-only callers)."""
    from simjoin.core.compiled import mix_into

    return mix_into


def mix_keys(keys: list[np.ndarray]) -> np.ndarray:
    """A 64-bit hash per row of int64 key columns: a running combination of the columns, each
    step finished by splitmix64's finaliser. One compiled pass per column (numba), no temporaries;
    the same values as the numpy expression it replaces (``tests/unit/test_hashing.py``)."""
    n = keys[0].shape[0] if keys else 0
    h = np.full(n, _GOLDEN, np.uint64)
    step = _mix_into()
    for k in keys:
        step(h, np.ascontiguousarray(k, np.int64).view(np.uint64))
    return h.view(np.int64)
