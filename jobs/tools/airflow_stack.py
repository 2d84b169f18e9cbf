"""`make airflow`: Airflow standalone and the warm Spark it runs its tasks on, on loopback.

- **Warm Spark.** Unless ``SIMJOIN_WARM_SPARK=0``, a ``simjoin spark-server`` (Spark Connect on
  127.0.0.1:``SIMJOIN_SPARK_CONNECT_PORT``, default 15002) starts first, and every task connects
  to it (``SIMJOIN_SPARK_REMOTE``) instead of starting its own JVM. Each task is still its own
  process and its own retryable Airflow task, with its own server-side Spark session.
- **Any port.** The execution API URL the task runners call is derived from
  ``AIRFLOW__API__HOST`` and ``AIRFLOW__API__PORT``, so moving the port moves everything.
- **Lives and dies as one.** Ctrl-C, SIGTERM and SIGHUP (the terminal closed) stop Airflow and the
  warm Spark together within 3 s (SIGTERM, then SIGKILL after 1.5 s). Every process the stack starts
  carries a marker in its environment, and a watchdog in its own session ends them all when the
  stack process ends in any other way (SIGKILL, the OOM killer). The stack records what it started
  in ``AIRFLOW_HOME/simjoin-stack.json``; the next start stops what an earlier stack of that home
  left, and refuses only a foreign process on its ports, naming it (:mod:`simjoin.procs`).

:class:`Stack` is the same stack for the end-to-end test and ``bench/airflow.py``: start it in
a temporary ``AIRFLOW_HOME`` on free ports, then drive it through the REST API with a JWT.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from simjoin import procs

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
STATE_FILE = "simjoin-stack.json"

__all__ = ["Stack", "free_port", "healthy", "stack_env", "main"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def healthy(url: str) -> bool:
    """Whether Airflow's API at ``url`` answers its health check."""
    try:
        with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def stack_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the stack's processes: loopback, the derived execution API URL, the
    project's DAGs, and the latency settings that let a task start right after its upstream."""
    env = dict(os.environ if base is None else base)
    env.setdefault("AIRFLOW_HOME", str(ROOT / "airflow_home"))
    env.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(ROOT / "dags"))
    env.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    env.setdefault("AIRFLOW__API__HOST", "127.0.0.1")
    env.setdefault("AIRFLOW__API__PORT", "8080")
    host = env["AIRFLOW__API__HOST"]
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] = env.get("AIRFLOW__CORE__EXECUTION_API_SERVER_URL") or \
        f"http://{host}:{env['AIRFLOW__API__PORT']}/execution/"
    # the scheduler looks for ready tasks every 0.2 s instead of every second when idle
    env.setdefault("AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME", "0.2")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


