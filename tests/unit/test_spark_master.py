"""An unreachable standalone master is refused in one line within seconds, naming why (an
unknown host, a refused connection), before a JVM starts (issue 63, point 3)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from simjoin.spark.session import check_master


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_check_master_names_why():
    with pytest.raises(ValueError, match=r"unknown host 'no-such-host\.invalid'"):
        check_master("spark://no-such-host.invalid:7077")
    port = _free_port()
    with pytest.raises(ValueError, match=rf"nothing listens at 127\.0\.0\.1:{port} \(connection refused\)"):
        check_master(f"spark://127.0.0.1:{port}")
    with pytest.raises(ValueError, match="allowed spark://HOST:PORT"):
        check_master("spark://nohostport")
    with socket.socket() as srv:  # a listening master (HA list: the second answers)
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        check_master(f"spark://no-such-host.invalid:7077,127.0.0.1:{srv.getsockname()[1]}")
    check_master("local[2]")


def test_a_pipeline_on_an_unreachable_master_fails_in_one_line_at_once(tmp_path):
    inp = str(tmp_path / "sets")
    write_deltalake(inp, pa.table({"id": pa.array([1, 2, 3], pa.int64()), "text": ["a b c", "a b d", "x y"]}))
    env = {**os.environ, "SIMJOIN_SPARK_MASTER": "spark://no-such-host.invalid:7077", "SIMJOIN_SPARK_REMOTE": "off",
           "SIMJOIN_WAREHOUSE": str(tmp_path / "wh")}
    t0 = time.perf_counter()
    r = subprocess.run([str(Path(sys.executable).parent / "simjoin"), "ssj", "--input", inp, "--output",
                        str(tmp_path / "out"), "--threshold", "0.5", "--executor", "spark"],
                       capture_output=True, text=True, env=env, timeout=120, cwd=str(tmp_path))
    took = time.perf_counter() - t0
    err = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode != 0 and len(err) == 1, r.stderr[-3000:]
    assert "unknown host 'no-such-host.invalid'" in err[0] and "Traceback" not in r.stderr, err
    assert took < 10, took
