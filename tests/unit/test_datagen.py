import itertools
import re

import numpy as np
import pyarrow as pa
import pytest

from simjoin.core import datagen


def _jaccard(tok: np.ndarray, offs: np.ndarray) -> np.ndarray:
    """All-pairs Jaccard of the records (tokens, offsets) of ``gen_set_tokens``."""
    from scipy.sparse import csr_matrix

    x = csr_matrix((np.ones(len(tok), np.float32), tok, offs), shape=(len(offs) - 1, int(tok.max()) + 1))
    inter = (x @ x.T).toarray()
    lens = np.diff(offs)
    return inter / (lens[:, None] + lens[None, :] - inter)


def _rows(tok: np.ndarray, offs: np.ndarray, rows) -> tuple[np.ndarray, np.ndarray]:
    segs = [tok[offs[i]: offs[i + 1]] for i in rows]
    return np.concatenate(segs), np.concatenate([[0], np.cumsum([len(x) for x in segs])])


MODES = [(lengths, dist) for lengths in datagen.SET_LENGTHS for dist in datagen.SET_DISTS]


def test_sets_deterministic_and_near_duplicates():
    ids, a = datagen.gen_sets(0, 2000, seed=5)
    _, b = datagen.gen_sets(0, 2000, seed=5)
    assert isinstance(a, pa.StringArray) and a.equals(b) and ids.tolist() == list(range(2000))
    assert not a.equals(datagen.gen_sets(0, 2000, seed=6)[1])
    sets = [frozenset(t.split()) for t in a.to_pylist()]
    best = 0.0
    for i in range(200):
        for j in range(i + 1, 2000):
            u = len(sets[i] | sets[j])
            best = max(best, len(sets[i] & sets[j]) / u)
    assert best >= 0.8, "planted near-duplicates give high-Jaccard pairs"


@pytest.mark.parametrize(("lengths", "dist"), MODES)
def test_sets_records_are_nonempty_distinct_sorted_words(lengths, dist):
    n = 3000 if lengths != "long" else 600
    ids, texts = datagen.gen_sets(100, 100 + n, 11, lengths=lengths, dist=dist)
    assert ids.tolist() == list(range(100, 100 + n)) and len(texts) == n and texts.null_count == 0
    universe = datagen.set_universe(20_000, lengths)
    for t in texts.to_pylist():
        words = t.split(" ")
        assert words and all(re.fullmatch(r"w(0|[1-9][0-9]*)", w) for w in words), t
        ranks = [int(w[1:]) for w in words]
        assert ranks == sorted(set(ranks)) and ranks[-1] < universe, "distinct tokens, sorted by rank"
    tok, offs = datagen.gen_set_tokens(100, 100 + n, 11, lengths=lengths, dist=dist)
    assert np.diff(offs).min() >= 1
    assert [" ".join(f"w{r}" for r in tok[offs[i]: offs[i + 1]]) for i in range(n)] == texts.to_pylist()


@pytest.mark.parametrize(("lengths", "dist"), MODES)
def test_sets_same_rows_whatever_the_chunking(lengths, dist):
    ch = datagen.CHUNK_ROWS
    if lengths == "long":  # a whole chunk of long records takes seconds: cut within chunks
        spans = [[0, 17, 700, 1500], [ch, ch + 1, ch + 400]]
    else:
        spans = [[0, ch, ch + 3000], [0, 17, 40_000, ch + 1, ch + 3000], [0, 1234, ch + 3000]]
    for cuts in spans:
        whole = datagen.gen_sets(cuts[0], cuts[-1], 7, lengths=lengths, dist=dist)[1]
        parts = [datagen.gen_sets(s, e, 7, lengths=lengths, dist=dist)[1] for s, e in itertools.pairwise(cuts)]
        assert pa.concat_arrays(parts).equals(whole), cuts
        assert datagen.gen_sets(cuts[0], cuts[-1], 7, lengths=lengths, dist=dist)[1].equals(whole)
    assert len(datagen.gen_sets(5, 5, 7, lengths=lengths, dist=dist)[1]) == 0