class Stack:
    """Airflow standalone (+ the warm Spark) as child processes; ``with Stack(...) as s:``."""

    def __init__(self, home: str | None = None, api_port: int | None = None, warm: bool | None = None,
                 connect_port: int | None = None, warehouse: str | None = None, log_dir: str | None = None,
                 env: dict[str, str] | None = None) -> None:
        base = dict(os.environ)
        base.update(env or {})
        if home:
            base["AIRFLOW_HOME"] = home
        if api_port:
            base["AIRFLOW__API__PORT"] = str(api_port)
            base.pop("AIRFLOW__CORE__EXECUTION_API_SERVER_URL", None)
        if warehouse:
            base["SIMJOIN_WAREHOUSE"] = warehouse
        self.env = stack_env(base)
        self.port = int(self.env["AIRFLOW__API__PORT"])
        if warm is None:
            warm = self.env.get("SIMJOIN_WARM_SPARK", "1").lower() not in ("0", "off", "false", "no")
        self.warm = warm
        self.connect_port = connect_port or int(self.env.get("SIMJOIN_SPARK_CONNECT_PORT", "15002"))
        self.log_dir = Path(log_dir or self.env["AIRFLOW_HOME"])
        self.procs: list[subprocess.Popen[bytes]] = []
        self._names: dict[int, str] = {}
        self._watchdog: subprocess.Popen[bytes] | None = None
        self.marker = f"{self.home}|{secrets.token_hex(8)}"
        self._token: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- processes --------------------------------------------------------------------------
    @property
    def home(self) -> Path:
        return Path(os.path.realpath(self.env["AIRFLOW_HOME"]))

    @property
    def state_path(self) -> Path:
        """What this stack started (pids, process groups, start times, ports), under ``AIRFLOW_HOME``."""
        return self.home / STATE_FILE

    def start(self, timeout: float = 240, wait_for_dags: tuple[str, ...] = ()) -> Stack:
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.recover()
        for port, var in ((self.port, "AIRFLOW__API__PORT"),
                          *(((self.connect_port, "SIMJOIN_SPARK_CONNECT_PORT"),) if self.warm else ())):
            who = procs.port_owner(port) or ("a process" if _answers(port) else None)
            if who:
                raise RuntimeError(f"port {port} is in use by {who}, which this stack did not start: stop it, "
                                   f"or set {var} to a free port")
        self._watch()
        if self.warm:
            self._start_spark(timeout)
        self._private_files()
        out = open(self.log_dir / "standalone.log", "ab")  # noqa: SIM115
        self._spawn("airflow standalone", [str(BIN / "airflow"), "standalone"], self.env, out)
        deadline = time.monotonic() + timeout
        while not self._healthy():
            if self.procs[-1].poll() is not None:
                raise RuntimeError(f"airflow standalone exited; see {self.log_dir / 'standalone.log'}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Airflow did not answer on {self.url} within {timeout:.0f}s")
            time.sleep(1)
        self._private_files()  # an airflow.cfg the first start just wrote
        for dag_id in wait_for_dags:
            while self.get(f"/api/v2/dags/{dag_id}", ok=(200, 404))[0] != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"DAG {dag_id} was not parsed within {timeout:.0f}s")
                time.sleep(1)
        return self

    def recover(self) -> int:
        """Stop what an earlier stack of this ``AIRFLOW_HOME`` left running (its stack process was
        killed, and its watchdog with it): the processes its state file names and every process
        marked with this home. A stack that still runs is refused, naming its process. Returns how
        many processes were stopped."""
        state = self._read_state()
        if state and procs.alive(int(state["pid"]), state.get("start")) and int(state["pid"]) != os.getpid():
            raise RuntimeError(f"make airflow already runs for {self.home}: "
                               f"{procs.describe(int(state['pid']))}; stop it first (kill {state['pid']})")
        groups = [int(p["pgid"]) for p in (state or {}).get("procs", ())
                  if procs.alive(int(p["pid"]), p.get("start"))]
        n = procs.terminate(groups, f"{self.home}|", exclude=[self._watchdog.pid] if self._watchdog else ())
        if n:
            _say(f"stopped {n} processes an earlier stack of {self.home} left running")
        self.state_path.unlink(missing_ok=True)
        return n

    def _read_state(self) -> dict[str, Any] | None:
        try:
            state = json.loads(self.state_path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return state if isinstance(state, dict) and "pid" in state else None

    def _watch(self) -> None:
        """The watchdog: its own session, our end of a pipe on its stdin; when this process ends,
        however it ends, the pipe closes and the watchdog ends every process this stack started."""
        if self._watchdog is None:
            self._watchdog = subprocess.Popen(
                [sys.executable, "-I", str(Path(procs.__file__)), "watchdog", self.marker], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, cwd="/")

    def _spawn(self, name: str, argv: list[str], env: dict[str, str], out: Any) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(argv, env={**env, procs.MARK_ENV: self.marker}, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
        self.procs.append(p)
        assert self._watchdog is not None and self._watchdog.stdin is not None
        self._watchdog.stdin.write(f"{p.pid}\n".encode())
        self._watchdog.stdin.flush()
        self._names[p.pid] = name
        self._write_state()
        return p

    def _write_state(self) -> None:
        from simjoin.private import write_private

        state = {"pid": os.getpid(), "start": procs.proc_start(os.getpid()), "home": str(self.home),
                 "marker": self.marker, "api_port": self.port,
                 "connect_port": self.connect_port if self.warm else None,
                 "watchdog": self._watchdog.pid if self._watchdog else None,
                 "procs": [{"name": self._names.get(p.pid, ""), "pid": p.pid, "pgid": p.pid,
                            "start": procs.proc_start(p.pid)} for p in self.procs]}
        write_private(self.state_path, json.dumps(state, indent=1) + "\n")

    def passwords_path(self) -> Path:
        """Airflow's simple auth manager passwords file (``AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE``,
        else the one ``airflow standalone`` generates in ``AIRFLOW_HOME``)."""
        return Path(self.env.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE")
                    or Path(self.env["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated")

    def _private_files(self) -> None:
        """Mode 0600 from the first byte for the files that hold Airflow's secrets, before Airflow
        starts: the admin's password (``airflow standalone`` would generate it into a file of mode
        0644 and print it to its log); ``airflow.cfg``, with its generated ``jwt_secret`` and
        ``fernet_key``, written by Airflow under umask 077; ``airflow.db`` (run confs, XComs,
        connections), created empty with mode 0600 (SQLite keeps the mode, and gives its journal
        the same). An existing ``airflow.cfg`` is made 0600."""
        from simjoin.private import make_private, write_private

        path = self.passwords_path()
        if path.exists():
            make_private(path)
        else:
            write_private(path, json.dumps({"admin": secrets.token_urlsafe(16)}) + "\n")
        cfg = Path(self.env.get("AIRFLOW_CONFIG") or Path(self.env["AIRFLOW_HOME"]) / "airflow.cfg")
        if cfg.exists():
            make_private(cfg)
        else:
            # Airflow writes its generated secrets into a new airflow.cfg: let it do so under umask
            # 077, so the file is 0600 from its first byte, whatever Airflow's version does
            code = "from airflow.configuration import write_default_airflow_configuration_if_needed as w; w()"
            subprocess.run([sys.executable, "-c", code], env={**self.env, "AIRFLOW_CONFIG": str(cfg)}, check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, umask=0o077, timeout=120)
        db = Path(self.env["AIRFLOW_HOME"]) / "airflow.db"
        if not self.env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN") and not db.exists():
            os.close(os.open(db, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))  # SQLite takes an empty file

    def _start_spark(self, timeout: float) -> None:
        out = open(self.log_dir / "spark-server.log", "ab")  # noqa: SIM115
        # the token lives only in the environment of the server and of the tasks, never in a file
        self.env.setdefault("SPARK_CONNECT_AUTHENTICATE_TOKEN", secrets.token_urlsafe(24))
        env = {k: v for k, v in self.env.items() if k != "SIMJOIN_SPARK_REMOTE"}
        self._spawn("simjoin spark-server",
                    [str(BIN / "simjoin"), "spark-server", "--host", "127.0.0.1", "--port", str(self.connect_port)],
                    env, out)
        deadline = time.monotonic() + timeout
        while not self._serves(self.connect_port):
            if self.procs[-1].poll() is not None:
                raise RuntimeError(f"simjoin spark-server exited; see {self.log_dir / 'spark-server.log'}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the warm Spark did not answer within {timeout:.0f}s")
            time.sleep(0.5)
        self.env["SIMJOIN_SPARK_REMOTE"] = f"sc://localhost:{self.connect_port}"
        print(f"warm Spark: SIMJOIN_SPARK_REMOTE={self.env['SIMJOIN_SPARK_REMOTE']}", flush=True)

    def _serves(self, port: int) -> bool:
        """Ready means: a process this stack started (its marker) listens on ``port``, not merely
        any process."""
        return any(pid is not None and procs.marker_of(pid) == self.marker for _, pid in procs.listeners(port))

    def _healthy(self) -> bool:
        return healthy(self.url)

    def stop(self, grace_s: float = 1.5) -> None:
        """End every process this stack started, Airflow and the warm Spark at once: SIGTERM, and
        SIGKILL for what runs after ``grace_s`` (bounded: 3 s in all on this machine), then the
        watchdog and the state file."""
        procs.terminate([p.pid for p in self.procs], self.marker, grace_s,
                        exclude=[self._watchdog.pid] if self._watchdog else ())
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=1)
        self.procs.clear()
        if self._watchdog is not None:
            with contextlib.suppress(OSError):
                self._watchdog.stdin.close()  # type: ignore[union-attr]
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(timeout=5)
            self._watchdog = None
        state = self._read_state()
        if state and int(state["pid"]) == os.getpid():
            self.state_path.unlink(missing_ok=True)

    def __enter__(self) -> Stack:
        return self.start() if not self.procs else self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- REST ---------------------------------------------------------------------------------
    def password(self) -> str:
        return str(json.loads(self.passwords_path().read_text())["admin"])

    def token(self) -> str:
        if self._token is None:
            body = json.dumps({"username": "admin", "password": self.password()}).encode()
            req = urllib.request.Request(f"{self.url}/auth/token", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as r:
                self._token = json.loads(r.read())["access_token"]
        return self._token

    def request(self, method: str, path: str, body: Any = None, auth: bool = True,
                ok: tuple[int, ...] = (200,)) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}{path}", data, headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        payload = json.loads(raw) if raw else None
        if status not in ok:
            raise RuntimeError(f"{method} {path}: HTTP {status}: {payload}")
        return status, payload

    def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return self.request("GET", path, **kw)

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None, unpause: bool = True) -> str:
        """Unpause (by default) and trigger ``dag_id`` with ``conf``; returns the run id."""
        if unpause:
            self.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        _, run = self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                              {"logical_date": None, "conf": conf or {}})
        return str(run["dag_run_id"])

    def wait(self, dag_id: str, run_id: str, timeout: float = 600, poll: float = 0.5) -> dict[str, Any]:
        """Poll until the run ends; returns the run (its ``state`` is success or failed)."""
        deadline = time.monotonic() + timeout
        while True:
            _, run = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
            if run["state"] in ("success", "failed"):
                return dict(run)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{dag_id} run {run_id} still {run['state']} after {timeout:.0f}s")
            time.sleep(poll)

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        _, body = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return list(body["task_instances"])

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        _, body = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}")
        content = body.get("content") if isinstance(body, dict) else body
        if isinstance(content, list):  # structured entries: the event, then any error details
            return "\n".join(_log_line(c) for c in content)
        return str(content)


