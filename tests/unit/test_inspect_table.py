"""``simjoin show`` and ``simjoin history`` on a local table start no JVM, answer in a few hundred
milliseconds, and print each commit's userMetadata (docs/operations.md)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import CommitProperties, write_deltalake

from simjoin.cli import app


def _table(path: str) -> None:
    t = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": pa.array(["a", None, "c"]),
                  "x": pa.array([0.5, 1e-5, None]), "ok": pa.array([True, False, None]),
                  "ts": pa.array([dt.datetime(2026, 1, 2, 3, 4, 5, 600000)] * 3, pa.timestamp("us", tz="UTC")),
                  "v": pa.array([[1.0, 2.0], [], None], pa.list_(pa.float64()))})
    write_deltalake(path, t, mode="append")
    write_deltalake(path, t.slice(0, 1), mode="append",
                    commit_properties=CommitProperties(custom_metadata={"userMetadata": json.dumps({"unit": 7})}))


def test_show_and_history_read_a_local_table_without_spark(tmp_path):
    p = str(tmp_path / "a table")
    _table(p)
    r = CliRunner().invoke(app, ["show", p, "--limit", "2", "--version", "0"])  # one file: its order
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[1] == "| id|name|     x|   ok|                   ts|         v|", lines
    assert lines[3] == "|  1|   a|   0.5| true|2026-01-02 03:04:05.6|[1.0, 2.0]|", lines
    assert lines[4] == "|  2|NULL|1.0E-5|false|2026-01-02 03:04:05.6|        []|", lines
    assert "only showing top 2 rows" in r.output
    assert lines[-1] == f"show {p}: 3 rows at version 0, columns id, name, x, ok, ts, v"
    r = CliRunner().invoke(app, ["show", p, "--limit", "0"])
    assert r.exit_code == 0 and r.output.splitlines()[-1].startswith(f"show {p}: 4 rows at version 1"), r.output
    r = CliRunner().invoke(app, ["show", p, "--version", "5"])
    assert r.exit_code == 2 and "invalid --version 5: allowed 0..1" in r.output, r.output
    r = CliRunner().invoke(app, ["history", p])
    assert r.exit_code == 0, r.output
    out = r.output.splitlines()
    assert out[0].startswith("v0 ") and "WRITE" in out[0] and "userMetadata" not in out[0]
    assert out[1].startswith("v1 ") and out[1].endswith('userMetadata={"unit": 7}'), out
    assert out[-1] == f"history {p}: 2 versions, latest 1"


@pytest.mark.parametrize("cmd", ["show", "history"])
def test_no_jvm_and_fast(tmp_path, cmd):
    p = str(tmp_path / "t")
    _table(p)
    code = ("import sys, time; from click.testing import CliRunner; from simjoin.cli import app; "
            f"t0 = time.perf_counter(); r = CliRunner().invoke(app, [{cmd!r}, {p!r}]); "
            "s = time.perf_counter() - t0; assert r.exit_code == 0, r.output; "
            "from pyspark import SparkContext; assert SparkContext._gateway is None, 'a JVM started'; print(s)")
    t0 = time.perf_counter()
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "SIMJOIN_SPARK_REMOTE": "off"})
    assert got.returncode == 0, got.stderr[-2000:]
    # the command once imported: a few hundred milliseconds here (a JVM start takes 5-10 s); the
    # bound leaves room for a loaded CI machine
    assert float(got.stdout.split()[-1]) < 2.0, got.stdout
    assert time.perf_counter() - t0 < 20


def test_report_of_a_local_stats_table_starts_no_jvm(tmp_path):
    import pandas as pd

    p = str(tmp_path / "out_stats")
    write_deltalake(p, pd.DataFrame({
        "unit": [0, 1, 2, 3], "node": [0, 0, 1, 1], "modgroup": [0, 1, 0, 1], "est_cost": [10.0, 10.0, 4.0, 4.0],
        "candidates": [120, 100, 40, 30], "wall_seconds": [1.2, 1.0, 0.4, 0.3], "records_indexed": [50, 50, 20, 20],
        "records_probed": [25, 25, 10, 10], "results": [3, 2, 1, 0], "run_id": ["r"] * 4,
        "pipeline": ["ssj"] * 4, "seconds": [1.2, 1.0, 0.4, 0.3]}))
    out = str(tmp_path / "plots")
    code = ("import sys; from click.testing import CliRunner; from simjoin.cli import app; "
            f"r = CliRunner().invoke(app, ['report', '--stats', {p!r}, '--out', {out!r}]); "
            "assert r.exit_code == 0, r.output; print(r.output.strip().splitlines()[-1]); "
            "from pyspark import SparkContext; assert SparkContext._gateway is None, 'a JVM started'")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "SIMJOIN_SPARK_REMOTE": "off",
                              "SIMJOIN_WAREHOUSE": str(tmp_path / "wh")})
    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout.strip().splitlines()[-1].startswith("report: 3 stats plots and 0 task-timing plots"), got.stdout
