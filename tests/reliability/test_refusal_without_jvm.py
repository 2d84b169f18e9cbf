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
