"""`make airflow` lives and dies as one, as a user runs it: `make airflow` itself, in its own
terminal session, on free ports that are not the defaults, with the warm Spark. The stack is ended
the ways a user's stack ends (the terminal closes: SIGHUP to its process group; `kill -9` or the
OOM killer: SIGKILL of the stack process; a supervisor: SIGTERM), and each time no process of it
is left within 10 s (3 s for SIGTERM) and the next `make airflow` on the same home and ports is
healthy. A stack whose watchdog died with it leaves processes behind: the next start stops them
itself. Only a foreign process on a port is refused, by name, and so is a second stack on one home."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from jobs.tools.airflow_stack import STATE_FILE, free_port, healthy
from simjoin import procs

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.airflow


class MakeAirflow:
    """One `make airflow` in a session of its own (as in a terminal of its own)."""

    def __init__(self, home: Path, api_port: int, connect_port: int, warehouse: Path, log: Path) -> None:
        self.home, self.api_port, self.connect_port = home, api_port, connect_port
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SIMJOIN_SPARK_REMOTE"))}
        env.update({"AIRFLOW__API__PORT": str(api_port), "SIMJOIN_SPARK_CONNECT_PORT": str(connect_port),
                    "SIMJOIN_WAREHOUSE": str(warehouse), "SIMJOIN_WARM_SPARK": "1"})
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(["make", "--no-print-directory", "airflow", f"AIRFLOW_HOME={home}"],
                                         cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def healthy(self) -> bool:
        return healthy(f"http://127.0.0.1:{self.api_port}")

    def wait_ready(self, timeout: float = 300) -> dict:
        deadline = time.monotonic() + timeout
        while "Airflow ready on" not in self.output():
            assert self.proc.poll() is None, f"make airflow exited ({self.proc.returncode}):\n{self.output()[-3000:]}"
            assert time.monotonic() < deadline, f"make airflow not ready in {timeout:.0f}s:\n{self.output()[-3000:]}"
            time.sleep(0.5)
        assert self.healthy()
        state = json.loads((self.home / STATE_FILE).read_text())
        assert {p["name"] for p in state["procs"]} == {"simjoin spark-server", "airflow standalone"}
        assert state["api_port"] == self.api_port and state["connect_port"] == self.connect_port
        return state


def _left(home: Path) -> list[str]:
    return [procs.describe(pid) for pid in procs.marked(f"{os.path.realpath(home)}|")]


def _gone_within(home: Path, ports: tuple[int, ...], seconds: float, since: float, stack: int) -> float:
    """Seconds from ``since`` until no process of the stack (nor the stack process) runs and its
    ports are free."""
    deadline = since + seconds
    while _left(home) or procs.alive(stack) or any(procs.port_owner(p) for p in ports):
        assert time.monotonic() < deadline, (
            f"still running {seconds:.0f}s after the stack ended: {_left(home)}; "
            f"ports: {[procs.port_owner(p) for p in ports]}")
        time.sleep(0.1)
    return time.monotonic() - since


def _private(home: Path) -> None:
    """Issue 57: the stack's home is 0700; every file that holds a secret is 0600 (they are
    created so, before Airflow writes to them); nothing under the home is writable by others."""
    import stat

    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    for name in ("airflow.cfg", "airflow.db", "simple_auth_manager_passwords.json.generated", STATE_FILE):
        assert stat.S_IMODE((home / name).stat().st_mode) == 0o600, name
    for f in home.rglob("*"):
        assert f.is_symlink() or not f.stat().st_mode & 0o002, f"{f} is writable by others"


def test_make_airflow_lives_and_dies_as_one(tmp_path):
    home, wh = tmp_path / "home", tmp_path / "warehouse"
    ports = (free_port(), free_port())
    assert 8080 not in ports and 8793 not in ports and 15002 not in ports

    def start(n: int) -> tuple[MakeAirflow, dict]:
        m = MakeAirflow(home, *ports, wh, tmp_path / f"make-{n}.log")
        return m, m.wait_ready()

    # 1. the terminal closes: SIGHUP to the whole foreground process group (make and the stack)
    m, state = start(1)
    assert len(_left(home)) >= 4  # standalone, its scheduler, dag-processor, api-server, the warm Spark...
    _private(home)
    os.killpg(m.proc.pid, signal.SIGHUP)
    took = _gone_within(home, ports, 10, time.monotonic(), int(state["pid"]))
    m.proc.wait(10)
    assert not (home / STATE_FILE).exists()
    print(f"SIGHUP: all gone in {took:.1f}s")

    # 2. kill -9 of the stack process: its watchdog ends everything it started
    # 3. a supervisor's SIGTERM to the stack process: a bounded stop
    for n, sig in ((2, signal.SIGKILL), (3, signal.SIGTERM)):
        m, state = start(n)
        t0 = time.monotonic()
        os.kill(int(state["pid"]), sig)
        took = _gone_within(home, ports, 10, t0, int(state["pid"]))
        m.proc.wait(10)
        print(f"{sig.name}: all gone in {took:.1f}s")
    assert took < 3.0, f"SIGTERM took {took:.1f}s to stop the stack (allowed 3 s)"

    # 4. the stack and its watchdog both killed: the leftovers keep the ports, and the next start
    # stops them itself (by the state file and the marker), then starts cleanly on the same ports
    m, state = start(4)
    os.kill(int(state["watchdog"]), signal.SIGKILL)
    os.kill(int(state["pid"]), signal.SIGKILL)
    m.proc.wait(10)
    time.sleep(1)
    assert _left(home) and m.healthy()  # a stale stack, still serving
    m, state = start(5)
    assert "an earlier stack of" in m.output()

    # a second stack on the same home is refused, naming the running one; nothing of it stays
    second = MakeAirflow(home, free_port(), free_port(), wh, tmp_path / "make-second.log")
    assert second.proc.wait(60) != 0
    line = [x for x in second.output().splitlines() if x.startswith("error:")]
    assert line and "already runs" in line[0] and f"pid {state['pid']}" in line[0], second.output()[-2000:]
    assert m.healthy()

    os.killpg(m.proc.pid, signal.SIGINT)  # Ctrl-C
    _gone_within(home, ports, 10, time.monotonic(), int(state["pid"]))
    m.proc.wait(10)

    # 5. a foreign process on the API port: refused in one line naming it, nothing started
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the stack's connections in TIME_WAIT
        s.bind(("127.0.0.1", ports[0]))
        s.listen()
        foreign = MakeAirflow(home, *ports, wh, tmp_path / "make-foreign.log")
        assert foreign.proc.wait(60) != 0
        line = [x for x in foreign.output().splitlines() if x.startswith("error:")]
        assert line and f"port {ports[0]} is in use by pid {os.getpid()} (" in line[0], foreign.output()[-2000:]
        assert not _left(home)
