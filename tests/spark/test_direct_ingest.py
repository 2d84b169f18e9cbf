"""Direct ingest: a new S3J output on local tables reads its inputs' new versions by their Delta
logs (``simjoin.io.delta_source``), with no streaming query. It must stage exactly what the
streaming query stages (``SIMJOIN_DIRECT_INGEST=0``): the same pairs and the same quarantine,
run after run, over several appends per run, a compaction of an input (not read again) and an
empty input; a run that crashes after planning, inside or after staging a micro-batch loses and
repeats nothing; an input that is not append-only is refused with one line."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pytest

from simjoin.core.metric import brute_force_join
from simjoin.faults import InjectedFault
from simjoin.spark import delta
from tests.helpers import run_s3j

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SCHEMA = "id long, ts timestamp, vector array<double>"
CFG = dict(threshold=0.15, metric="euclidean", window="60s", slide="30s", workers=3)


def _mode(out: str) -> str:
    with open(out + "_checkpoint/simjoin.json") as fh:
        return str(json.load(fh)["ingest"])


def _append(spark, path, rows):
    spark.createDataFrame(rows, SCHEMA).write.format("delta").mode("append").save(path)


def _data(seed=5, n=300):
    """Two streams: ids repeat across the sides, ts ties; per chunk, one id of a side repeated
    with a later ts (quarantined as a duplicate) and one NaN vector (quarantined)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 2))
    secs = np.round(np.sort(rng.uniform(0, 150, n)), 1)
    ids = np.arange(n) * 7 % 1000
    side = rng.integers(0, 2, n)
    return X, secs, ids, side


def _chunks(X, secs, ids, side, k_chunks=3):
    """Per chunk and side, two appends (several versions per run) plus the bad rows."""
    n = len(ids)
    cuts = np.linspace(0, n, k_chunks + 1).astype(int)
    out = []
    for k in range(k_chunks):
        per = {}
        for s in (0, 1):
            m = np.flatnonzero((np.arange(n) >= cuts[k]) & (np.arange(n) < cuts[k + 1]) & (side == s))
            rows = [(int(ids[i]), T0 + dt.timedelta(seconds=float(secs[i])), X[i].tolist()) for i in m]
            last = rows[-1]
            bad = [(rows[0][0], last[1], [0.0, 0.0]),  # the chunk's first id again, later: a duplicate
                   (10_000 + k, last[1], [float("nan"), 0.0])]
            half = len(rows) // 2
            per[s] = [rows[:half], rows[half:] + bad]
        out.append(per)
    return out


def _brute(X, secs, ids, side, upto):
    m_all = np.arange(len(ids)) < upto
    ref = set()
    for k in range(-1, 6):
        lo = 30 * k
        m = m_all & (secs >= lo) & (secs < lo + 60)
        L, R, _ = brute_force_join(X[m], ids[m], side[m].astype(np.int8), "euclidean", CFG["threshold"])
        ref |= {(int(a), int(b), (T0 + dt.timedelta(seconds=lo)).replace(tzinfo=None)) for a, b in zip(L, R)}
    return ref


def _pairs(spark, out):
    if not delta.table_exists(spark, out):
        return []
    return sorted((r.left_id, r.right_id, r.window_start.replace(tzinfo=None))
                  for r in delta.read_table(spark, out).collect())


def _quarantine(spark, out):
    if not delta.table_exists(spark, out + "_quarantine"):
        return []
    return sorted((r.side, r.id, r.reason, r.ts_raw, r.row) for r in delta.read_table(spark, out + "_quarantine").collect())


