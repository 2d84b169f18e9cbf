"""A Spark standalone master and worker started from the installed pyspark, bound to 127.0.0.1.

Used by the cluster-mode test and by users who want a local standalone cluster without Docker::

    with StandaloneCluster(cores=2) as url:      # url == "spark://127.0.0.1:<port>"
        SIMJOIN_SPARK_MASTER=url simjoin ...
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["StandaloneCluster", "free_port"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class StandaloneCluster:
    def __init__(self, cores: int = 1, memory: str = "2g", work_dir: str | None = None,
                 start_timeout: float = 60.0) -> None:
        self.cores, self.memory, self.start_timeout = cores, memory, start_timeout
        self.work_dir = work_dir
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        env = dict(os.environ, SPARK_HOME=str(_spark_home()), SPARK_LOCAL_IP="127.0.0.1",
                   PYSPARK_PYTHON=sys.executable, SPARK_NO_DAEMONIZE="1")
        log_dir = Path(self.work_dir or ".") / "cluster-logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        log = log_dir / f"{name}.log"
        self.logs.append(log)
        fh = open(log, "wb")  # noqa: SIM115 - the process writes to it after this call returns
        cmd = [str(_spark_home() / "bin" / "spark-class"), *args]
        p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.procs.append(p)
        return p

    def _wait_for(self, log: Path, text: str) -> None:
        deadline = time.time() + self.start_timeout
        while time.time() < deadline:
            if log.exists() and text in log.read_text(errors="replace"):
                return
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.5)
        raise RuntimeError(f"Spark standalone did not start ({text!r} not in {log}):\n"
                           + (log.read_text(errors='replace')[-2000:] if log.exists() else ""))

    def start(self) -> str:
        self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(self.port), "--webui-port", str(free_port())])
        self._wait_for(self.logs[-1], "I have been elected leader")
        work = str(Path(self.work_dir or ".") / "worker-work")
        self._spawn("worker", ["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                               "--cores", str(self.cores), "--memory", self.memory,
                               "--webui-port", str(free_port()), "--work-dir", work])
        self._wait_for(self.logs[-1], "Successfully registered with master")
        return self.url

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
        self.procs.clear()

    def __enter__(self) -> str:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
