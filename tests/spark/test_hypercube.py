"""``simjoin hypercube`` on Spark + Delta: two Zipf streams appended in pieces, joined unit by unit,
equal a plain join pair for pair (or count for count with --count-only) - at alpha 0 to 2, with a
crash in the middle of publishing, a key that turns heavy mid-stream, a window, and bad rows."""

from __future__ import annotations

import datetime as dt
import os
from collections import Counter

import numpy as np
import pytest

from simjoin.core.hypercube.bruteforce import equi_counts, equi_pairs
from tests.helpers import run_named

T0 = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
# The default suite runs one alpha per test (the core's property tests cover 0, 1, 1.5 and 2 on every
# shape, and checks/hypercube 1.1 and 1.6 through the CLI); SIMJOIN_HYPERCUBE_ALPHAS=0,1,1.5,2 runs all.
ALPHAS = [float(a) for a in os.environ.get("SIMJOIN_HYPERCUBE_ALPHAS", "").split(",") if a]


def _gen(seed, n, alpha, domain, base, hot_from=None):
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, domain + 1) ** alpha
    k = rng.permutation(domain)[rng.choice(domain, n, p=p / p.sum())].astype(np.int64) * 7 + 13
    if hot_from is not None:  # a key rare at first that becomes the hottest
        k[hot_from:] = np.where(rng.random(n - hot_from) < 0.5, 5, k[hot_from:])
    ts = np.sort(rng.integers(0, 120_000_000, n))
    return {"id": np.arange(n, dtype=np.int64) * 2 + base, "ts": ts, "k": k}


def _append(spark, path, S, idx, extra=()):
    rows = [(int(S["id"][i]), T0 + dt.timedelta(microseconds=int(S["ts"][i])), int(S["k"][i]), "x") for i in idx]
    spark.createDataFrame(rows + list(extra), "id long, ts timestamp, k long, payload string") \
        .write.format("delta").mode("append").save(path)


def _read(path):
    from deltalake import DeltaTable

    return DeltaTable(path).to_pyarrow_table()


def _conf(tmp_path, **kw):
    return {"left": str(tmp_path / "l"), "right": str(tmp_path / "r"), "output": str(tmp_path / "out"), "key": "k",
            **kw}


def _feed(spark, conf, L, R, cuts, crash_at=None, monkeypatch=None, extra=None):
    n = len(L["id"])
    for i, idx in enumerate(np.split(np.arange(n), cuts)):
        _append(spark, conf["left"], L, idx, extra=(extra or {}).get(i, ()))
        _append(spark, conf["right"], R, idx)
        if i == crash_at:  # output appended, the unit not committed: the rerun must not repeat it
            monkeypatch.setenv("SIMJOIN_FAULTS", "hypercube.publish.mid")
            with pytest.raises(Exception, match="injected"):
                run_named(spark, "hypercube", **conf)
            monkeypatch.delenv("SIMJOIN_FAULTS")
        run_named(spark, "hypercube", **conf)


@pytest.mark.parametrize("alpha", ALPHAS or [1.5])
def test_pairs_exact_in_pieces_with_a_crash(spark, tmp_path, monkeypatch, alpha):
    L, R = _gen(1, 300, alpha, 60, 1), _gen(2, 300, alpha, 60, 1_000_001)
    conf = _conf(tmp_path, workers=8)
    _feed(spark, conf, L, R, [150], crash_at=1, monkeypatch=monkeypatch)
    t = _read(conf["output"])
    got = list(zip(t.column("left_id").to_pylist(), t.column("right_id").to_pylist(), strict=True))
    ref = equi_pairs(L["id"], L["k"], R["id"], R["k"])
    assert len(got) == len(set(got)), "a pair published twice"
    assert set(got) == ref and len(ref) > 500
    kmap = dict(zip(L["id"].tolist(), L["k"].tolist(), strict=True))
    assert all(kmap[a] == k for a, k in zip(t.column("left_id").to_pylist(), t.column("k").to_pylist(), strict=True))
    stats = spark.read.format("delta").load(conf["output"] + "_stats")
    units = stats.where("level = 'unit'").orderBy("unit").collect()
    assert [r["unit"] for r in units] == [0, 1] and sum(r["result_pairs"] for r in units) == len(ref)
    last = units[-1]
    assert last["held"] == 600 and last["bound"] == pytest.approx(600 / 8 + (len(ref) / 8) ** 0.5)
    workers = stats.where("level = 'worker' AND unit = 1").collect()
    assert len(workers) == 8 and sum(r["load"] for r in workers) == pytest.approx(last["replication"] * 600)
    if alpha >= 1.5:
        assert last["heavy_keys"] >= 1 and last["load"] < last["phj_load"]
        grids = spark.read.format("delta").load(conf["output"] + "_state/grids").collect()
        assert grids and all(len(g["tasks"]) == g["p_r"] * g["p_s"] for g in grids if g["p_r"])
        from simjoin.report import render

        files = render(stats.toPandas(), str(tmp_path / "rep"))
        names = sorted(f.rsplit("/", 1)[1] for f in files)
        assert {"hypercube_load.png", "hypercube_grids.png"} <= set(names)


