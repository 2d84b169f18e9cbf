import itertools

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


@pytest.mark.parametrize("drift", ["wander", "skew"])
def test_drift_deterministic_per_record_index(drift):
    n, kw = datagen.CHUNK_ROWS + 3000, dict(drift=drift, rate=1000.0, period=20.0, after=1)
    whole = datagen.gen_vectors(0, n, 3, "uniform", 7, **kw)
    assert whole.shape == (n, 3) and whole.dtype == np.float64 and np.isfinite(whole).all()
    assert np.abs(whole).max() <= 1.0
    for cuts in ([0, datagen.CHUNK_ROWS, n], [0, 17, 40_000, 50_001, n], [0, 1234, n]):
        parts = [datagen.gen_vectors(s, e, 3, "uniform", 7, **kw) for s, e in itertools.pairwise(cuts)]
        assert np.array_equal(np.concatenate(parts), whole)
    assert not np.array_equal(whole, datagen.gen_vectors(0, n, 3, "uniform", 8, **kw))


def test_wander_centre_moves_between_periods():
    rate, period = 100.0, 60.0
    x = datagen.gen_vectors(0, 6000 * 4, 2, "uniform", 3, drift="wander", rate=rate, period=period)
    k = datagen.drift_periods(0, len(x), rate, period)
    assert k.tolist() == np.repeat(np.arange(4), 6000).tolist()
    centres = datagen.wander_centres(3, 2, np.arange(4))
    assert np.abs(centres).max() <= 0.7
    med = [np.median(x[k == p], axis=0) for p in range(4)]
    for p in range(4):
        assert np.linalg.norm(med[p] - centres[p]) < 0.05  # the hot cluster sits on its centre
    assert np.linalg.norm(x[k == 0].mean(axis=0) - x[k == 3].mean(axis=0)) > 0.3
    assert all(np.linalg.norm(centres[p + 1] - centres[p]) > 0.1 for p in range(3))


def test_skew_turns_concentrated_after_k_periods():
    x = datagen.gen_vectors(0, 4000, 2, "uniform", 5, drift="skew", rate=10.0, period=100.0, after=2)
    k = datagen.drift_periods(0, 4000, 10.0, 100.0)
    before, later = x[k < 2], x[k >= 2]
    assert len(before) == 2000 and np.allclose(before.std(axis=0), 1 / np.sqrt(3), atol=0.03)
    assert np.array_equal(before, datagen.gen_vectors(0, 2000, 2, "uniform", 5))  # drift-free until then
    c = datagen.skew_centre(5, 2)
    near = np.linalg.norm(later - c, axis=1) < 0.2
    assert 0.87 < near.mean() < 0.95 and later.std(axis=0).max() < 0.4
    assert 0.4 <= np.linalg.norm(c) <= 0.7 + 1e-12
    # after=0: skewed from the start
    y = datagen.gen_vectors(0, 1000, 2, "uniform", 5, drift="skew", rate=10.0, period=100.0, after=0)
    assert (np.linalg.norm(y - c, axis=1) < 0.2).mean() > 0.85


def test_drift_errors():
    with pytest.raises(ValueError, match="allowed none, wander, skew"):
        datagen.gen_vectors(0, 5, 2, "uniform", 1, drift="sideways")
    with pytest.raises(ValueError, match="allowed"):
        datagen.gen_drift_vectors(0, 5, 2, "uniform", 1, "wander", period=0.0)
