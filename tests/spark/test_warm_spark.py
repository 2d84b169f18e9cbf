"""The warm Spark (`simjoin spark-server`, Spark Connect on loopback) gives the same tables as a
local Spark: the CLI runs in a subprocess with SIMJOIN_SPARK_REMOTE, as an Airflow task does.

- a set-similarity join equals the in-process run on a local Spark, pair for pair;
- a new S3J output created on the warm Spark reads its inputs by their Delta logs (``direct``):
  two units equal brute force; with SIMJOIN_DIRECT_INGEST=0 it ingests through its landing
  table: two units (input appended between runs) equal brute force, and a run killed after its
  input landed but before it was staged loses and repeats nothing on the rerun;
- an output created with a local Spark is refused on the warm one with one line;
- a client without the server's token is refused with one line."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.tools.airflow_stack import free_port
from tests.helpers import run_ssj
from tests.reliability.test_s3j_exactly_once import CONF, _brute_force, _pairs, _stream

BIN = Path(sys.executable).parent
TOKEN = secrets.token_urlsafe(16)


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    from simjoin.spark.session import _answers

    root = tmp_path_factory.mktemp("warm")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "SIMJOIN_SPARK_REMOTE"}
    env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = TOKEN
    log = open(root / "server.log", "wb")  # noqa: SIM115
    p = subprocess.Popen([str(BIN / "simjoin"), "spark-server", "--port", str(port)], env=env, stdout=log,
                         stderr=subprocess.STDOUT, start_new_session=True)
    url = f"sc://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while not _answers(url):
        assert p.poll() is None and time.monotonic() < deadline, (root / "server.log").read_text()[-3000:]
        time.sleep(0.5)
    yield url
    p.terminate()
    p.wait(timeout=60)
    log.close()


def _cli(url: str, *args: str, faults: str = "", ok: bool = True, token: str | None = TOKEN,
         **extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SIMJOIN_SPARK_REMOTE=url, SIMJOIN_FAULTS=faults, **extra)
    env.pop("SPARK_CONNECT_AUTHENTICATE_TOKEN", None)
    if token:
        env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = token
    p = subprocess.run([str(BIN / "simjoin"), *args], capture_output=True, text=True, env=env, timeout=900)
    if ok:
        assert p.returncode == 0, p.stderr[-3000:]
        assert "connected to the warm Spark" in p.stderr
    return p


def _naive(pairs: list) -> set:
    return {(a, b, w.replace(tzinfo=None)) for a, b, w in pairs}


def _s3j_args(src: str, out: str) -> list[str]:
    return ["s3j", "--left", src, "--output", out, "--threshold", str(CONF["threshold"]), "--metric",
            CONF["metric"], "--window", CONF["window"], "--workers", str(CONF["workers"])]


@pytest.mark.slow
@pytest.mark.exhaustive  # make test: test_airflow_rest runs ssj on the warm Spark and compares it with a local run
def test_ssj_on_the_warm_spark_equals_a_local_run(spark, warm, tmp_path):
    rows = [(i, " ".join(f"t{(i * 7 + j) % 23}" for j in range(3 + i % 4))) for i in range(300)]
    rows += [(300 + i, t) for i, (_, t) in enumerate(rows[:40])]  # exact duplicates
    src = str(tmp_path / "sets")
    spark.createDataFrame(rows, "id long, text string").write.format("delta").save(src)
    local = run_ssj(spark, input=src, output=str(tmp_path / "local"), threshold=0.6)
    _cli(warm, "ssj", "--input", src, "--output", str(tmp_path / "warm"), "--threshold", "0.6")
    from deltalake import DeltaTable

    def ids(p):
        t = DeltaTable(p).to_pyarrow_table(columns=["left_id", "right_id"]).to_pydict()
        return set(zip(t["left_id"], t["right_id"], strict=True))

    assert local.pairs > 0 and ids(str(tmp_path / "warm")) == ids(str(tmp_path / "local"))


@pytest.mark.slow
@pytest.mark.exhaustive  # make test: the fault walks; 196 s here
def test_stream_two_units_and_a_kill_after_landing_are_exact(spark, warm, tmp_path):
    src, out = str(tmp_path / "src"), str(tmp_path / "pairs")
    _stream(spark, src, 0, 200)
    _cli(warm, *_s3j_args(src, out), SIMJOIN_DIRECT_INGEST="0")  # the streaming query, through landing
    assert os.path.isdir(f"{out}_work/landing/_delta_log")
    assert _naive(_pairs(out)) == _brute_force(200)
    _stream(spark, src, 200, 300)
    p = _cli(warm, *_s3j_args(src, out), faults="s3j.ingest.landed", ok=False)
    assert p.returncode != 0 and "injected fault" in (p.stderr + p.stdout).lower()
    _cli(warm, *_s3j_args(src, out))  # stages what landed before the kill (the mode stays landing)
    _stream(spark, src, 300, 400)
    _cli(warm, *_s3j_args(src, out))
    got = _pairs(out)
    assert len(got) == len(set(got)), "a pair published twice"
    assert _naive(got) == _brute_force(400)


def test_an_output_created_with_a_local_spark_is_refused_on_the_warm_one(spark, warm, tmp_path, monkeypatch):
    """An output whose ingest is a local streaming query (``foreach``) is refused on the warm
    Spark; one that reads its inputs by their Delta logs (``direct``) runs there too, exactly."""
    from tests.helpers import run_s3j

    src, out = str(tmp_path / "src"), str(tmp_path / "pairs")
    _stream(spark, src, 0, 100)
    monkeypatch.setenv("SIMJOIN_DIRECT_INGEST", "0")
    run_s3j(spark, src, out, **CONF)
    _stream(spark, src, 100, 150)
    p = _cli(warm, *_s3j_args(src, out), ok=False)
    assert p.returncode == 2
    err = p.stderr.strip().splitlines()[-1]
    assert err.startswith("error:") and "SIMJOIN_SPARK_REMOTE=off" in err
    monkeypatch.delenv("SIMJOIN_DIRECT_INGEST")
    out = str(tmp_path / "direct")
    run_s3j(spark, src, out, **CONF)
    _stream(spark, src, 150, 250)
    _cli(warm, *_s3j_args(src, out))
    got = _pairs(out)
    assert len(got) == len(set(got)) and _naive(got) == _brute_force(250)


def test_a_stream_output_created_on_the_warm_spark_reads_its_inputs_by_their_logs(spark, warm, tmp_path):
    """A new S3J output on local tables is ``direct`` on the warm Spark too (no landing table):
    two units, the input appended between runs, equal brute force."""
    import json

    src, out = str(tmp_path / "src"), str(tmp_path / "pairs")
    _stream(spark, src, 0, 150)
    _cli(warm, *_s3j_args(src, out))
    ident = json.loads(open(f"{out}_checkpoint/simjoin.json").read())
    assert ident["ingest"] == "direct" and not os.path.exists(f"{out}_work/landing")
    _stream(spark, src, 150, 250)
    _cli(warm, *_s3j_args(src, out))
    got = _pairs(out)
    assert len(got) == len(set(got)) and _naive(got) == _brute_force(250)


def test_a_client_without_the_token_is_refused_with_one_line(warm, tmp_path):
    for token in (None, "wrong"):
        p = _cli(warm, "ssj", "--input", str(tmp_path / "x"), "--output", str(tmp_path / "y"), ok=False,
                 token=token)
        assert p.returncode == 2
        lines = p.stderr.strip().splitlines()
        assert lines[-1].startswith("error: the warm Spark at") and "SPARK_CONNECT_AUTHENTICATE_TOKEN" in lines[-1]
        assert "Traceback" not in p.stderr
