"""One Spark session for the whole run (chispa/quinn style) and an isolated Airflow home."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
# One test root per run, shared by pytest-xdist's workers (they inherit the controller's env and
# put their tmp_path under its basetemp, so the warehouse confinement must be the controller's).
if "SIMJOIN_TEST_ROOT" not in os.environ:
    os.environ["SIMJOIN_TEST_ROOT"] = tempfile.mkdtemp(prefix="simjoin-tests-")
_TMP = Path(os.environ["SIMJOIN_TEST_ROOT"])
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")

# Airflow reads its home at import time: isolate it before any test module imports airflow, one
# home (SQLite database) per xdist worker.
# Forced, not defaulted: `make test` exports the project's AIRFLOW_HOME, which tests must not touch.
os.environ["AIRFLOW_HOME"] = str(_TMP / f"airflow{'-' + _WORKER if _WORKER else ''}")
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"
os.environ["SIMJOIN_WAREHOUSE"] = str(_TMP / "warehouse")
os.environ["PYSPARK_PYTHON"] = sys.executable
# The warm gate server (simjoin.quality.gate_server) the tests' runs start stays a minute after its
# last request, not the default quarter hour, so none outlives the test run by long.
os.environ.setdefault("SIMJOIN_GATE_SERVER_IDLE", "60")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """Every test's ``tmp_path`` lives inside the test warehouse: DAG tasks confine their tables to
    SIMJOIN_WAREHOUSE (SIMJOIN_WAREHOUSE_ONLY, on by default for Airflow runs), so DAG tests that
    write under ``tmp_path`` run with the confinement on, as a real DAG user does."""
    if not config.option.basetemp:
        (_TMP / "warehouse").mkdir(parents=True, exist_ok=True)
        config.option.basetemp = str(_TMP / "warehouse" / "pytest")


@pytest.fixture(scope="session")
def spark():
    from simjoin.config import SparkConfig
    from simjoin.spark.session import get_spark

    s = get_spark(SparkConfig(master="local[2]", warehouse=str(_TMP / "warehouse"), shuffle_partitions=4))
    yield s
    import logging

    logging.getLogger("py4j").setLevel(logging.WARNING)  # no chatter on closed streams at exit
    s.stop()


@pytest.fixture()
def tmp_table(tmp_path):
    """A fresh path for a Delta table."""
    return lambda name="t": str(tmp_path / name)


@pytest.fixture(scope="session")
def airflow_db():
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True,
                   capture_output=True, env=dict(os.environ))
    return os.environ["AIRFLOW_HOME"]


def pytest_collection_modifyitems(config, items):
    """Tests that start airflow standalone or a Spark cluster belong to the slow suite. Test files
    run heaviest first (``tests/durations.json``), each file's tests in their order: xdist's
    workers take whole files in this order (``--dist loadfile --no-loadscope-reorder``), so the
    long files start first and the short ones fill the end instead of one worker idling."""
    from collections import Counter

    from tests.durations import load, order_key

    for item in items:
        if item.get_closest_marker("airflow") or item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.slow)
    weights = load()
    files = [Path(str(item.path)).resolve().relative_to(ROOT).as_posix() for item in items]
    counts = Counter(files)
    first = {f: i for i, f in reversed(list(enumerate(files)))}
    keyed = sorted(zip(files, range(len(items)), items),
                   key=lambda t: (order_key(weights, t[0], counts[t[0]]), first[t[0]], t[1]))
    items[:] = [item for _, _, item in keyed]