def test_sets_zipf_lengths_and_tokens():
    tok, offs = datagen.gen_set_tokens(0, 20_000, 3)
    lens = np.diff(offs)
    assert lens.min() >= 1 and abs(lens.mean() - 12) < 0.2 and 2.5 < lens.std() < 4.0  # Poisson(12)
    counts = np.bincount(tok, minlength=20_000)
    assert counts[0] > 1.2 * counts[1] > 1.2 * counts[3] > 1.2 * counts[10]  # Zipf ranks, most frequent first
    assert counts[:10].sum() > counts[100:200].sum()
    assert tok.max() < 20_000


def test_sets_aol_lengths():
    tok, offs = datagen.gen_set_tokens(0, 30_000, 3, lengths="aol")
    lens = np.diff(offs)
    assert 0.7 <= (lens <= 4).mean() <= 0.9 and lens.min() == 1 and lens.max() <= 30
    assert (lens >= 10).mean() > 0.01 and 3.0 < lens.mean() < 4.0
    assert np.bincount(lens)[2:4].sum() / len(lens) > 0.4, "most mass on 2-3 tokens"
    # one-word records rarely coincide (flatter tokens over a larger vocabulary)
    ones = tok[offs[:-1][lens == 1]]
    assert len(np.unique(ones)) > 0.6 * len(ones)


def test_sets_long_lengths():
    tok, offs = datagen.gen_set_tokens(0, 2000, 3, lengths="long")
    lens = np.diff(offs)
    assert lens.min() >= 100 and lens.max() <= 300 and 190 < lens.mean() < 210
    assert tok.max() >= 20_000, "a vocabulary larger than the default 20,000 words"
    j = _jaccard(tok, offs)
    np.fill_diagonal(j, 0.0)
    orig = np.median(j, axis=1)
    assert np.median(orig) < 0.15, "records are not all alike"
    best = j.max(axis=1)
    for theta in (0.6, 0.7, 0.8, 0.9):
        assert (best >= theta).sum() >= 20, f"planted near-duplicates at θ {theta}"


def test_cluster_probabilities_shape():
    p = datagen.cluster_probabilities()
    assert len(p) == datagen.ND_CLUSTERS and abs(p.sum() - 1) < 1e-9 and (np.diff(p) <= 1e-15).all()
    assert p[0] <= datagen.ND_CLUSTER_CAP + 1e-12 and p[0] > 50 * np.median(p)
    sizes = p * 250_000  # dup_frac 0.25 of 1M rows
    assert 2000 <= sizes[0] <= 5000 and (sizes >= 1000).sum() >= 3 and 100 <= (sizes >= 100).sum() <= 500
    assert 5e6 < (sizes**2 / 2).sum() < 5e7, "the θ 0.6 join stays in the tens of millions of pairs"


@pytest.mark.parametrize("lengths", ["zipf", "aol"])
def test_near_duplicate_clusters(lengths):
    n = 2 * datagen.CHUNK_ROWS
    tok, offs = datagen.gen_set_tokens(0, n, 3, lengths=lengths, dist="near-duplicates")
    cl = datagen.set_clusters(0, n, 3)
    assert np.array_equal(cl, np.concatenate([datagen.set_clusters(0, 777, 3), datagen.set_clusters(777, n, 3)]))
    members = cl >= 0
    assert 0.24 < members.mean() < 0.26  # dup_frac
    sizes = np.bincount(cl[members])
    order = np.argsort(sizes)[::-1]
    assert sizes[order[0]] > 0.009 * members.sum() and sizes[order[:10]].sum() > 0.06 * members.sum()
    assert np.median(sizes[sizes > 0]) <= 3, "heavily skewed: most clusters hold a few copies"
    # the big clusters span both chunks, and their copies are near-duplicates of each other
    within = []
    for c in order[:8]:
        rows = np.flatnonzero(cl == c)
        first, second = rows[rows < datagen.CHUNK_ROWS], rows[rows >= datagen.CHUNK_ROWS]
        assert len(first) > 20 and len(second) > 20
        sample = np.concatenate([first[:30], second[:30]])
        j = _jaccard(*_rows(tok, offs, sample))
        within.append(j[np.triu_indices(len(sample), 1)])
    w = np.concatenate(within)
    assert (w >= 0.6).mean() > 0.6 and (w >= 0.7).mean() > 0.25
    # records outside clusters are not near-duplicates of each other
    others = np.flatnonzero(~members)[:500]
    j = _jaccard(*_rows(tok, offs, others))
    assert (j[np.triu_indices(len(others), 1)] >= 0.6).mean() < 0.001


