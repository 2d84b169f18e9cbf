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


def _wait_for(path: str, timeout: float = 20) -> None:
    import os
    import time

    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


# a process that ignores SIGTERM, leaves its parent's session (as a task process or a daemon may)
# and says it started by creating argv[1]
_STUBBORN = ("import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); os.setsid(); "
             "open(sys.argv[1], 'w').close(); time.sleep(120)")


def test_terminate_ends_a_group_and_every_marked_process_within_its_grace(tmp_path):
    """A group's leader exits on SIGTERM, its child ignores SIGTERM and moved to its own session
    (so no signal to the group reaches it): the marker in its environment finds it, and SIGKILL
    ends it after the grace time. A process with another stack's marker is left alone."""
    import os
    import subprocess
    import sys
    import time

    from simjoin import procs

    flag, other_flag = str(tmp_path / "started"), str(tmp_path / "other")
    leader = ("import subprocess, sys, time; "
              f"subprocess.Popen([sys.executable, '-c', {_STUBBORN!r}, sys.argv[1]]); time.sleep(120)")
    mine = {**os.environ, procs.MARK_ENV: f"{tmp_path}|a"}
    p = subprocess.Popen([sys.executable, "-c", leader, flag], start_new_session=True, env=mine)
    other = subprocess.Popen([sys.executable, "-c", _STUBBORN, other_flag],
                             env={**os.environ, procs.MARK_ENV: f"{tmp_path}x|a"})
    _wait_for(flag)
    _wait_for(other_flag)
    child = procs.marked(f"{tmp_path}|")
    assert len(child) == 2 and p.pid in child  # the leader and its child; not the other stack's
    t0 = time.monotonic()
    assert procs.terminate([p.pid], f"{tmp_path}|a", grace_s=0.5) == 2
    assert time.monotonic() - t0 < 3
    p.wait(5)
    assert procs.marked(f"{tmp_path}|") == [] and not any(procs.alive(pid) for pid in child)
    assert procs.alive(other.pid)
    other.kill()
    other.wait()


def test_the_watchdog_ends_the_stack_s_processes_when_the_stack_is_killed(tmp_path):
    """SIGKILL of the stack process (or the OOM killer): the pipe to the watchdog closes, and the
    watchdog ends the process group it was told of and every marked process, also one in a
    session of its own that ignores SIGTERM."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from simjoin import procs

    flag = str(tmp_path / "started")
    marker = f"{tmp_path}|n"
    stack = (
        "import os, subprocess, sys, time\n"
        f"w = subprocess.Popen([sys.executable, {procs.__file__!r}, 'watchdog', {marker!r}], "
        "stdin=subprocess.PIPE, start_new_session=True)\n"
        f"env = dict(os.environ, {procs.MARK_ENV}={marker!r})\n"
        f"c = subprocess.Popen([sys.executable, '-c', {_STUBBORN!r}, sys.argv[1]], env=env)\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
        "w.stdin.write(f'{g.pid}\\n'.encode()); w.stdin.flush()\n"
        "print(w.pid, c.pid, g.pid, flush=True); time.sleep(120)\n")
    p = subprocess.Popen([sys.executable, "-c", stack, flag], stdout=subprocess.PIPE, text=True)
    watchdog, child, group = (int(x) for x in p.stdout.readline().split())
    _wait_for(flag)
    assert all(procs.alive(pid) for pid in (watchdog, child, group))
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 10
    while any(procs.alive(pid) for pid in (watchdog, child, group)):
        assert time.monotonic() < deadline, "the stack's processes outlived it"
        time.sleep(0.1)


def test_port_owner_names_the_listener():
    import socket

    from simjoin import procs

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert procs.port_owner(port) is None  # bound, not listening
        s.listen()
        who = procs.port_owner(port)
        assert who is not None and who.startswith(f"pid {__import__('os').getpid()} (")
    assert procs.port_owner(port) is None


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