def test_direct_ingest_stages_what_the_streaming_query_stages(spark, tmp_path, monkeypatch):
    from delta.tables import DeltaTable

    X, secs, ids, side = _data()
    chunks = _chunks(X, secs, ids, side)
    src = {s: str(tmp_path / f"in{s}") for s in (0, 1)}
    for s in (0, 1):  # an input created empty (a version without files) before any row
        spark.createDataFrame([], SCHEMA).write.format("delta").save(src[s])
    outs = {"direct": str(tmp_path / "direct"), "query": str(tmp_path / "query")}
    for name, out in outs.items():  # before any row: nothing staged, nothing published
        monkeypatch.setenv("SIMJOIN_DIRECT_INGEST", "1" if name == "direct" else "0")
        assert run_s3j(spark, src[0], out, right=src[1], **CFG).pairs == 0
        assert _mode(out) == ("direct" if name == "direct" else "foreach")
    n = len(ids)
    cuts = np.linspace(0, n, 4).astype(int)
    for k, per in enumerate(chunks):
        for part in (0, 1):
            for s in (0, 1):
                _append(spark, src[s], per[s][part])
        if k == 1:  # compaction: its commit re-adds every row with dataChange false
            DeltaTable.forPath(spark, src[0]).optimize().executeCompaction()
        for name, out in outs.items():
            monkeypatch.setenv("SIMJOIN_DIRECT_INGEST", "1" if name == "direct" else "0")
            run_s3j(spark, src[0], out, right=src[1], **CFG)
        got = _pairs(spark, outs["direct"])
        assert len(got) == len(set(got)), "a pair published twice"
        assert got == _pairs(spark, outs["query"]), f"run {k}: direct and streaming ingest differ"
        assert set(got) == _brute(X, secs, ids, side, cuts[k + 1])
        assert _quarantine(spark, outs["direct"]) == _quarantine(spark, outs["query"])
    reasons = [r for _, _, r, _, _ in _quarantine(spark, outs["direct"])]
    assert len(reasons) == 12 and sum("NaN" in r or "nan" in r for r in reasons) == 6, reasons


@pytest.mark.parametrize("fault", ["s3j.ingest.planned", "s3j.ingest.batch", "s3j.ingest.staged"])
def test_a_crash_around_a_direct_micro_batch_loses_and_repeats_nothing(spark, tmp_path, monkeypatch, fault):
    X, secs, ids, side = _data(seed=11, n=160)
    chunks = _chunks(X, secs, ids, side, k_chunks=2)
    src = {s: str(tmp_path / f"in{s}") for s in (0, 1)}
    out = str(tmp_path / "out")
    for s in (0, 1):
        _append(spark, src[s], chunks[0][s][0] + chunks[0][s][1])
    monkeypatch.setenv("SIMJOIN_FAULTS", fault)
    with pytest.raises(InjectedFault):
        run_s3j(spark, src[0], out, right=src[1], **CFG)
    assert _mode(out) == "direct" and not delta.table_exists(spark, out)
    monkeypatch.delenv("SIMJOIN_FAULTS")
    for s in (0, 1):  # more rows arrive before the rerun
        _append(spark, src[s], chunks[1][s][0] + chunks[1][s][1])
    run_s3j(spark, src[0], out, right=src[1], **CFG)
    run_s3j(spark, src[0], out, right=src[1], **CFG)  # a staged-and-crashed batch's unit, then the rest
    got = _pairs(spark, out)
    assert len(got) == len(set(got)) and set(got) == _brute(X, secs, ids, side, len(ids))
    q = _quarantine(spark, out)
    assert len(q) == len(set(q)) == 8, q


def test_an_input_that_is_not_append_only_is_refused(spark, tmp_path):
    X, secs, ids, side = _data(seed=2, n=80)
    chunks = _chunks(X, secs, ids, side, k_chunks=1)
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    _append(spark, src, chunks[0][0][0])
    run_s3j(spark, src, out, **CFG)
    assert _mode(out) == "direct"
    spark.sql(f"DELETE FROM delta.`{src}` WHERE id < 50")
    with pytest.raises(ValueError, match=r"version 1 removed data .* append-only"):
        run_s3j(spark, src, out, **CFG)


def test_ts_strings_are_sparks_cast_of_a_timestamp_to_a_string():
    """The vectorized ``ts_raw`` of a direct batch equals the per-value rule (Spark's cast, UTC)."""
    import pyarrow as pa

    from simjoin.spark.engine.units import spark_ts_string, ts_strings

    v = [0, 1, 500_000, 1_767_225_650_700_000, 1_767_225_650_000_000, 1_767_225_650_123_456,
         253_402_300_799_999_999, -5, -1_500_000]
    got = ts_strings(pa.array([*v, None], pa.int64())).to_pylist()
    assert got == [spark_ts_string(x) for x in v] + [None]
    assert got[3] == "2026-01-01 00:00:50.7" and got[4] == "2026-01-01 00:00:50"


