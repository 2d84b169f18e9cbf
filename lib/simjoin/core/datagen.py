"""Synthetic inputs for every join family, pure numpy and deterministic per (seed, chunk).

Data are produced in chunks of ``CHUNK_ROWS`` rows so that Spark can generate them in
parallel; chunk ``c`` draws from ``SeedSequence([seed, c])``, so the same seed always gives
the same table whatever the parallelism.

- sets: Zipf-distributed tokens, with planted near-duplicate clusters (a fraction of records
  are perturbed copies of earlier ones), so Jaccard joins at 0.6-0.9 have results.
- vectors: the S3J authors' generators (uniform U[-1,1]^d, gaussian N(-1, 2), skewed
  gaussian, Pareto(scale 1, shape 10)) plus a clustered mixture; optionally drifting over time
  (``gen_drift_vectors``: a wandering hot cluster, or a stream that turns skewed).
- ineq: (a, b) pairs as in SPO-Join's POWER/COOL style workloads, uniform or Pareto a.
- keys: Zipf(alpha) join keys over a domain of K values (Streaming HyperCube workloads).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "CHUNK_ROWS",
    "VECTOR_DISTS",
    "VECTOR_DRIFTS",
    "INEQ_DISTS",
    "chunk_bounds",
    "chunk_rng",
    "zipf_probabilities",
    "gen_sets",
    "gen_vectors",
    "gen_drift_vectors",
    "drift_periods",
    "wander_centres",
    "skew_centre",
    "gen_ineq",
    "gen_keys",
    "timestamps_us",
    "T0_US",
]

CHUNK_ROWS = 50_000
VECTOR_DISTS = ("uniform", "gaussian", "skewed", "pareto", "clustered")
INEQ_DISTS = ("uniform", "pareto", "correlated")
#: none: stationary; wander: a hot cluster whose centre moves every period; skew: ``dist`` for the
#: first ``after`` periods, then mostly one small blob.
VECTOR_DRIFTS = ("none", "wander", "skew")
WANDER_FRAC, WANDER_SD, WANDER_SPEED, WANDER_BOX = 0.8, 0.08, 0.35, 0.7
SKEW_FRAC, SKEW_SD = 0.9, 0.05
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


def gen_vectors(start: int, stop: int, dim: int, dist: str, seed: int, *, drift: str = "none",
                rate: float = 100.0, period: float = 60.0, after: int = 2) -> np.ndarray:
    """Rows [start, stop) of ``dim``-dimensional vectors from ``dist``; with ``drift`` other than
    ``none``, ``gen_drift_vectors`` (``rate``, ``period``, ``after`` are its)."""
    if drift != "none":
        return gen_drift_vectors(start, stop, dim, dist, seed, drift, rate=rate, period=period, after=after)
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


def drift_periods(start: int, stop: int, rate: float, period: float) -> np.ndarray:
    """Drift period of rows [start, stop): floor((ts - T0) / period), on the same integer
    microsecond ts as ``timestamps_us``, so with ``period`` = the window length it is the row's
    tumbling-window index."""
    off = timestamps_us(start, stop, rate) - T0_US
    return np.floor_divide(off, period * 1e6).astype(np.int64)


def _triangle(x: np.ndarray, a: float) -> np.ndarray:
    """Fold x into [-a, a] by reflecting at the walls (a billiard's coordinate)."""
    return a - np.abs(np.mod(x + a, 4.0 * a) - 2.0 * a)


def wander_centres(seed: int, dim: int, k: np.ndarray) -> np.ndarray:
    """The wandering cluster's centre in periods ``k``: a billiard path in [-0.7, 0.7]^dim from a
    seeded start, moving ``WANDER_SPEED`` per period in a seeded direction, reflected at the walls."""
    g = chunk_rng(seed, 2**31 + 1)
    c0 = g.uniform(-WANDER_BOX, WANDER_BOX, dim)
    v = g.normal(size=dim)
    v *= WANDER_SPEED / max(float(np.linalg.norm(v)), 1e-12)
    return _triangle(c0 + np.asarray(k, dtype=np.float64)[:, None] * v, WANDER_BOX)


def skew_centre(seed: int, dim: int) -> np.ndarray:
    """The skewed blob's centre: a seeded direction at radius in [0.4, 0.7] (away from the origin,
    so it is a small region for angular distance too)."""
    g = chunk_rng(seed, 2**31 + 2)
    v = g.normal(size=dim)
    return v / max(float(np.linalg.norm(v)), 1e-12) * g.uniform(0.4, WANDER_BOX)


def _drift_block(b0: int, dim: int, dist: str, seed: int, drift: str, rate: float, period: float,
                 after: int) -> np.ndarray:
    """Rows [b0, b0 + CHUNK_ROWS) of a drifting stream (b0 a multiple of CHUNK_ROWS)."""
    b1 = b0 + CHUNK_ROWS
    x = gen_vectors(b0, b1, dim, dist, seed)
    k = drift_periods(b0, b1, rate, period)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), b0 // CHUNK_ROWS, 1]))
    u, z = rng.random(CHUNK_ROWS), rng.standard_normal((CHUNK_ROWS, dim))
    if drift == "wander":
        hot = u < WANDER_FRAC
        ks, inv = np.unique(k[hot], return_inverse=True)
        centre, sd = wander_centres(seed, dim, ks)[inv], WANDER_SD
    else:
        hot = (u < SKEW_FRAC) & (k >= after)
        centre, sd = skew_centre(seed, dim), SKEW_SD
    x[hot] = np.clip(centre + sd * z[hot], -1.0, 1.0)
    return x


