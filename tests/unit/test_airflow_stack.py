"""The Airflow stack's environment: the execution API URL follows the API host and port, and
SIMJOIN_SPARK_REMOTE names a warm Spark or nothing."""

import pytest

from jobs.tools.airflow_stack import free_port, stack_env
from simjoin.spark import session


def test_execution_api_url_follows_the_port():
    env = stack_env({"AIRFLOW__API__PORT": "8090", "PATH": "/usr/bin"})
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:8090/execution/"
    assert env["AIRFLOW__API__HOST"] == "127.0.0.1"  # loopback unless told otherwise
    env = stack_env({"AIRFLOW__API__PORT": "9000", "AIRFLOW__API__HOST": "0.0.0.0"})
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:9000/execution/"
    env = stack_env({"AIRFLOW__CORE__EXECUTION_API_SERVER_URL": "http://api:8080/execution/"})
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://api:8080/execution/"  # an explicit one stays


def test_remote_url(monkeypatch):
    for off in ("", "off", "0", "none"):
        monkeypatch.setenv("SIMJOIN_SPARK_REMOTE", off)
        assert session.remote_url() is None
    monkeypatch.setenv("SIMJOIN_SPARK_REMOTE", "sc://127.0.0.1:15002")
    assert session.remote_url() == "sc://127.0.0.1:15002"
    monkeypatch.setenv("SIMJOIN_SPARK_REMOTE", "http://127.0.0.1:15002")
    with pytest.raises(ValueError, match="allowed sc://host:port"):
        session.remote_url()


def test_nothing_answers_on_a_free_port():
    assert not session._answers(f"sc://127.0.0.1:{free_port()}", timeout=0.2)


def test_a_stopped_group_leaves_no_process_behind():
    """The leader of a process group exits on SIGTERM, a child that ignores SIGTERM lingers (as
    ``airflow standalone``'s scheduler did once): ``_end_group`` kills it after the grace time."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from jobs.tools.airflow_stack import _end_group, group_alive

    child = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             "open(__import__('sys').argv[1], 'w').close(); time.sleep(120)")
    leader = ("import subprocess, sys, time; "
              f"subprocess.Popen([sys.executable, '-c', {child!r}, sys.argv[1]]); time.sleep(120)")
    import tempfile

    flag = os.path.join(tempfile.mkdtemp(), "started")
    p = subprocess.Popen([sys.executable, "-c", leader, flag], start_new_session=True)
    for _ in range(100):
        if os.path.exists(flag):
            break
        time.sleep(0.1)
    os.killpg(p.pid, signal.SIGTERM)
    p.wait(10)
    assert group_alive(p.pid)  # the child is still there
    t0 = time.monotonic()
    _end_group(p.pid, grace_s=0.5)
    assert time.monotonic() - t0 < 5
    for _ in range(50):
        if not group_alive(p.pid):
            break
        time.sleep(0.1)
    assert not group_alive(p.pid)


def test_a_module_run_as_a_script_defines_everything_before_it_runs():
    """``python -m jobs.tools.airflow_stack`` (``make airflow``) ran ``main()`` from a
    ``__main__`` guard placed above two helpers its ``stop()`` calls: Ctrl-C then failed with a
    NameError and left the warm Spark running. Every such guard is the module's last statement."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    bad = []
    for f in [*root.glob("jobs/**/*.py"), *root.glob("lib/simjoin/**/*.py"), *root.glob("bench/*.py")]:
        body = ast.parse(f.read_text()).body
        for i, node in enumerate(body):
            if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and i != len(body) - 1:
                bad.append(f"{f.relative_to(root)}:{node.lineno}")
    assert not bad, f"a __main__ guard is not the last statement: {bad}"