def test_a_small_cli_run_never_starts_the_jvm_and_a_large_one_does(spark, tmp_path):
    """``simjoin s3j`` as a user runs it: a unit the driver runs, read by its Delta logs, needs no
    Spark (the session is lazy: no ``starting Spark`` line); a unit that takes the distributed
    stages starts it on first use. Both are exact."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    X, secs, ids, side = _data(seed=9, n=200)
    chunks = _chunks(X, secs, ids, side, k_chunks=2)
    src = {s: str(tmp_path / f"in{s}") for s in (0, 1)}
    out = str(tmp_path / "out")
    args = [str(Path(sys.executable).parent / "simjoin"), "s3j", "--left", src[0], "--right", src[1],
            "--output", out, "--threshold", str(CFG["threshold"]), "--metric", CFG["metric"],
            "--window", CFG["window"], "--slide", CFG["slide"], "--workers", str(CFG["workers"])]
    env = {k: v for k, v in os.environ.items() if k not in ("SIMJOIN_SPARK_REMOTE", "SIMJOIN_LOCAL_UNIT_ROWS")}
    env["SIMJOIN_SPARK_REMOTE"] = "off"
    for k, unit_rows in ((0, None), (1, "0")):
        for s in (0, 1):
            _append(spark, src[s], chunks[k][s][0] + chunks[k][s][1])
        e = dict(env, **({"SIMJOIN_LOCAL_UNIT_ROWS": unit_rows} if unit_rows else {}))
        p = subprocess.run(args, capture_output=True, text=True, env=e, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        started = "starting Spark" in p.stderr
        assert started == (unit_rows is not None), p.stderr[-3000:]
        got = _pairs(spark, out)
        assert len(got) == len(set(got)) and set(got) == _brute(X, secs, ids, side, len(ids) if k else 100)


def test_a_backlog_becomes_bounded_units_and_a_crashed_one_is_replayed_the_same(spark, tmp_path, monkeypatch):
    """``--max-records-per-unit``: a backlog of many commits on both streams becomes several units
    of whole commits, each within the bound, joined exactly and quarantined as one unbounded run
    does; a crash after staging a bounded unit replays that same unit (the same versions)."""
    from tests.helpers import run_named

    X, secs, ids, side = _data(seed=7, n=300)
    src = {s: str(tmp_path / f"in{s}") for s in (0, 1)}
    for per in _chunks(X, secs, ids, side):  # 12 commits of about 27 rows
        for part in (0, 1):
            for s in (0, 1):
                _append(spark, src[s], per[s][part])
    out, whole = str(tmp_path / "out"), str(tmp_path / "whole")
    cap = 60
    monkeypatch.setenv("SIMJOIN_FAULTS", "s3j.ingest.staged")
    with pytest.raises(InjectedFault):
        run_named(spark, "s3j", left=src[0], right=src[1], output=out, max_records_per_unit=cap, **CFG)
    with open(out + "_checkpoint/offsets/0") as fh:
        planned = json.load(fh)
    assert [g["end"] for g in planned["sources"]] == [0, 0]  # one commit of each stream (of 6)
    monkeypatch.delenv("SIMJOIN_FAULTS")
    _, res = run_named(spark, "s3j", left=src[0], right=src[1], output=out, max_records_per_unit=cap, **CFG)
    rows = [r["ingest"]["rows"] for r in res["rounds"]]
    assert rows[0] == 0 and res["rounds"][0]["ingest"]["resumed"]  # the staged unit, finished first
    assert len(rows) >= 5 and all(0 < n <= cap for n in rows[1:]) and sum(rows) == 312 - 50, rows
    with open(out + "_checkpoint/offsets/0") as fh:
        assert json.load(fh) == planned
    run_named(spark, "s3j", left=src[0], right=src[1], output=whole, **CFG)
    got = _pairs(spark, out)
    assert len(got) == len(set(got)) and set(got) == _brute(X, secs, ids, side, len(ids))
    assert got == _pairs(spark, whole)
    # the same rows for the same reasons (a duplicate of a row of an earlier unit says "seen earlier")
    same = lambda q: [(s, i, r.removesuffix(" (seen earlier)"), t, row) for s, i, r, t, row in q]  # noqa: E731
    assert len(_quarantine(spark, out)) == 12 and same(_quarantine(spark, out)) == same(_quarantine(spark, whole))
