"""The compiled key hash the uniqueness check uses equals the numpy expression it replaced, on
every int64 value (negatives, the extremes) and any number of key columns."""

from __future__ import annotations

import numpy as np
import pytest

from simjoin.core.hashing import mix_keys


def _mix_numpy(keys: list[np.ndarray]) -> np.ndarray:
    with np.errstate(over="ignore"):
        h = np.full(keys[0].shape[0], 0x9E3779B97F4A7C15, dtype=np.uint64)
        for k in keys:
            h = h ^ (k.view(np.uint64) + np.uint64(0x9E3779B97F4A7C15) + (h << np.uint64(6)) + (h >> np.uint64(2)))
            h = h ^ (h >> np.uint64(30))
            h = h * np.uint64(0xBF58476D1CE4E5B9)
            h = h ^ (h >> np.uint64(27))
            h = h * np.uint64(0x94D049BB133111EB)
            h = h ^ (h >> np.uint64(31))
    return h.view(np.int64)


@pytest.mark.parametrize("cols", [1, 2, 3, 5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mix_keys_equals_the_numpy_expression(cols, seed):
    rng = np.random.default_rng(seed)
    n = 10_000
    keys = [rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, n, dtype=np.int64, endpoint=True)
            for _ in range(cols)]
    keys[0][:4] = [0, -1, np.iinfo(np.int64).min, np.iinfo(np.int64).max]
    assert np.array_equal(mix_keys(keys), _mix_numpy(keys))


def test_mix_keys_tells_rows_apart_and_repeats_alike():
    a = np.array([1, 2, 1, 3], np.int64)
    b = np.array([5, 5, 5, 5], np.int64)
    h = mix_keys([a, b])
    assert h[0] == h[2] and len({int(h[0]), int(h[1]), int(h[3])}) == 3
    assert mix_keys([np.zeros(0, np.int64)]).shape == (0,)
