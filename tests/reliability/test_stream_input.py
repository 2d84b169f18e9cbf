"""The micro-batch engine's guards, through ``simjoin s3j``: checkpoint identity and --reset,
input schema checked before any cast, unreadable and future rows quarantined without stalling
the stream or moving the watermark, overwrite guards, config changes."""

from __future__ import annotations

import datetime as dt
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from simjoin.cli import cli_group
from simjoin.spark import delta

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
ARGS = ["--threshold", "0.1", "--metric", "euclidean", "--window", "10s", "--workers", "2"]


def _cli(*args):
    r = CliRunner().invoke(cli_group(), ["s3j", *args])
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    return r.exit_code, (lines[-1] if lines else "")


def _points(n, seed=1):
    rng = np.random.default_rng(seed)
    return rng.uniform(0, 1, (n, 2)), np.sort(rng.uniform(0, 30, n))


def _write(spark, path, rows, schema, mode="append"):
    spark.createDataFrame(rows, schema).write.format("delta").mode(mode).save(path)


def _pairs(spark, path):
    return sorted((r.left_id, r.right_id, r.window_start) for r in delta.read_table(spark, path).collect())


def _brute(X, secs, ids):
    from simjoin.core.metric import brute_force_join

    ref = set()
    for k in range(4):
        m = (secs // 10) == k
        L, R, _ = brute_force_join(X[m], ids[m], None, "euclidean", 0.1)
        ref |= {(int(a), int(b), k) for a, b in zip(L, R)}
    return ref


def _as_windows(pairs):
    return {(a, b, int((w.replace(tzinfo=dt.UTC) - T0).total_seconds()) // 10) for a, b, w in pairs}


def test_deleted_checkpoint_is_refused_and_reset_reruns_clean(spark, tmp_path):
    X, secs = _points(150)
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    _write(spark, src, [(i, T0 + dt.timedelta(seconds=float(s)), x.tolist()) for i, (s, x) in enumerate(zip(secs, X))],
           "id long, ts timestamp, vector array<double>")
    code, line = _cli("--left", src, "--output", out, *ARGS)
    assert code == 0, line
    first = _pairs(spark, out)
    assert _as_windows(first) == _brute(X, secs, np.arange(150)) and first
    shutil.rmtree(out + "_checkpoint")
    code, line = _cli("--left", src, "--output", out, *ARGS)
    assert code == 2 and line.startswith("error: checkpoint") and "--reset" in line, line
    assert _pairs(spark, out) == first  # nothing written, nothing silently zero
    # a foreign checkpoint (another output's) is refused too
    other = str(tmp_path / "other")
    assert _cli("--left", src, "--output", other, *ARGS)[0] == 0
    shutil.copytree(other + "_checkpoint", out + "_checkpoint")
    code, line = _cli("--left", src, "--output", out, *ARGS)
    assert code == 2 and "is not the one" in line and "--reset" in line, line
    code, line = _cli("--left", src, "--output", out, *ARGS, "--reset")
    assert code == 0, line
    assert _pairs(spark, out) == first
    # another configuration on the same state: refused, naming both
    code, line = _cli("--left", src, "--output", out, *ARGS[:-2], "--workers", "3")
    assert code == 2 and "another configuration" in line and "--workers 2 -> 3" in line, line
    assert "threshold=" not in line, line  # the change, not two fingerprints


def test_unreadable_and_future_ts_are_quarantined_and_the_stream_moves_on(spark, tmp_path):
    X, secs = _points(120, seed=2)
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    iso = lambda s: (T0 + dt.timedelta(seconds=float(s))).strftime("%Y-%m-%d %H:%M:%S.%f")  # noqa: E731
    schema = "id long, ts string, vector array<double>"
    first = [(i, iso(secs[i]), X[i].tolist()) for i in range(60)]
    _write(spark, src, first + [(1000, "not a time", [0.5, 0.5]), (1001, "2099-01-01 00:00:00", [0.5, 0.5])],
           schema)
    code, line = _cli("--left", src, "--output", out, *ARGS)
    assert code == 0 and "2 quarantined" in line, line
    q = {r.id: r for r in delta.read_table(spark, out + "_quarantine").collect()}
    assert set(q) == {1000, 1001}
    assert q[1000].reason.startswith("unreadable ts not a time") and q[1000].ts_raw == "not a time"
    assert q[1001].reason.startswith("future: ts 2099-01-01") and '"vector":[0.5,0.5]' in q[1001].row
    # the 2099 row moved no watermark: later rows of open windows still join, none is late
    _write(spark, src, [(i, iso(secs[i]), X[i].tolist()) for i in range(60, 120)], schema)
    code, line = _cli("--left", src, "--output", out, *ARGS)
    assert code == 0 and "0 quarantined" in line, line
    assert _as_windows(_pairs(spark, out)) == _brute(X, secs, np.arange(120))


def test_numeric_ts_needs_a_unit_and_ids_must_be_integers(spark, tmp_path):
    X, secs = _points(80, seed=3)
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    ms = (T0.timestamp() + secs) * 1000
    _write(spark, src, [(i, int(ms[i]), X[i].tolist()) for i in range(80)], "id long, ts long, vector array<double>")
    code, line = _cli("--left", src, "--output", out, *ARGS)
    assert code == 2 and "ts is bigint" in line and "--ts-unit" in line, line
    assert not delta.table_exists(spark, out)
    code, line = _cli("--left", src, "--output", out, *ARGS, "--ts-unit", "ms")
    assert code == 0, line
    secs_ms = np.floor(ms).astype(np.int64) / 1000 - T0.timestamp()
    assert _as_windows(_pairs(spark, out)) == _brute(X, secs_ms, np.arange(80))
    bad = str(tmp_path / "bad")
    _write(spark, bad, [("a", T0, [0.1, 0.2])], "id string, ts timestamp, vector array<double>")
    code, line = _cli("--left", bad, "--output", str(tmp_path / "o2"), *ARGS)
    assert code == 2 and "id is string: allowed an integer type" in line, line


def test_overwrite_guards(spark, tmp_path):
    src = str(tmp_path / "in")
    _write(spark, src, [(1, T0, [0.1, 0.2])], "id long, ts timestamp, vector array<double>")
    code, line = _cli("--left", src, "--output", src, *ARGS)
    assert code == 2 and "allowed a path other than the left stream" in line, line
    foreign = str(tmp_path / "foreign")
    _write(spark, foreign, [(1, "x")], "id long, text string")
    code, line = _cli("--left", src, "--output", foreign, *ARGS)
    assert code == 2 and "holds a Delta table with columns ['id', 'text']" in line, line
    assert delta.read_table(spark, foreign).count() == 1
    code, line = _cli("--left", src, "--right", src, "--output", str(tmp_path / "o"), *ARGS)
    assert code == 2 and "invalid --right" in line, line


@pytest.mark.parametrize("flag,needle", [
    (["--threshold", "1.5", "--metric", "angular"], "0 < threshold <= 1.0 for metric angular"),
    (["--window", "soon"], "invalid --window 'soon'"),
    (["--slide", "2m", "--window", "1m"], "a duration <= --window"),
])
def test_bad_flags_are_one_line(tmp_path, flag, needle):
    code, line = _cli("--left", str(tmp_path / "l"), "--output", str(tmp_path / "o"), *flag)
    assert code == 2 and line.startswith("error: ") and needle in line, line


def test_error_inside_a_streaming_batch_is_one_line(spark, tmp_path, monkeypatch):
    src = str(tmp_path / "in")
    _write(spark, src, [(1, T0, [0.1, 0.2])], "id long, ts timestamp, vector array<double>")
    monkeypatch.setenv("SIMJOIN_FAULTS", "s3j.ingest.batch")
    code, line = _cli("--left", src, "--output", str(tmp_path / "o"), *ARGS)
    assert code == 1 and line == "error: InjectedFault: injected fault at s3j.ingest.batch (SIMJOIN_FAULTS)", line
