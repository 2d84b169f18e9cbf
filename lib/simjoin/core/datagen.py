"""Synthetic inputs for every join family, pure numpy and deterministic per (seed, chunk).

Data are produced in chunks of ``CHUNK_ROWS`` rows so that Spark can generate them in
parallel; chunk ``c`` draws from ``SeedSequence([seed, c])``, so the same seed always gives
the same table whatever the parallelism.

- sets: Zipf-distributed tokens, with planted near-duplicate clusters (a fraction of records
  are perturbed copies of earlier ones), so Jaccard joins at 0.6-0.9 have results.
- vectors: the S3J authors' generators (uniform U[-1,1]^d, gaussian N(-1, 2), skewed
  gaussian, Pareto(scale 1, shape 10)) plus a clustered mixture.
- ineq: (a, b) pairs as in SPO-Join's POWER/COOL style workloads, uniform or Pareto a.
- keys: Zipf(alpha) join keys over a domain of K values (Streaming HyperCube workloads).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "CHUNK_ROWS",
    "VECTOR_DISTS",
    "INEQ_DISTS",
    "chunk_bounds",
    "chunk_rng",
    "zipf_probabilities",
    "gen_sets",
    "gen_vectors",
    "gen_ineq",
    "gen_keys",
    "timestamps_us",
    "T0_US",
]

CHUNK_ROWS = 50_000
VECTOR_DISTS = ("uniform", "gaussian", "skewed", "pareto", "clustered")
INEQ_DISTS = ("uniform", "pareto", "correlated")
#: correlated: b = a + N(0, CORRELATED_SIGMA). Q1 (l.a < r.a AND l.b > r.b) then matches only pairs whose
#: noise inverts their order: about 0.56 * sigma * (window / 75,000) tuples per probe.
CORRELATED_SIGMA = 2.0
# 2026-01-01T00:00:00Z in microseconds: generated streams start here, so reruns are identical.
T0_US = 1_767_225_600_000_000


def chunk_bounds(rows: int, chunk_rows: int = CHUNK_ROWS) -> list[tuple[int, int]]:
    return [(s, min(rows, s + chunk_rows)) for s in range(0, rows, chunk_rows)]


def chunk_rng(seed: int, chunk: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(chunk)]))


def zipf_probabilities(domain: int, alpha: float) -> np.ndarray:
    p = np.arange(1, domain + 1, dtype=np.float64) ** (-float(alpha))
    return p / p.sum()


def _zipf_draw(rng: np.random.Generator, cdf: np.ndarray, size: int) -> np.ndarray:
    return np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), len(cdf) - 1)


def timestamps_us(start: int, stop: int, rate: float) -> np.ndarray:
    """Ingestion timestamps: row i arrives at T0 + i / rate seconds."""
    return T0_US + np.floor(np.arange(start, stop, dtype=np.float64) * (1e6 / rate)).astype(np.int64)


def gen_sets(
    start: int,
    stop: int,
    seed: int,
    universe: int = 20_000,
    avg_len: int = 12,
    dup_frac: float = 0.25,
    alpha: float = 1.0,
) -> tuple[np.ndarray, list[str]]:
    """Rows [start, stop): ids and texts of space-separated word tokens ``w<rank>``."""
    rng = chunk_rng(seed, start // CHUNK_ROWS)
    n = stop - start
    cdf = np.cumsum(zipf_probabilities(universe, alpha))
    lengths = np.maximum(1, rng.poisson(avg_len, n))
    flat = _zipf_draw(rng, cdf, int(lengths.sum()))
    offs = np.concatenate([[0], np.cumsum(lengths)])
    records: list[np.ndarray] = [np.unique(flat[offs[i]: offs[i + 1]]) for i in range(n)]
    # Plant near-duplicate clusters: a copy of an earlier record with about 1/8 of its tokens replaced.
    dup = rng.random(n) < dup_frac
    for i in np.nonzero(dup)[0]:
        if i == 0:
            continue
        base = records[int(rng.integers(0, i))]
        k = max(1, len(base) // 8) if len(base) > 2 else 0
        keep = rng.permutation(len(base))[: len(base) - k]
        repl = _zipf_draw(rng, cdf, k)
        records[i] = np.unique(np.concatenate([base[keep], repl]))
    texts = [" ".join(f"w{t}" for t in r.tolist()) for r in records]
    return np.arange(start, stop, dtype=np.int64), texts


def gen_vectors(start: int, stop: int, dim: int, dist: str, seed: int) -> np.ndarray:
    """Rows [start, stop) of ``dim``-dimensional vectors from ``dist``."""
    if dist not in VECTOR_DISTS:
        raise ValueError(f"invalid dist {dist!r}: allowed {', '.join(VECTOR_DISTS)}")
    if dim < 1:
        raise ValueError(f"invalid dim {dim}: allowed >= 1")
    rng = chunk_rng(seed, start // CHUNK_ROWS)
    n = stop - start
    if dist == "uniform":
        return rng.uniform(-1.0, 1.0, (n, dim))
    if dist == "gaussian":
        return rng.normal(-1.0, 2.0, (n, dim))
    if dist == "skewed":
        # skew-normal with shape 4 (Azzalini's construction), centred like the gaussian stream
        a = 4.0
        u0, v = rng.normal(size=(n, dim)), rng.normal(size=(n, dim))
        d = a / np.sqrt(1 + a * a)
        return -1.0 + 2.0 * (d * np.abs(u0) + np.sqrt(1 - d * d) * v)
    if dist == "pareto":
        return 1.0 * (1.0 + rng.pareto(10.0, (n, dim)))
    centers = chunk_rng(seed, 2**31).uniform(-1.0, 1.0, (8, dim))
    return centers[rng.integers(0, 8, n)] + rng.normal(0.0, 0.05, (n, dim))


def gen_ineq(start: int, stop: int, dist: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if dist not in INEQ_DISTS:
        raise ValueError(f"invalid dist {dist!r}: allowed {', '.join(INEQ_DISTS)}")
    rng = chunk_rng(seed, start // CHUNK_ROWS)
    n = stop - start
    a = rng.pareto(3.0, n) * 1000.0 if dist == "pareto" else rng.uniform(0.0, 75_000.0, n)
    b = a + rng.normal(0.0, CORRELATED_SIGMA, n) if dist == "correlated" else rng.uniform(0.0, 75_000.0, n)
    return a, b


def gen_aqi(start: int, stop: int, domain: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Air-quality readings like S2J's case study (Section 1): a station id in ``[0, domain)``,
    PM2.5 (log-normal, median about 35 ug/m3) and PM10 (about 1.6 x PM2.5 plus noise), both to
    0.1 as monitors report them (so ties and exact boundary gaps are common)."""
    if domain < 1:
        raise ValueError(f"invalid domain {domain}: allowed >= 1")
    rng = chunk_rng(seed, start // CHUNK_ROWS)
    n = stop - start
    station = rng.integers(0, domain, n).astype(np.int64)
    pm25 = np.round(rng.lognormal(np.log(35.0), 0.6, n), 1)
    pm10 = np.round(np.maximum(0.0, pm25 * 1.6 + rng.normal(0.0, 12.0, n)), 1)
    return station, pm25, pm10


def gen_keys(start: int, stop: int, alpha: float, domain: int, seed: int) -> np.ndarray:
    if domain < 1:
        raise ValueError(f"invalid domain {domain}: allowed >= 1")
    if alpha < 0:
        raise ValueError(f"invalid alpha {alpha}: allowed >= 0 (0: uniform)")
    rng = chunk_rng(seed, start // CHUNK_ROWS)
    return _zipf_draw(rng, np.cumsum(zipf_probabilities(domain, alpha)), stop - start).astype(np.int64)
