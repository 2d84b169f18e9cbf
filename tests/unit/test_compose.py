"""docker-compose.yml and the Dockerfile cannot run here (no Docker engine): check what they say.

Also `python -m jobs.tools.compose_env` (the .env with the secrets) and the Spark RPC
authentication hook in ``simjoin.spark.session``, neither of which starts Spark.
"""

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW = {"airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"}
SPARK = {"spark-master", "spark-worker-1", "spark-worker-2"}
WAREHOUSE = "/opt/simjoin/warehouse"
REF = re.compile(r"^\$\{[A-Z0-9_]+(:?\?[^}]*)?\}$")  # ${VAR} or ${VAR:?message}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def services(compose: dict) -> dict:
    return compose["services"]


def _env(svc: dict) -> dict[str, str]:
    env = svc.get("environment") or {}
    assert isinstance(env, dict), "environment as a mapping"
    return {k: str(v) for k, v in env.items()}


def _cmd(svc: dict) -> str:
    c = svc.get("command", "")
    return " ".join(c) if isinstance(c, list) else str(c)


def test_services(services):
    assert set(services) == {"postgres"} | AIRFLOW | SPARK
    assert services["postgres"]["image"].startswith("postgres:16")
    cmds = {name: _cmd(svc) for name, svc in services.items()}
    assert cmds["airflow-init"] == "airflow db migrate"
    assert cmds["airflow-apiserver"].endswith("exec airflow api-server")
    assert cmds["airflow-scheduler"] == "airflow scheduler"
    assert cmds["airflow-dag-processor"] == "airflow dag-processor"
    assert cmds["airflow-triggerer"] == "airflow triggerer"
    assert "org.apache.spark.deploy.master.Master" in cmds["spark-master"]
    for w in ("spark-worker-1", "spark-worker-2"):
        assert "org.apache.spark.deploy.worker.Worker spark://spark-master:7077" in cmds[w]


def test_one_image_from_the_dockerfile(services):
    for name, svc in services.items():
        if name == "postgres":
            continue
        build = svc.get("build")
        assert build == {"context": ".", "dockerfile": "Dockerfile"}, f"{name}: built from the Dockerfile"
        assert svc["image"] == services["spark-master"]["image"], f"{name}: one image for all"


def test_ports_on_loopback_only(services):
    published = []
    for name, svc in services.items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
            published.append(str(port).split(":")[-1])
    assert "8080" in published and "7077" not in published  # the UI, never the master's RPC port


def test_shared_warehouse_volume(compose, services):
    assert "warehouse" in compose["volumes"]
    for name in AIRFLOW | SPARK:
        assert f"warehouse:{WAREHOUSE}" in services[name]["volumes"], f"{name}: warehouse not mounted"
        assert _env(services[name])["SIMJOIN_WAREHOUSE"] == WAREHOUSE


