"""S3J units run in the driver (``jobs.s3j.local``) write exactly what the distributed stages
write: the same pairs, stats, join state, centroids and assignments, unit after unit, and a stream
may switch between the two paths at any unit (a large unit goes to Spark, the next small one
comes back) with the same result. Checked against brute force too."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from simjoin.core.metric import brute_force_join
from simjoin.spark import delta
from tests.helpers import commit_engines, run_s3j

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SCHEMA = "id long, ts timestamp, vector array<double>"
VOLATILE = {"seconds", "latency_p50_s", "latency_p99_s", "latency_max_s", "started_at", "host", "run_id"}


def _write(spark, path, ids, secs, X, mode):
    rows = [(int(i), T0 + dt.timedelta(seconds=float(s)), [float(v) for v in x]) for i, s, x in zip(ids, secs, X)]
    spark.createDataFrame(rows, SCHEMA).write.format("delta").mode(mode).save(path)


def _rows(spark, path, drop=()):
    if not delta.table_exists(spark, path):
        return []
    df = delta.read_table(spark, path)
    cols = sorted(c for c in df.columns if c not in VOLATILE and c not in drop)
    return sorted((tuple(r[c] for c in cols) for r in df.select(*cols).collect()), key=repr)


_MORE = [pytest.mark.slow, pytest.mark.exhaustive]  # make test-exhaustive; LSL covers both paths and both switches


@pytest.mark.parametrize("two,plan", [pytest.param(False, "LLL", marks=_MORE),
                                      # make test: test_lateness_s3j's driver-vs-distributed test (the same tables compared,
                                      # on out-of-order rows); issue 38 replaces local.py by the generic executor test
                                      pytest.param(True, "LSL", marks=_MORE),
                                      pytest.param(True, "SLS", marks=_MORE)])
def test_driver_units_write_what_the_spark_stages_write(spark, tmp_path, monkeypatch, two, plan):
    """Three units cut inside sliding windows, a skewed blob that makes the rebalance stage move
    and split worksets (low trigger): ``plan`` says which units run in the driver (L) or on Spark
    (S); the all-Spark run is the reference for every table, brute force for the pairs."""
    rng = np.random.default_rng(23 if two else 29)
    n, t = 240, 0.2
    hot = n // 2
    X = np.vstack([np.array([0.5, 0.3]) + rng.normal(0, t / 30, (hot, 2)), rng.uniform(-1, 1, (n - hot, 2))])
    X = X[rng.permutation(n)]
    secs = np.round(np.sort(rng.uniform(0, 150, n)), 1)  # ties in ts
    ids = np.arange(n) * 3 % 1000  # ids repeat across the two streams
    side = rng.integers(0, 2, n) if two else np.zeros(n, int)
    cuts = [0, n // 3, 2 * n // 3, n]
    cfg = dict(threshold=t, metric="euclidean", window="60s", slide="30s", workers=3, rebalance="split",
               rebalance_trigger=0.05)
    outs = {}
    for name, units in (("spark", "SSS"), ("mixed", plan)):
        src = {s: str(tmp_path / f"{name}_in{s}") for s in (0, 1)}
        out = str(tmp_path / f"{name}_out")
        for k in range(3):
            for s in (0, 1) if two else (0,):
                m = np.zeros(n, bool)
                m[cuts[k]:cuts[k + 1]] = True
                m &= side == s
                _write(spark, src[s], ids[m], secs[m], X[m], "overwrite" if k == 0 else "append")
            monkeypatch.setenv("SIMJOIN_LOCAL_UNIT_ROWS", "1000000" if units[k] == "L" else "0")
            run_s3j(spark, src[0], out, right=src[1] if two else None, **cfg)
        outs[name] = out
    ref_out, out = outs["spark"], outs["mixed"]
    got = _rows(spark, out)
    assert len(got) == len(set(got))
    assert got == _rows(spark, ref_out)
    for t_ in ("_stats", "_state/join", "_state/centroids", "_state/assignment"):
        assert _rows(spark, out + t_) == _rows(spark, ref_out + t_), t_
    assert _rows(spark, ref_out + "_state/assignment"), "the rebalance never fired: the test proves less"
    # the driver's units committed with deltalake, the pairs included
    eng = commit_engines(out)
    assert [e == "deltalake" for e in eng] == [True] * len(eng)
    # brute force, per sliding window
    ref = set()
    for k in range(-1, 5):
        lo, hi = 30 * k, 30 * k + 60
        m = (secs >= lo) & (secs < hi)
        L, R, _ = brute_force_join(X[m], ids[m], side[m].astype(np.int8) if two else None, "euclidean", t)
        ref |= {(int(a), int(b), (T0 + dt.timedelta(seconds=lo)).replace(tzinfo=None)) for a, b in zip(L, R)}
    pairs = {(r.left_id, r.right_id, r.window_start.replace(tzinfo=None))
             for r in delta.read_table(spark, out).collect()}
    assert pairs == ref and len(ref) > 0