def test_near_duplicate_seeds_depend_on_the_seed_only():
    # the same cluster's copies in far-apart chunks of one block resemble each other
    lo, hi = 0, datagen.ND_BLOCK_ROWS - 3000
    a = datagen.gen_set_tokens(lo, lo + 3000, 9, dist="near-duplicates")
    b = datagen.gen_set_tokens(hi, hi + 3000, 9, dist="near-duplicates")
    ca, cb = datagen.set_clusters(lo, lo + 3000, 9), datagen.set_clusters(hi, hi + 3000, 9)
    top = np.bincount(ca[ca >= 0]).argmax()
    ra, rb = np.flatnonzero(ca == top)[:10], np.flatnonzero(cb == top)[:10]
    assert len(ra) and len(rb)
    ta, oa = _rows(*a, ra)
    tb, ob = _rows(*b, rb)
    j = _jaccard(np.concatenate([ta, tb]), np.concatenate([oa, ob[1:] + oa[-1]]))
    assert np.median(j[: len(ra), len(ra):]) >= 0.6


def test_sets_bad_values():
    with pytest.raises(ValueError, match=r"invalid lengths 'short': allowed zipf, aol, long"):
        datagen.gen_sets(0, 5, 1, lengths="short")
    with pytest.raises(ValueError, match=r"invalid dist 'gaussian' for sets: allowed uniform, near-duplicates"):
        datagen.gen_sets(0, 5, 1, dist="gaussian")
    with pytest.raises(ValueError, match="dup_frac"):
        datagen.gen_sets(0, 5, 1, dup_frac=1.5)


def test_generate_config_sets_params():
    from jobs.generate.config import GenerateConfig
    from simjoin.config import ConfigError

    cfg = GenerateConfig(kind="sets", out="/tmp/x", lengths="aol", dist="near-duplicates", dup_frac=0.1)
    assert (cfg.lengths, cfg.dist, cfg.dup_frac) == ("aol", "near-duplicates", 0.1)
    assert GenerateConfig(kind="sets", out="/tmp/x").lengths == "zipf"
    with pytest.raises(ConfigError, match=r"generate\.lengths='short': allowed zipf, aol or long"):
        GenerateConfig(kind="sets", out="/tmp/x", lengths="short")
    with pytest.raises(ConfigError, match=r"generate\.lengths='aol': allowed zipf for kind vectors"):
        GenerateConfig(kind="vectors", out="/tmp/x", lengths="aol")
    with pytest.raises(ConfigError, match=r"generate\.dist='gaussian': allowed uniform or near-duplicates for sets"):
        GenerateConfig(kind="sets", out="/tmp/x", dist="gaussian")
    with pytest.raises(ConfigError, match=r"generate\.dist='near-duplicates': allowed near-duplicates only for sets"):
        GenerateConfig(kind="vectors", out="/tmp/x", dist="near-duplicates")
    with pytest.raises(ConfigError, match=r"generate\.dist='near-duplicates': allowed uniform, pareto or correlated"):
        GenerateConfig(kind="ineq", out="/tmp/x", dist="near-duplicates")
    with pytest.raises(ConfigError, match=r"generate\.dup_frac=0\.5: allowed 0\.25 for kind keys"):
        GenerateConfig(kind="keys", out="/tmp/x", dup_frac=0.5)
    with pytest.raises(ConfigError, match=r"generate\.dup_frac=2"):
        GenerateConfig(kind="sets", out="/tmp/x", dup_frac=2.0)


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


def test_near_duplicate_blocks_have_their_own_clusters():
    # every ND_BLOCK_ROWS rows draw their own clusters: sizes, and the pairs per row, do not grow with rows
    b = datagen.ND_BLOCK_ROWS
    ca, cb = datagen.set_clusters(0, 20_000, 9), datagen.set_clusters(b, b + 20_000, 9)
    assert ca.max() < datagen.ND_CLUSTERS <= cb[cb >= 0].min() and cb.max() < 2 * datagen.ND_CLUSTERS
    assert np.bincount(ca[ca >= 0]).max() == pytest.approx(np.bincount(cb[cb >= 0] - datagen.ND_CLUSTERS).max(),
                                                           rel=0.5)
