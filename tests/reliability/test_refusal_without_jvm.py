"""A missing input is refused in one line before any JVM starts, in every pipeline (issue 63
point 10: ineq and s2j started Spark first, about 3 s, to read the input's column types)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.mark.parametrize("argv", [
    ["ssj", "--input", "{nope}", "--output", "{out}"],
    ["s3j", "--left", "{nope}", "--output", "{out}"],
    ["ineq", "--left", "{nope}", "--output", "{out}", "--where", "l.a < r.a", "--window", "10s"],
    ["hypercube", "--left", "{nope}", "--right", "{nope}2", "--output", "{out}", "--key", "k"],
    ["s2j", "run", "--left", "{nope}", "--output", "{out}", "--window", "10m", "--task", "near: abs(l.a - r.a) <= 1"],
], ids=lambda a: a[0])
def test_a_missing_input_is_one_line_and_starts_no_jvm(tmp_path, argv):
    args = [a.format(nope=str(tmp_path / "no such input"), out=str(tmp_path / "out")) for a in argv]
    env = {**os.environ, "SIMJOIN_LOG_LEVEL": "INFO", "SIMJOIN_WAREHOUSE": str(tmp_path / "wh")}
    env.pop("SIMJOIN_SPARK_REMOTE", None)
    p = subprocess.run([str(BIN / "simjoin"), *args], capture_output=True, text=True, env=env, timeout=300)
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error: ")]
    missing = str(tmp_path / "no such input")
    assert p.returncode == 2 and len(errors) == 1, p.stderr[-2000:]
    assert (f"no Delta table at {missing!r} (--left): allowed the path of a Delta table" in errors[0]
            or f"input {missing}: no Delta table there: allowed the path of" in errors[0]), errors
    assert "starting Spark" not in p.stderr and "log4j" not in p.stderr, p.stderr[-2000:]
    assert not os.path.exists(tmp_path / "out"), "a refused run wrote its output"


def _inputs(root: Path) -> dict[str, str]:
    import datetime as dt

    import pyarrow as pa
    from deltalake import write_deltalake

    t0 = dt.datetime(2026, 8, 1, tzinfo=dt.UTC)
    ts = pa.array([t0 + dt.timedelta(seconds=i) for i in range(4)], pa.timestamp("us", tz="UTC"))
    ids = pa.array([1, 2, 3, 4], pa.int64())
    tables = {
        "sets": pa.table({"id": ids, "text": ["a b", "a b c", "c d", "d e"]}),
        "vec": pa.table({"id": ids, "ts": ts, "vector": pa.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [1.0, 1.0]])}),
        "iq": pa.table({"id": ids, "ts": ts, "a": [1.0, 2.0, 3.0, 4.0], "b": [4.0, 3.0, 2.0, 1.0]}),
        "k1": pa.table({"id": ids, "ts": ts, "k": pa.array([1, 1, 2, 2], pa.int64())}),
        "k2": pa.table({"id": pa.array([11, 12], pa.int64()), "ts": ts.slice(0, 2), "k": pa.array([1, 2], pa.int64())}),
        "aqi": pa.table({"id": ids, "ts": ts, "pm25": [10.0, 11.0, 50.0, 51.0], "pm10": [1.0, 2.0, 3.0, 4.0]}),
    }
    for name, t in tables.items():
        write_deltalake(str(root / name), t)
    return {k: str(root / k) for k in tables}


@pytest.mark.parametrize("taken", ["a file", "a folder of someone's files"])
def test_no_pipeline_takes_over_an_output_path_it_did_not_create(tmp_path, taken):
    """Issue 63: an ``--output`` that is a file, or a folder holding files simjoin did not write,
    is refused at once in one line by every pipeline, and nothing is written there or beside it
    (S2J, whose output is a folder of tables, took the folder over and later maintained it)."""
    i = _inputs(tmp_path)
    argvs = {
        "ssj": ["ssj", "--input", i["sets"], "--threshold", "0.5"],
        "s3j": ["s3j", "--left", i["vec"]],
        "ineq": ["ineq", "--left", i["iq"], "--where", "l.a < r.a", "--window", "10s"],
        "hypercube": ["hypercube", "--left", i["k1"], "--right", i["k2"], "--key", "k"],
        "s2j": ["s2j", "run", "--left", i["aqi"], "--window", "10m", "--task", "far: abs(l.pm25 - r.pm25) > 30"],
    }
    env = {**os.environ, "SIMJOIN_WAREHOUSE": str(tmp_path / "wh")}
    for name, argv in argvs.items():
        base = tmp_path / name
        base.mkdir()
        out = base / "out"
        if taken == "a file":
            out.write_text("mine")
        else:
            out.mkdir()
            (out / "part-0.parquet").write_bytes(b"PAR1")
        before = sorted(p.name for p in base.rglob("*"))
        p = subprocess.run([str(BIN / "simjoin"), *argv, "--output", str(out)], capture_output=True, text=True,
                           env=env, timeout=300)
        errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error: ")]
        assert p.returncode == 2 and len(errors) == 1 and str(out) in errors[0], (name, p.stderr[-2000:])
        assert "Traceback" not in p.stderr and "Error: [Errno" not in errors[0], (name, errors)
        assert sorted(q.name for q in base.rglob("*")) == before, f"{name} wrote beside a refused output"