def test_airflow_env(services):
    for name in AIRFLOW:
        env = _env(services[name])
        assert env["SIMJOIN_SPARK_MASTER"] == "spark://spark-master:7077"
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
        assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-apiserver:8080/execution/"
        assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/simjoin/dags"
        conn = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        assert conn.startswith("postgresql+psycopg2://airflow:${POSTGRES_PASSWORD") and "@postgres:5432/" in conn
        for key in ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY", "AIRFLOW__CORE__FERNET_KEY"):
            assert env[key] == f"${{{key}:?run make compose-env}}", f"{name}: {key} from .env, the same everywhere"
        assert "SIMJOIN_WARM_SPARK" not in env and "SIMJOIN_SPARK_REMOTE" not in env
    api = _env(services["airflow-apiserver"])
    assert api["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] == "admin:admin"
    assert api["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"].startswith("/opt/airflow/")
    assert api["SIMJOIN_ADMIN_PASSWORD"].startswith("${SIMJOIN_ADMIN_PASSWORD")
    assert "compose_env --airflow-passwords" in _cmd(services["airflow-apiserver"])
    # the tasks' drivers run in the scheduler: executors must reach it by its name
    sched = services["airflow-scheduler"]
    assert _env(sched)["SPARK_LOCAL_HOSTNAME"] == sched["hostname"] == "airflow-scheduler"
    assert _env(sched)["SPARK_LOCAL_IP"] == "airflow-scheduler"  # not simjoin's 127.0.0.1 default


def test_spark_auth_everywhere(services):
    for name in SPARK:
        opts = _env(services[name])["SPARK_DAEMON_JAVA_OPTS"]
        assert "-Dspark.authenticate=true" in opts
        assert "secret" not in opts, name  # a -D option is on the daemon's command line: ps shows it
        assert _env(services[name])["_SPARK_AUTH_SECRET"].startswith("${SPARK_AUTH_SECRET"), name
        assert _env(services[name])["SPARK_LOCAL_HOSTNAME"] == services[name]["hostname"]
    for name in AIRFLOW:  # the applications: simjoin's session sets spark.authenticate from it
        assert _env(services[name])["SIMJOIN_SPARK_AUTH_SECRET"].startswith("${SPARK_AUTH_SECRET")


def test_healthchecks_and_start_order(services):
    for name, svc in services.items():
        if name != "airflow-init":
            assert svc.get("healthcheck", {}).get("test"), f"{name}: no healthcheck"
    assert "pg_isready" in services["postgres"]["healthcheck"]["test"]
    assert "/api/v2/monitor/health" in " ".join(services["airflow-apiserver"]["healthcheck"]["test"])
    assert services["airflow-init"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in AIRFLOW - {"airflow-init"}:
        assert services[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"
    assert services["airflow-scheduler"]["depends_on"]["spark-master"]["condition"] == "service_healthy"
    assert services["airflow-scheduler"]["depends_on"]["airflow-apiserver"]["condition"] == "service_healthy"
    for w in ("spark-worker-1", "spark-worker-2"):
        assert services[w]["depends_on"]["spark-master"]["condition"] == "service_healthy"


def test_no_literal_secret(services):
    secretish = re.compile(r"PASSWORD|SECRET|KEY", re.I)
    for name, svc in services.items():
        for k, v in _env(svc).items():
            if k.endswith("_FILE"):  # where a secret lives, not the secret
                assert v.startswith("/"), f"{name}: {k}"
            elif secretish.search(k):
                assert REF.match(v), f"{name}: {k} is not a ${{VAR}} reference"
            # a secret inside a longer value (a URL, JVM options) is a reference too
            for m in re.finditer(r"(?i)secret=(\S*)|://[^:/@\s]+:([^@/\s]*)@", v):
                assert (m.group(1) or m.group(2)).startswith("${"), f"{name}: {k} holds a literal secret"
    for path in ("docker-compose.yml", "Dockerfile"):
        text = (ROOT / path).read_text()
        assert not re.search(r"(?i)(password|secret|fernet)[\w.]*\s*[:=]\s*['\"]?[A-Za-z0-9+]{8}", text), path


def test_dockerfile():
    text = (ROOT / "Dockerfile").read_text()
    froms = re.findall(r"(?m)^FROM\s+(\S+)", text)
    assert froms and all(re.fullmatch(r"python:3\.11-slim(-\w+)?", f) for f in froms), froms
    assert "openjdk-17-jre-headless" in text
    assert re.search(r"pip install \. psycopg2-binary", text)
    assert "get_spark()" in text  # Delta's jars fetched at build time, cached for offline use
    assert re.search(r"(?m)^USER\s+(?!root)\w+", text)
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".env", ".git", "warehouse", "airflow_home", "bench/results"} <= set(ignore)
    assert ".env" in (ROOT / ".gitignore").read_text().split()


def _compose_env(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobs.tools.compose_env", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def _parse_env(path: Path) -> dict[str, str]:
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    return dict(ln.split("=", 1) for ln in lines)


def test_compose_env_writes_private_file_once(tmp_path):
    from jobs.tools.compose_env import KEYS

    target = tmp_path / "sub" / ".env"
    r = _compose_env("--path", str(target))
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    values = _parse_env(target)
    assert set(values) == set(KEYS)
    assert {"POSTGRES_PASSWORD", "AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__CORE__FERNET_KEY", "SPARK_AUTH_SECRET",
            "SIMJOIN_ADMIN_PASSWORD"} <= set(values)
    assert all(re.fullmatch(r"[A-Za-z0-9_=-]{32,}", v) for v in values.values())  # URL- and shell-safe
    assert len(set(values.values())) == len(values)
    import base64

    assert len(base64.urlsafe_b64decode(values["AIRFLOW__CORE__FERNET_KEY"])) == 32  # Fernet's format
    # every variable compose interpolates is one the file holds
    wanted = set(re.findall(r"\$\{([A-Z0-9_]+)", (ROOT / "docker-compose.yml").read_text()))
    assert wanted <= set(values), wanted - set(values)

    again = _compose_env("--path", str(target))
    assert again.returncode == 1 and "--force" in again.stderr
    assert _parse_env(target) == values  # untouched
    target.chmod(0o644)
    forced = _compose_env("--path", str(target), "--force")
    assert forced.returncode == 0, forced.stderr
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and _parse_env(target) != values


def test_airflow_passwords_file(tmp_path):
    from jobs.tools.compose_env import write_airflow_passwords

    target = tmp_path / "airflow" / "passwords.json"
    env = {"SIMJOIN_ADMIN_PASSWORD": "pw-from-env", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(target)}
    assert write_airflow_passwords(env) == target
    assert json.loads(target.read_text()) == {"admin": "pw-from-env"}
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    with pytest.raises(ValueError, match="SIMJOIN_ADMIN_PASSWORD"):
        write_airflow_passwords({**env, "SIMJOIN_ADMIN_PASSWORD": ""})


def test_spark_auth_secret_hook(monkeypatch):
    from simjoin.config import SparkConfig
    from simjoin.spark import session

    for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP"):  # _builder sets these
        monkeypatch.setenv(k, os.environ.get(k, ""))
    monkeypatch.delenv(session.AUTH_SECRET_ENV, raising=False)
    assert session.auth_conf() == {}
    assert "spark.authenticate" not in session._builder(SparkConfig(), None)._options
    monkeypatch.setenv(session.AUTH_SECRET_ENV, "s3cr3t")
    assert session.auth_conf() == {"spark.authenticate": "true"}
    opts = session._builder(SparkConfig(), None)._options  # a builder, no JVM started
    # the secret is no builder setting: PySpark passes those to spark-submit as --conf k=v
    assert opts["spark.authenticate"] == "true" and "s3cr3t" not in repr(opts)
    before = os.environ.get("PYSPARK_SUBMIT_ARGS")
    with session._secret_properties():  # a 0600 properties file spark-submit reads instead
        args = os.environ["PYSPARK_SUBMIT_ARGS"].split()
        assert args[0] == "--properties-file" and args[-1] == "pyspark-shell"
        path = args[1]
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        assert open(path).read() == "spark.authenticate.secret s3cr3t\n"
    assert not os.path.exists(path) and os.environ.get("PYSPARK_SUBMIT_ARGS") == before