@pytest.mark.parametrize("alpha", ALPHAS or [2.0])
def test_count_only_sums_to_the_join_size_per_key(spark, tmp_path, alpha):
    L, R = _gen(3, 900, alpha, 200, 1), _gen(4, 900, alpha, 200, 1_000_001)
    conf = _conf(tmp_path, workers=4, count_only=True)
    _feed(spark, conf, L, R, [450])
    t = _read(conf["output"])
    got: Counter = Counter()
    for k, c in zip(t.column("k").to_pylist(), t.column("pairs").to_pylist(), strict=True):
        got[k] += c
    assert dict(got) == equi_counts(L["k"], R["k"])
    assert sorted(set(t.column("batch_id").to_pylist())) == [0, 1]


def test_window_key_turns_heavy_and_bad_rows(spark, tmp_path):
    L = _gen(5, 400, 0.5, 80, 1, hot_from=200)
    R = _gen(6, 400, 0.5, 80, 1_000_001, hot_from=200)
    conf = _conf(tmp_path, workers=4, window="20s")
    bad = {1: [(900_001, T0 + dt.timedelta(seconds=100), None, "x"),  # null key
               (int(L["id"][190]), T0 + dt.timedelta(seconds=110), 5, "x"),  # id of a live held tuple
               (900_003, T0, 5, "x")]}  # late: before what the left stream committed
    _feed(spark, conf, L, R, [200], extra=bad)
    t = _read(conf["output"])
    got = list(zip(t.column("left_id").to_pylist(), t.column("right_id").to_pylist(), strict=True))
    ref = equi_pairs(L["id"], L["k"], R["id"], R["k"], L["ts"], R["ts"], 20_000_000)
    assert len(got) == len(set(got)) and set(got) == ref and len(ref) > 100
    grids = spark.read.format("delta").load(conf["output"] + "_state/grids").where("k = 5").collect()
    assert grids and min(g["unit"] for g in grids) >= 1  # key 5 turned heavy after the first unit
    reasons = {r["id"]: r["reason"] for r in spark.read.format("delta").load(conf["output"] + "_quarantine").collect()}
    assert reasons[900_001] == "null key k"
    assert reasons[int(L["id"][190])].startswith("duplicate id")
    assert reasons[900_003].startswith("late: ts 2026-06-01 00:00:00")
    # expired tuples left the state
    held = spark.read.format("delta").load(conf["output"] + "_state/tuples").count()
    assert held < 800


def test_bad_input_fails_early_with_one_line(spark, tmp_path):
    from simjoin.config import ConfigError

    L = _gen(7, 10, 1.0, 5, 1)
    _append(spark, str(tmp_path / "l"), L, np.arange(10))
    _append(spark, str(tmp_path / "r"), L, np.arange(10))
    spark.createDataFrame([(1, T0, "a")], "id long, ts timestamp, k string").write.format("delta").save(
        str(tmp_path / "s"))
    with pytest.raises(ValueError, match=r"lacks columns \['zz'\]"):
        run_named(spark, "hypercube", **_conf(tmp_path, key="zz"))
    with pytest.raises(ValueError, match=r"k is string: allowed .*integer"):
        run_named(spark, "hypercube", **{**_conf(tmp_path), "right": str(tmp_path / "s"), "output": str(tmp_path / "o2")})
    with pytest.raises(ConfigError, match=r"epsilon.*1/\(2p\) = 0.125"):
        run_named(spark, "hypercube", **_conf(tmp_path, workers=4, epsilon=0.2))
    with pytest.raises(ConfigError, match="hypercube.right"):
        run_named(spark, "hypercube", **{**_conf(tmp_path), "right": str(tmp_path / "l")})
    with pytest.raises(ConfigError, match="workers"):
        run_named(spark, "hypercube", **_conf(tmp_path, workers=0))


@pytest.mark.parametrize("alpha,count_only", [(0.0, True), (1.5, False)])
def test_stats_carried_from_the_last_unit_equal_a_full_pass(spark, tmp_path, monkeypatch, alpha, count_only):
    """With no window a unit's load, PHJ load, held tuples and join size are the last unit's plus
    its own (``stats._carried``) when its dispatcher routes the held tuples as the last one did;
    the stats table equals that of a run that measures every held tuple in every unit - across a
    crash and replay, and at alpha 1.5, where grids change and some units must measure in full."""
    import jobs.hypercube.stats as hstats

    L, R = _gen(5, 480, alpha, 80, 1), _gen(6, 480, alpha, 80, 1_000_001)
    used = []
    real = hstats._carried

    def spy(*a, **kw):
        got = real(*a, **kw)
        used.append(got is not None)
        return got

    monkeypatch.setattr(hstats, "_carried", spy)
    carried = _conf(tmp_path / "carried", workers=6, count_only=count_only)
    _feed(spark, carried, L, R, [120, 240, 360], crash_at=2, monkeypatch=monkeypatch)
    assert any(used) and (alpha > 0 or all(used[1:]))
    monkeypatch.setattr(hstats, "_carried", lambda *a, **kw: None)
    full = _conf(tmp_path / "full", workers=6, count_only=count_only)
    _feed(spark, full, L, R, [120, 240, 360])

    def rows(conf):
        t = _read(conf["output"] + "_stats").to_pandas().drop(columns=["seconds"])  # the rest is deterministic
        assert {"load", "phj_load", "held", "out_pairs", "bound", "replication"} <= set(t.columns)
        return sorted(map(tuple, t.astype(str).values.tolist()))

    assert rows(carried) == rows(full)
