"""``simjoin ineq`` on Spark + Delta: streams appended in pieces whose cuts fall inside windows,
joined unit by unit, equal the brute force pair for pair - two streams with a time window and a
crash in the middle of publishing, a self-join band with a count window and bad rows."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from tests.helpers import run_named
from tests.unit.test_inequality_stream import brute_force

T0 = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)


def _gen(seed, n, base):
    rng = np.random.default_rng(seed)
    return {"id": np.arange(n, dtype=np.int64) * 3 + base, "ts": np.sort(rng.integers(0, 120, n)) * 1_000_000,
            "a": rng.integers(0, 30, n).astype(float), "b": rng.integers(0, 20, n).astype(float),
            "c": rng.integers(0, 3, n).astype(float)}


def _append(spark, path, S, idx, extra=()):
    rows = [(int(S["id"][i]), T0 + dt.timedelta(microseconds=int(S["ts"][i])), float(S["a"][i]), float(S["b"][i]),
             float(S["c"][i])) for i in idx]
    spark.createDataFrame(rows + list(extra), "id long, ts timestamp, a double, b double, c double") \
        .write.format("delta").mode("append").save(path)


def _pairs(path):
    from deltalake import DeltaTable

    t = DeltaTable(path).to_pyarrow_table()
    return list(zip(t.column("left_id").to_pylist(), t.column("right_id").to_pylist(), strict=True)), t


def _units(n, cuts):
    u = np.zeros(n, np.int64)
    for c in cuts:
        u[c:] += 1
    return u


def test_two_streams_time_window_in_pieces_with_a_crash(spark, tmp_path, monkeypatch):
    from simjoin.core.inequality.query import parse_query
    from simjoin.core.inequality.spo import Window

    L, R = _gen(1, 150, 11), _gen(2, 150, 100_011)
    where = "l.a + 2 < r.a AND l.b >= r.b"
    conf = {"left": str(tmp_path / "l"), "right": str(tmp_path / "r"), "output": str(tmp_path / "out"),
            "where": where, "window": "20s", "slide": "5s", "workers": 3, "merge_every": 25}
    cuts = [50, 100]
    for k, idx in enumerate(np.split(np.arange(150), cuts)):
        # a row dated before what its stream committed is late: it could meet expired tuples
        _append(spark, conf["left"], L, idx, extra=[(99_999, T0, 1.0, 1.0, 1.0)] if k == 2 else ())
        _append(spark, conf["right"], R, idx)
        if k == 1:  # pairs appended, the unit not committed: the rerun must not repeat them
            monkeypatch.setenv("SIMJOIN_FAULTS", "ineq.publish.mid")
            with pytest.raises(Exception, match="injected"):
                run_named(spark, "ineq", **conf)
            monkeypatch.delenv("SIMJOIN_FAULTS")
        run, res = run_named(spark, "ineq", **conf)
    got, t = _pairs(conf["output"])
    u = _units(150, cuts)
    ref = brute_force(parse_query(where), L, R, Window(time_us=20_000_000), u, u)
    assert len(got) == len(set(got)), "a pair published twice"
    assert sorted(got) == ref and len(ref) > 50
    # ts is the later tuple's timestamp
    ts_of = {**dict(zip(L["id"].tolist(), L["ts"].tolist())), **dict(zip(R["id"].tolist(), R["ts"].tolist()))}
    for (a, b), ts in zip(got, t.column("ts").to_pylist(), strict=True):
        assert ts == T0 + dt.timedelta(microseconds=max(ts_of[a], ts_of[b]))
    stats = spark.read.format("delta").load(conf["output"] + "_stats").where("level = 'unit'").collect()
    assert sorted(r["unit"] for r in stats) == [0, 1, 2]
    assert sum(r["result_pairs"] for r in stats) == len(ref)
    assert max(r["live_batches"] for r in stats) >= 2  # probes ran against immutable PO-Join batches
    from simjoin.report import (
        render,  # simjoin report's plots from the real stats table  # simjoin report's plots from the real stats table
    )

    files = render(spark.read.format("delta").load(conf["output"] + "_stats").toPandas(), str(tmp_path / "rep"))
    assert sorted(f.rsplit("/", 1)[1] for f in files) == ["ineq_batches.png", "ineq_load.png", "ineq_times.png"]
    q = spark.read.format("delta").load(conf["output"] + "_quarantine").collect()
    assert [r["id"] for r in q] == [99_999] and q[0]["reason"].startswith("late: ts 2026-06-01 00:00:00")


def test_self_join_band_count_window_with_bad_rows(spark, tmp_path):
    from simjoin.core.inequality.query import parse_query
    from simjoin.core.inequality.spo import Window

    S = _gen(3, 160, 5)
    where = "abs(l.a - r.a) <= 1 AND l.c != r.c"
    conf = {"left": str(tmp_path / "s"), "output": str(tmp_path / "out"), "where": where, "window_count": 40,
            "slide_count": 10, "workers": 2}
    bad = [(10_001, T0, None, 1.0, 1.0), (10_002, T0, float("nan"), 1.0, 1.0), (260, T0, 1.0, 1.0, 1.0),  # id of a live tuple
           (None, T0, 1.0, 1.0, 1.0)]
    cuts = [90]
    pieces = np.split(np.arange(160), cuts)
    _append(spark, conf["left"], S, pieces[0], extra=bad[:2])
    run_named(spark, "ineq", **conf)
    _append(spark, conf["left"], S, pieces[1], extra=bad[2:])
    run_named(spark, "ineq", **conf)
    got, _ = _pairs(conf["output"])
    u = _units(160, cuts)
    ref = brute_force(parse_query(where), S, None, Window(count=40), u, None)
    assert len(got) == len(set(got)) and sorted(got) == ref and len(ref) > 50
    q = {r["reason"] for r in spark.read.format("delta").load(conf["output"] + "_quarantine").collect()}
    assert {"null a", "NaN or inf in a", "null id"} <= q
    assert any(r.startswith("duplicate id 260") for r in q)


def test_bad_queries_fail_early_with_one_line(spark, tmp_path):
    from simjoin.config import ConfigError

    S = _gen(4, 10, 0)
    src = str(tmp_path / "s")
    _append(spark, src, S, np.arange(10))
    base = {"left": src, "output": str(tmp_path / "out"), "window": "10s"}
    with pytest.raises(ValueError, match=r"unexpected token '>>'"):
        run_named(spark, "ineq", where="l.a < r.a AND l.b >> r.b", **base)
    with pytest.raises(ValueError, match=r"lacks columns \['zz'\].*has \['id', 'ts', 'a', 'b', 'c'\]"):
        run_named(spark, "ineq", where="l.zz < r.a", **base)
    with pytest.raises(ConfigError, match="exactly one of window"):
        run_named(spark, "ineq", where="l.a < r.a", window_count=5, **base)
    with pytest.raises(ConfigError, match="ineq.right"):
        run_named(spark, "ineq", where="l.a < r.a", right=src, **base)