def gen_drift_vectors(start: int, stop: int, dim: int, dist: str, seed: int, drift: str, *,
                      rate: float = 100.0, period: float = 60.0, after: int = 2) -> np.ndarray:
    """Rows [start, stop) of a vector stream whose distribution moves with ts (row i at
    T0 + i / rate s), in drift periods of ``period`` seconds (``drift_periods``):

    - ``wander``: each row is, with probability 0.8, from N(centre_k, 0.08^2 I) (clipped to
      [-1, 1]), else from ``dist`` (the background); centre_k (``wander_centres``) moves 0.35 per
      period across [-0.7, 0.7]^dim, so the hot region crosses space partitions over time.
    - ``skew``: ``dist`` for periods k < ``after``; from period ``after`` on, a row is with
      probability 0.9 from N(c, 0.05^2 I) at one seeded centre c (``skew_centre``), else ``dist``.

    Row i depends only on (seed, i) and the parameters, not on [start, stop): rows are drawn in
    whole CHUNK_ROWS blocks and sliced, so any chunking gives the same table.
    """
    if drift not in VECTOR_DRIFTS:
        raise ValueError(f"invalid drift {drift!r}: allowed {', '.join(VECTOR_DRIFTS)}")
    if dist not in VECTOR_DISTS:
        raise ValueError(f"invalid dist {dist!r}: allowed {', '.join(VECTOR_DISTS)}")
    if dim < 1:
        raise ValueError(f"invalid dim {dim}: allowed >= 1")
    if not rate > 0 or not period > 0:
        raise ValueError(f"invalid rate {rate} / period {period}: allowed > 0")
    if after < 0:
        raise ValueError(f"invalid after {after}: allowed >= 0")
    if drift == "none":
        return gen_vectors(start, stop, dim, dist, seed)
    out = np.empty((max(0, stop - start), dim), dtype=np.float64)
    for b0 in range(start - start % CHUNK_ROWS, stop, CHUNK_ROWS):
        lo, hi = max(start, b0), min(stop, b0 + CHUNK_ROWS)
        out[lo - start: hi - start] = _drift_block(b0, dim, dist, seed, drift, rate, period, after)[lo - b0: hi - b0]
    return out


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