def _log_line(entry: Any) -> str:
    if not isinstance(entry, dict):
        return str(entry)
    extra = {k: v for k, v in entry.items() if k not in ("event", "timestamp", "level", "logger")}
    return f"{entry.get('event', '')} {json.dumps(extra, default=str)}" if extra else str(entry.get("event", ""))


def _say(text: str) -> None:
    """Print to the terminal, which may be gone (SIGHUP: it was closed)."""
    with contextlib.suppress(OSError, ValueError):
        print(text, flush=True)


class _Stopped(Exception):
    """SIGHUP, SIGINT or SIGTERM arrived: stop, also while the stack is still starting."""


def _die_with_parent() -> None:
    """Linux: SIGTERM to this process when its parent (``make``) exits, so a supervisor that
    signals only ``make`` stops the stack too."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    if os.getppid() == 1:  # the parent exited before that
        os.kill(os.getpid(), signal.SIGTERM)


def main() -> None:
    stack = Stack()
    _say(f"Airflow UI on {stack.url} ; login: admin, password in {stack.passwords_path()} (mode 0600)")
    stopping = False

    def _stop(signum: int, _frame: Any) -> None:
        nonlocal stopping
        if not stopping:  # the first signal stops; the stop itself is bounded, so later ones wait
            stopping = True
            raise _Stopped(signal.Signals(signum).name)

    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _stop)
    try:
        _die_with_parent()
        stack.start(timeout=600)
        _say(f"Airflow ready on {stack.url} (execution API {stack.env['AIRFLOW__CORE__EXECUTION_API_SERVER_URL']}, "
             f"warm Spark {'on ' + stack.env['SIMJOIN_SPARK_REMOTE'] if stack.warm else 'off'}); "
             "Ctrl-C stops it")
        while True:
            ended = [p for p in stack.procs if p.poll() is not None]
            if ended:
                _say(f"{stack._names.get(ended[0].pid, 'a process')} exited ({ended[0].returncode}): "
                     "stopping the stack")
                break
            time.sleep(1)
    except _Stopped as e:
        _say(f"{e}: stopping the stack")
    except RuntimeError as e:
        _say(f"error: {e}")
        sys.exit(1)
    finally:
        stopping = True
        stack.stop()


if __name__ == "__main__":
    main()
