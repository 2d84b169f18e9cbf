"""Input identity (issue 37, item 2): each stream output's checkpoint records its inputs' Delta
table ids (``metaData.id``) in ``<output>_checkpoint/simjoin.json`` and the versions it read
(``offsets/``). An input deleted and written again at the same path (a new table id), or whose
versions the output still has to read are gone from its log, is refused with one line naming
the input and ``--reset``; it was skipped silently (0 rows staged, exit 0). Both ingest modes
(``direct`` and the streaming query) and follow mode. After ``--reset`` the run joins the new
table exactly."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from simjoin.cli import cli_group
from simjoin.core.metric import brute_force_join
from simjoin.spark import delta

BIN = Path(__file__).resolve().parents[2] / ".venv" / "bin"
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SCHEMA = "id long, ts timestamp, vector array<double>"
ARGS = ["--threshold", "0.2", "--metric", "euclidean", "--window", "10s", "--workers", "2"]


def _cli(*args):
    r = CliRunner().invoke(cli_group(), ["s3j", *args])
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    return r.exit_code, (lines[-1] if lines else "")


def _rows(seed, n=40, base_id=0):
    """Points with ts ties (tenths of a second) and one exact duplicate point."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (n, 2))
    X[1] = X[0]
    secs = np.round(np.sort(rng.uniform(0, 30, n)), 1)
    return [(base_id + i, T0 + dt.timedelta(seconds=float(secs[i])), X[i].tolist()) for i in range(n)]


def _write(spark, path, rows, parts=1):
    for chunk in np.array_split(np.arange(len(rows)), parts):  # one Delta version per part
        spark.createDataFrame([rows[i] for i in chunk], SCHEMA).write.format("delta").mode("append").save(path)


def _brute(rows):
    ids = np.array([r[0] for r in rows])
    X = np.array([r[2] for r in rows])
    w = np.array([int((r[1] - T0).total_seconds() // 10) for r in rows])
    ref = set()
    for k in np.unique(w):
        m = w == k
        L, R, _ = brute_force_join(X[m], ids[m], None, "euclidean", 0.2)
        ref |= {(int(a), int(b), int(k)) for a, b in zip(L, R, strict=True)}
    return ref


def _pairs(spark, out):
    return {(r.left_id, r.right_id, int((r.window_start.replace(tzinfo=dt.UTC) - T0).total_seconds()) // 10)
            for r in delta.read_table(spark, out).collect()}


def _mode(out):
    with open(out + "_checkpoint/simjoin.json") as fh:
        return json.load(fh)


@pytest.mark.parametrize("mode", ["direct", "streaming"])
def test_recreated_input_is_refused_and_reset_joins_it(spark, tmp_path, monkeypatch, mode):
    monkeypatch.setenv("SIMJOIN_DIRECT_INGEST", "1" if mode == "direct" else "0")
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    first = _rows(1)
    _write(spark, src, first, parts=2)
    code, line = _cli("--left", src, "--output", out, *ARGS)
    assert code == 0, line
    ident = _mode(out)
    assert ident["ingest"] == ("direct" if mode == "direct" else "foreach")
    assert ident["inputs"][0]["path"] == src and ident["inputs"][0]["table_id"]
    before = _pairs(spark, out)
    assert before == _brute(first) and before
    # deleted and written again at the same path: a new table id, versions from 0 again
    shutil.rmtree(src)
    second = _rows(2, base_id=100)
    _write(spark, src, second, parts=3)
    code, line = _cli("--left", src, "--output", out, *ARGS)
    assert code == 2, line
    assert f"input {src} is another Delta table" in line and "--reset" in line, line
    assert _pairs(spark, out) == before  # nothing staged, nothing published
    code, line = _cli("--left", src, "--output", out, *ARGS)  # refused again, not skipped
    assert code == 2 and "--reset" in line, line
    code, line = _cli("--left", src, "--output", out, *ARGS, "--reset")
    assert code == 0, line
    assert _pairs(spark, out) == _brute(second)
    assert _mode(out)["inputs"][0]["table_id"] != ident["inputs"][0]["table_id"]


@pytest.mark.parametrize("mode", ["direct", "streaming"])
def test_unread_versions_gone_from_the_log_are_refused(spark, tmp_path, monkeypatch, mode):
    monkeypatch.setenv("SIMJOIN_DIRECT_INGEST", "1" if mode == "direct" else "0")
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    rows = _rows(3)
    _write(spark, src, rows[:20])
    code, line = _cli("--left", src, "--output", out, *ARGS)
    assert code == 0, line
    _write(spark, src, rows[20:], parts=2)  # versions 1 and 2; the log of version 1 is then cleaned up
    os.remove(os.path.join(src, "_delta_log", f"{1:020d}.json"))
    code, line = _cli("--left", src, "--output", out, *ARGS)
    assert code == 2, line
    assert f"input {src}" in line and "version 1 is gone" in line and "--reset" in line, line


def test_follow_mode_refuses_a_recreated_input(spark, tmp_path):
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    _write(spark, src, _rows(4))
    code, line = _cli("--left", src, "--output", out, *ARGS)
    assert code == 0, line
    shutil.rmtree(src)
    _write(spark, src, _rows(5, base_id=100))
    env = {**os.environ, "SIMJOIN_SPARK_REMOTE": "off"}
    r = subprocess.run([str(BIN / "simjoin"), "s3j", "--left", src, "--output", out, *ARGS, "--follow",
                        "--trigger", "1s"], capture_output=True, text=True, timeout=240, env=env)
    lines = [ln for ln in (r.stdout + r.stderr).strip().splitlines() if ln.strip()]
    assert r.returncode == 2, lines[-5:]
    assert f"input {src} is another Delta table" in lines[-1] and "--reset" in lines[-1], lines[-1]
