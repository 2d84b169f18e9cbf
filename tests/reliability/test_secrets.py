"""No secret on a command line, in a log or in a world-readable file (issue 37, item 5).

The reproduction: ``simjoin spark-server`` passed ``spark.connect.authenticate.token`` (and a
driver ``spark.authenticate.secret``) to ``spark-submit`` as ``--conf k=v``, so ``ps -eo args``
showed them to every local user, who could then run code in the warm Spark. Now:

- a warm Spark started with ``SIMJOIN_SPARK_AUTH_SECRET`` and no token generates one into a 0600
  file (``SIMJOIN_SPARK_TOKEN_FILE``); neither the token nor the secret is on any process's
  command line, in the server's log, in a client's output or in the task-timing table; the JVM
  has both all the same (a client without the token is refused, the secret is in its conf);
- a client of the same user finds the token in that file; a token file others may read is
  refused with one line; the file goes when the server stops;
- an Airflow task run (``dag.test()``) with the token and the secret in its environment logs
  neither; ``make airflow`` writes the admin's password 0600 (``airflow standalone`` would print
  it to its log) and makes ``airflow.cfg`` (Airflow's generated JWT secret) 0600.
"""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.tools.airflow_stack import free_port

BIN = Path(sys.executable).parent
SECRET = secrets.token_urlsafe(24)


def _ps() -> str:
    return subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from simjoin.spark.session import _answers

    root = tmp_path_factory.mktemp("secrets")
    port = free_port()
    token_file = root / "private" / "connect.token"
    env = {k: v for k, v in os.environ.items() if k not in ("SIMJOIN_SPARK_REMOTE", "SPARK_CONNECT_AUTHENTICATE_TOKEN")}
    env.update(SIMJOIN_SPARK_AUTH_SECRET=SECRET, SIMJOIN_SPARK_TOKEN_FILE=str(token_file))
    log_path = root / "server.log"
    log = open(log_path, "wb")  # noqa: SIM115
    p = subprocess.Popen([str(BIN / "simjoin"), "spark-server", "--port", str(port)], env=env, stdout=log,
                         stderr=subprocess.STDOUT, start_new_session=True)
    url = f"sc://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while not _answers(url):
        assert p.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
        time.sleep(0.5)
    yield {"url": url, "port": port, "token_file": token_file, "log": log_path, "proc": p, "env": env}
    if p.poll() is None:
        p.terminate()
        p.wait(timeout=60)
    log.close()


def _client(server, *args: str, **extra: str) -> subprocess.Popen:
    env = {k: v for k, v in server["env"].items() if k != "SIMJOIN_SPARK_AUTH_SECRET"}
    env.update(SIMJOIN_SPARK_REMOTE=server["url"], SIMJOIN_FAULTS="", **extra)
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow  # a warm Spark or an Airflow DAG run
def test_no_secret_on_a_command_line_in_a_log_or_a_world_readable_file(server, tmp_path):
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from simjoin.pipeline.timing import timing_path

    token_file = server["token_file"]
    token = token_file.read_text().strip()
    assert len(token) >= 24
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
    ps = _ps()
    assert f"spark.connect.grpc.binding.port={server['port']}" in ps, "the warm Spark's JVM is not in ps"
    assert token not in ps and SECRET not in ps

    # a client of the same user: the token from the file, nothing secret in ps, its output or the timing table
    src = str(tmp_path / "sets")
    write_deltalake(src, pa.table({"id": pa.array(range(60), pa.int64()),
                                   "text": [f"t{i % 7} t{i % 5} t{i % 3}" for i in range(60)]}))
    c = _client(server, str(BIN / "simjoin"), "ssj", "--input", src, "--output", str(tmp_path / "pairs"),
                "--threshold", "0.5")
    seen = ""
    while c.poll() is None:
        seen += _ps()
        time.sleep(0.2)
    out, err = c.communicate()
    assert c.returncode == 0, err[-3000:]
    assert "connected to the warm Spark" in err
    assert token not in seen + out + err and SECRET not in seen + out + err
    timing = DeltaTable(timing_path()).to_pyarrow_table().to_pylist()
    assert any(r.get("output") == str(tmp_path / "pairs") for r in timing), "the run recorded no task timing"
    assert token not in repr(timing) and SECRET not in repr(timing)

    # the JVM has both: the secret in its conf (from the 0600 properties file), the token enforced
    code = ("import os\nfrom pyspark.sql import SparkSession\n"
            "s = SparkSession.builder.remote(os.environ['URL']).getOrCreate()\n"
            "print(s.conf.get('spark.authenticate'), s.conf.get('spark.authenticate.secret') == os.environ['WANT'])")
    url = server["url"].replace("127.0.0.1", "localhost")
    probe = _client(server, sys.executable, "-c", code, URL=url, WANT=SECRET, SPARK_CONNECT_AUTHENTICATE_TOKEN=token)
    out, err = probe.communicate(timeout=300)
    assert probe.returncode == 0 and out.split() == ["true", "True"], err[-3000:]
    probe = _client(server, sys.executable, "-c", code, URL=url, WANT=SECRET, SPARK_CONNECT_AUTHENTICATE_TOKEN="no")
    _, err = probe.communicate(timeout=300)
    assert probe.returncode != 0 and ("UNAUTHENTICATED" in err or "authenticat" in err.lower()), err[-2000:]

    # a token file others may read is refused with one line
    leaky = tmp_path / "leaky.token"
    leaky.write_text(token)
    leaky.chmod(0o644)
    c = _client(server, str(BIN / "simjoin"), "ssj", "--input", src, "--output", str(tmp_path / "p2"),
                SIMJOIN_SPARK_TOKEN_FILE=str(leaky))
    out, err = c.communicate(timeout=300)
    assert c.returncode == 2, err[-3000:]
    assert err.strip().splitlines()[-1] == (f"error: {leaky} has mode 0644: allowed 0600, readable by its owner only "
                                            f"(chmod 600 {leaky}, and replace the secret if others read it)")

    log = server["log"].read_text()
    assert "warm Spark ready" in log and str(token_file) in log
    assert token not in log and SECRET not in log


