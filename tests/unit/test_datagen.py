import numpy as np
import pytest

from simjoin.core import datagen


def test_sets_deterministic_and_near_duplicates():
    ids, a = datagen.gen_sets(0, 2000, seed=5)
    _, b = datagen.gen_sets(0, 2000, seed=5)
    assert a == b and ids.tolist() == list(range(2000))
    assert all(t.strip() for t in a)
    sets = [frozenset(t.split()) for t in a]
    best = 0.0
    for i in range(200):
        for j in range(i + 1, 2000):
            u = len(sets[i] | sets[j])
            best = max(best, len(sets[i] & sets[j]) / u)
    assert best >= 0.8, "planted near-duplicates give high-Jaccard pairs"


@pytest.mark.parametrize("dist", datagen.VECTOR_DISTS)
def test_vectors(dist):
    x = datagen.gen_vectors(0, 500, 4, dist, seed=1)
    assert x.shape == (500, 4) and np.isfinite(x).all()
    assert np.array_equal(x, datagen.gen_vectors(0, 500, 4, dist, seed=1))


def test_timestamps_rate():
    ts = datagen.timestamps_us(0, 501, 50.0)
    assert (ts[-1] - ts[0]) == 10_000_000


def test_keys_zipf_skew_and_errors():
    k = datagen.gen_keys(0, 20000, 1.5, 100, seed=3)
    counts = np.bincount(k, minlength=100)
    assert counts[0] > 5 * counts[10] and k.min() >= 0 and k.max() < 100
    with pytest.raises(ValueError, match="allowed"):
        datagen.gen_vectors(0, 5, 2, "lognormal", 1)
    with pytest.raises(ValueError, match="allowed"):
        datagen.gen_ineq(0, 5, "zipf", 1)
