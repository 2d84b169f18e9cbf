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


def test_a_jars_folder_without_the_delta_jars_is_one_line_before_any_jvm(tmp_path):
    """Issue 63: ``SIMJOIN_JARS_DIR`` missing, or without delta-spark's jar, failed at the first
    Delta read half a minute later with a Java stack; now one line naming the variable and the jar."""
    from simjoin.spark.session import local_jars

    pkgs = "io.delta:delta-spark_4.2_2.13:4.4.0"
    with pytest.raises(ValueError, match=r"^SIMJOIN_JARS_DIR=.*/none: no such folder: allowed a folder"):
        local_jars(str(tmp_path / "none"), pkgs)
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "other-1.0.jar").write_bytes(b"")
    with pytest.raises(ValueError, match=r"no delta-spark_4.2_2.13-4.4.0.jar there \(1 jars\)"):
        local_jars(str(tmp_path / "j"), pkgs)
    (tmp_path / "j" / "delta-spark_4.2_2.13-4.4.0.jar").write_bytes(b"")
    assert [p.rsplit("/", 1)[1] for p in local_jars(str(tmp_path / "j"), pkgs)] == [
        "delta-spark_4.2_2.13-4.4.0.jar", "other-1.0.jar"]