@pytest.mark.slow  # a warm Spark or an Airflow DAG run
def test_airflow_task_logs_hold_no_secret(airflow_db, spark, tmp_path, monkeypatch, capfd, caplog):
    """A DAG run whose tasks have the token and the secret in their environment logs neither."""
    from simjoin.pipeline.dags import build_dag

    token = secrets.token_urlsafe(24)
    monkeypatch.setenv("SPARK_CONNECT_AUTHENTICATE_TOKEN", token)
    monkeypatch.setenv("SIMJOIN_SPARK_AUTH_SECRET", SECRET)
    dag = build_dag("generate")
    run = dag.test(run_conf={"kind": "keys", "out": str(tmp_path / "keys"), "rows": 50, "domain": 5, "seed": 1})
    assert str(run.state) in ("success", "DagRunState.SUCCESS")
    captured = capfd.readouterr()
    logs = captured.out + captured.err + caplog.text
    for f in Path(os.environ["AIRFLOW_HOME"]).rglob("*.log"):
        logs += f.read_text(errors="replace")
    assert "generate" in logs
    assert token not in logs and SECRET not in logs


@pytest.mark.cluster
def test_an_authenticated_standalone_cluster_gets_the_secret_off_the_command_line(tmp_path):
    """As docker-compose.yml runs it: master and worker with ``-Dspark.authenticate=true`` and the
    secret in ``_SPARK_AUTH_SECRET``, a driver with ``SIMJOIN_SPARK_AUTH_SECRET`` (a 0600
    properties file); a job runs on the worker's executor, and ``ps`` never shows the secret."""
    import textwrap

    script = textwrap.dedent(f"""
        import os, subprocess
        from simjoin.spark.cluster import StandaloneCluster
        from simjoin.config import SparkConfig
        from simjoin.spark.session import get_spark
        os.environ["SPARK_DAEMON_JAVA_OPTS"] = "-Dspark.authenticate=true"
        secret = os.environ.pop("TEST_SECRET")  # not in this script: it is on a command line
        os.environ["_SPARK_AUTH_SECRET"] = secret
        with StandaloneCluster(cores=1, memory="1g", work_dir={str(tmp_path)!r}) as url:
            del os.environ["_SPARK_AUTH_SECRET"]  # the driver: from SIMJOIN_SPARK_AUTH_SECRET only
            os.environ["SIMJOIN_SPARK_AUTH_SECRET"] = secret
            spark = get_spark(SparkConfig(master=url, warehouse={str(tmp_path / 'wh')!r}, shuffle_partitions=2))
            n = spark.range(0, 1000, numPartitions=2).selectExpr("sum(id)").first()[0]
            execs = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
            ps = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout
            print("RESULT", n, execs, spark.sparkContext.getConf().get("spark.authenticate"),
                  [a for a in ps.splitlines() if secret in a], "spark.deploy.master.Master" in ps)
            spark.stop()
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("SIMJOIN_SPARK_REMOTE", "SIMJOIN_SPARK_AUTH_SECRET")}
    env["TEST_SECRET"] = SECRET
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env)
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT")]
    assert p.returncode == 0 and line, p.stderr[-3000:]
    assert line[0].split()[1:] == [str(sum(range(1000))), "2", "true", "[]", "True"], line
    assert SECRET not in p.stdout + p.stderr


@pytest.mark.slow  # a warm Spark or an Airflow DAG run
def test_the_token_file_goes_with_the_server(server):
    token = server["token_file"].read_text().strip()
    p = server["proc"]
    p.terminate()
    assert p.wait(timeout=60) == 0
    assert not server["token_file"].exists()
    assert token not in server["log"].read_text()


def test_make_airflow_keeps_airflows_secrets_private(tmp_path):
    """The admin's password file is written 0600 before ``airflow standalone`` starts (so it
    neither generates a 0644 one nor prints the password); an existing one and ``airflow.cfg``
    are made 0600."""
    import json

    from jobs.tools.airflow_stack import Stack

    home = tmp_path / "home"
    s = Stack(home=str(home), warm=False, env={"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": "",
                                                "AIRFLOW_CONFIG": ""})
    s._private_files()
    # created private before Airflow starts: its config (with the generated secrets) and its database
    cfg, db = home / "airflow.cfg", home / "airflow.db"
    assert "jwt_secret" in cfg.read_text() and stat.S_IMODE(cfg.stat().st_mode) == 0o600
    assert db.stat().st_size == 0 and stat.S_IMODE(db.stat().st_mode) == 0o600
    pw = home / "simple_auth_manager_passwords.json.generated"
    assert s.passwords_path() == pw and stat.S_IMODE(pw.stat().st_mode) == 0o600
    first = json.loads(pw.read_text())
    assert set(first) == {"admin"} and len(first["admin"]) >= 16 and s.password() == first["admin"]
    pw.chmod(0o644)
    (home / "airflow.cfg").write_text("[api_auth]\njwt_secret = x\n")
    (home / "airflow.cfg").chmod(0o644)
    s._private_files()
    assert json.loads(pw.read_text()) == first, "an existing password was replaced"
    assert stat.S_IMODE(pw.stat().st_mode) == stat.S_IMODE((home / "airflow.cfg").stat().st_mode) == 0o600


_FAKE = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
open(sys.argv[2] + ".ready", "w").close()
while True:
    c, _ = s.accept()
    c.settimeout(3)
    got = b""
    try:
        while chunk := c.recv(65536):
            got += chunk
    except OSError:
        pass
    with open(sys.argv[2], "ab") as fh:
        fh.write(got)
"""


def _fake_listener(tmp_path: Path, port: int, as_user: int | None) -> tuple[subprocess.Popen, Path]:
    """A fake Spark Connect server: it accepts on ``port`` and keeps every byte it receives."""
    import shutil
    import tempfile

    python = sys.executable
    kw: dict = {}
    if as_user is not None:  # another user: a folder it may write, a Python it may run
        tmp_path = Path(tempfile.mkdtemp())
        os.chmod(tmp_path, 0o777)
        python = shutil.which("python3", path="/usr/bin:/usr/local/bin:/bin") or python
        kw = {"user": as_user, "cwd": "/"}
    seen = tmp_path / f"seen-{port}"
    p = subprocess.Popen([python, "-c", _FAKE, str(port), str(seen)], **kw)
    deadline = time.monotonic() + 20
    while not Path(f"{seen}.ready").exists():
        assert p.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    return p, seen


def test_no_token_reaches_a_listener_that_is_not_the_warm_spark(tmp_path):
    """Issue 57: a local user who binds the warm Spark's port while the server is down collected
    the token (``authorization: Bearer ...``, read from the 0600 token file). Now the client checks
    who listens before a byte is sent: another user's listener is refused, and in a task of
    ``make airflow`` (its ``SIMJOIN_STACK`` marker) so is any process that stack did not start,
    this user's too; the run fails with one line saying why, and the listener receives nothing.
    ``make airflow`` takes only its own server as ready."""
    from jobs.tools.airflow_stack import Stack
    from simjoin import procs

    token = secrets.token_urlsafe(24)
    token_file = tmp_path / "private" / "connect.token"
    from simjoin.private import write_private

    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_CONNECT_AUTHENTICATE_TOKEN", procs.MARK_ENV)}
    cases = [(os.getuid(), {procs.MARK_ENV: f"{tmp_path}|stack"}, "is not the warm Spark this Airflow stack")]
    if os.getuid() == 0:  # another local user's listener (root can start one as nobody)
        cases.append((65534, {}, "runs as user 65534, not as this user"))
    for uid, extra, needle in cases:
        port = free_port()
        write_private(token_file, token + "\n")
        fake, seen = _fake_listener(tmp_path, port, uid if uid != os.getuid() else None)
        try:
            p = subprocess.run([str(BIN / "simjoin"), "ssj", "--input", str(tmp_path / "in"), "--output",
                                str(tmp_path / "out"), "--threshold", "0.5"], capture_output=True, text=True,
                               timeout=120, env={**env, **extra, "SIMJOIN_SPARK_REMOTE": f"sc://127.0.0.1:{port}",
                                                 "SIMJOIN_SPARK_TOKEN_FILE": str(token_file)})
            assert p.returncode == 2, p.stderr[-2000:]
            last = p.stderr.strip().splitlines()[-1]
            assert last.startswith("error: the process listening at") and needle in last, p.stderr[-2000:]
            assert "Traceback" not in p.stderr
            assert not _answers_with(seen, token)
            assert not Stack(home=str(tmp_path / "home"), warm=True, connect_port=port)._serves(port)
        finally:
            fake.kill()
            fake.wait()


def _answers_with(seen: Path, token: str) -> bool:
    time.sleep(0.5)
    got = seen.read_bytes() if seen.exists() else b""
    assert got == b"", f"the fake listener received {len(got)} bytes"
    return token.encode() in got
