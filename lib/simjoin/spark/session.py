"""The one SparkSession simjoin uses: Delta Lake from delta-spark, configured from conf/spark.yaml.

Delta's jars come from Maven Central through ``spark.jars.packages``
(``configure_spark_with_delta_pip``) and are cached by Ivy. Where Ivy cannot resolve,
point ``SIMJOIN_JARS_DIR`` at a folder with the same jars (e.g. from ``mvn dependency:copy``);
they are then passed as ``spark.jars``.

**Warm Spark.** ``simjoin spark-server`` keeps one Spark driver (with Delta and this Python)
running and serves it over Spark Connect on 127.0.0.1. With ``SIMJOIN_SPARK_REMOTE=sc://host:port``
set, :func:`get_spark` connects to it in well under a second instead of starting a JVM; each
process gets its own server-side session (SQL conf, temp views and cache are not shared). If the
server does not answer, it logs a warning and starts a local Spark as before. The server requires
a pre-shared token (``SPARK_CONNECT_AUTHENTICATE_TOKEN`` in the environment of the server and its
clients), so that other local users cannot run code in it. If that variable is unset, the server
generates one and writes it to a mode-0600 file (``SIMJOIN_SPARK_TOKEN_FILE``, default
``~/.simjoin/spark-connect-<port>.token``) that clients of the same user read.

**No secret on a command line.** PySpark hands every builder setting to ``spark-submit`` as
``--conf k=v``, which any local user reads with ``ps``. So the Connect token reaches the JVM only
through its environment (Spark Connect reads ``SPARK_CONNECT_AUTHENTICATE_TOKEN`` when
``spark.connect.authenticate.token`` is unset), and the RPC secret (``SIMJOIN_SPARK_AUTH_SECRET``)
through a mode-0600 properties file (``--properties-file``, in a private temporary folder, removed
once the JVM has read it). Neither is ever logged.
"""

from __future__ import annotations

import glob
import os
import secrets
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import urlparse

from pyspark.sql import DataFrame, SparkSession

from simjoin.config import SparkConfig, load_config, temp_env
from simjoin.log import get_logger
from simjoin.private import read_private, write_private
from simjoin.spark import jvmcache

__all__ = ["get_spark", "stop_spark", "small_frame", "arrow_frame", "is_remote", "remote_url", "serve",
           "startup_seconds", "auth_conf", "CONNECT_PORT", "TOKEN_ENV", "AUTH_SECRET_ENV", "TOKEN_FILE_ENV",
           "token_file", "jobs_started"]

log = get_logger("simjoin.spark")
# Jobs here are short: the C1 JIT alone warms up much faster, and the hot loops run in numba anyway.
# With C1 alone the JVM reserves only 48 MB for compiled code; a long-lived driver (the warm Spark,
# follow mode, a test session) that plans thousands of queries filled it ("CodeCache is full.
# Compiler has been disabled") and then failed every task with a VirtualMachineError. 256 MB, as
# the full JIT reserves by default, is address space: only what is compiled is backed.
# ExitOnOutOfMemoryError: a JVM whose heap ran out exits, so the run fails with an error and its
# retry starts a fresh one; otherwise the thread that died (e.g. Spark's task-result getter, on a
# task result larger than the driver heap) leaves its job waiting forever.
JVM_FLAGS = os.environ.get("SIMJOIN_JVM_FLAGS", "-XX:TieredStopAtLevel=1 -XX:+UseParallelGC "
                           "-XX:ReservedCodeCacheSize=256m -XX:+ExitOnOutOfMemoryError")
#: Spark Connect's usual port; ``simjoin spark-server --port`` and ``SIMJOIN_SPARK_REMOTE`` move it.
CONNECT_PORT = 15002
#: The warm Spark's pre-shared token: the server requires it and PySpark's client sends it.
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
#: Spark's RPC shared secret: a standalone master and workers started with it (docker-compose.yml)
#: accept only applications that present it.
AUTH_SECRET_ENV = "SIMJOIN_SPARK_AUTH_SECRET"
#: Where a warm Spark writes the token it generated, and where its clients look for it.
TOKEN_FILE_ENV = "SIMJOIN_SPARK_TOKEN_FILE"
_startup: dict[str, float] = {}


def _builder(cfg: SparkConfig, extra: dict[str, Any] | None, record_to: str | None = None) -> SparkSession.Builder:
    # Spark's Python workers must run this interpreter, the one with simjoin installed.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    warehouse = os.path.abspath(cfg.warehouse)
    b = (
        SparkSession.builder.master(cfg.master)
        .appName(cfg.app_name)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.warehouse.dir", warehouse)
        .config("spark.sql.shuffle.partitions", str(cfg.shuffle_partitions))
        .config("spark.default.parallelism", str(max(2, cfg.shuffle_partitions)))
        .config("spark.driver.memory", cfg.driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.databricks.delta.snapshotPartitions", "2")
        # Delta keeps every table's log and snapshot plans it touched (10,000 by default): a
        # long-lived driver (the warm Spark, a test session) grew by ~3.5 MB per table until GC
        # thrashed and the JVM died. A run touches a few dozen tables.
        .config("spark.databricks.delta.delta.log.cacheSize", os.environ.get("SIMJOIN_DELTA_LOG_CACHE", "64"))
        .config("spark.databricks.delta.schema.autoMerge.enabled", "false")
        # no .crc file per commit: computing it costs Spark jobs on every commit of small tables
        .config("spark.databricks.delta.writeChecksumFile.enabled", "false")
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        # the executors' Python daemon imports simjoin's operators and loads ssj's kernels once,
        # before it forks a worker per task (simjoin.spark.worker_daemon)
        .config("spark.python.daemon.module", "simjoin.spark.worker_daemon")
        .config("spark.driver.extraJavaOptions", _java_options(warehouse, record_to))
    )
    for k, v in {**auth_conf(), **(extra or {})}.items():
        b = b.config(k, v)
    jars_dir = os.environ.get("SIMJOIN_JARS_DIR")
    if jars_dir:
        return b.config("spark.jars", ",".join(local_jars(jars_dir, delta_packages())))
    packages = delta_packages()
    cached = jvmcache.cached_jars(packages) if jvmcache.enabled() else None
    if cached:  # Ivy resolved these before and they are all still there: skip resolution
        return b.config("spark.jars", ",".join(cached))
    return b.config("spark.jars.packages", packages)


def local_jars(folder: str, packages: str) -> list[str]:
    """The jars of ``SIMJOIN_JARS_DIR``, checked before the JVM starts: a missing folder or a
    missing jar of ``packages`` (``group:artifact:version,...``) is one line naming the variable,
    the jar and what is allowed (Spark failed at its first Delta read, half a minute later, with a
    Java stack)."""
    if not os.path.isdir(folder):
        raise ValueError(f"SIMJOIN_JARS_DIR={folder}: no such folder: allowed a folder holding the jars of {packages} "
                         "(e.g. from mvn dependency:copy), or unset it to let Spark fetch them")
    jars = sorted(glob.glob(os.path.join(folder, "*.jar")))
    names = {os.path.basename(j) for j in jars}
    for pkg in packages.split(","):
        parts = pkg.strip().split(":")
        if len(parts) == 3 and f"{parts[1]}-{parts[2]}.jar" not in names:
            raise ValueError(f"SIMJOIN_JARS_DIR={folder}: no {parts[1]}-{parts[2]}.jar there ({len(jars)} jars): "
                             f"allowed a folder holding the jars of {packages}, or unset it to let Spark fetch them")
    return jars


def auth_conf() -> dict[str, str]:
    """``spark.authenticate`` when ``SIMJOIN_SPARK_AUTH_SECRET`` is set; nothing when it is unset.
    The secret itself is not a builder setting (those reach ``spark-submit``'s command line): it
    goes to the JVM in a 0600 properties file (:func:`_secret_properties`)."""
    return {"spark.authenticate": "true"} if os.environ.get(AUTH_SECRET_ENV, "").strip() else {}


@contextmanager
def _secret_properties() -> Iterator[None]:
    """While the driver JVM starts: ``spark.authenticate.secret`` in a 0600 properties file that
    ``spark-submit`` reads (``--properties-file`` in ``PYSPARK_SUBMIT_ARGS``), never a ``--conf``
    on its command line; the file and its private folder are removed once the JVM is up."""
    secret = os.environ.get(AUTH_SECRET_ENV, "").strip()
    if not secret:
        yield
        return
    if any(c in secret for c in "\r\n\\"):
        raise ValueError(f"{AUTH_SECRET_ENV} holds a line break or backslash: allowed a one-line secret "
                         "(make compose-env writes URL-safe text)")
    folder = tempfile.mkdtemp(prefix="simjoin-spark-")  # 0700
    path = os.path.join(folder, "secret.properties")
    write_private(path, f"spark.authenticate.secret {secret}\n")
    before = os.environ.get("PYSPARK_SUBMIT_ARGS")
    try:
        with temp_env("PYSPARK_SUBMIT_ARGS", f"--properties-file {shlex.quote(path)} " + (before or "pyspark-shell")):
            yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def token_file(port: int) -> str:
    """The file holding a generated warm-Spark token: ``SIMJOIN_SPARK_TOKEN_FILE``, else
    ``~/.simjoin/spark-connect-<port>.token``."""
    return os.path.expanduser(os.environ.get(TOKEN_FILE_ENV) or f"~/.simjoin/spark-connect-{port}.token")


def delta_packages() -> str:
    """The ``spark.jars.packages`` delta-spark's ``configure_spark_with_delta_pip`` asks for."""
    from delta import configure_spark_with_delta_pip

    return configure_spark_with_delta_pip(SparkSession.Builder())._options["spark.jars.packages"]


def _java_options(warehouse: str, record_to: str | None) -> str:
    flags = [jvmcache.java_option(f"-Dderby.system.home={os.path.join(warehouse, '.derby')}"), JVM_FLAGS]
    if record_to:
        flags.append(record_to)
    elif not os.environ.get("SIMJOIN_JARS_DIR"):
        flags.append(jvmcache.archive_flags(delta_packages()))
    return " ".join(f for f in flags if f)


def remote_url() -> str | None:
    """The warm Spark to use, from ``SIMJOIN_SPARK_REMOTE`` (``sc://host:port``); None for a local one."""
    url = os.environ.get("SIMJOIN_SPARK_REMOTE", "").strip()
    if url.lower() in ("", "0", "off", "none", "false"):
        return None
    if not url.startswith("sc://"):
        raise ValueError(f"SIMJOIN_SPARK_REMOTE={url!r}: allowed sc://host:port (a `simjoin spark-server`), "
                         "or empty/off for a local Spark")
    return url


def _answers(url: str, timeout: float = 1.0) -> bool:
    u = urlparse(url.replace("sc://", "http://", 1))
    try:
        with socket.create_connection((u.hostname or "127.0.0.1", u.port or CONNECT_PORT), timeout=timeout):
            return True
    except OSError:
        return False


def check_master(master: str, timeout: float = 3.0) -> None:
    """Refuse, in one line and within seconds, a standalone master (``spark://host:port``, or an
    HA list ``spark://h1:p1,h2:p2``) that no host of the list answers at: an unknown host, a
    refused connection or no answer within ``timeout``. Spark itself would retry for a minute
    and end in a Java stack dump. Other masters (``local``, ``yarn``, ``k8s://``) pass."""
    if not master.startswith("spark://"):
        return
    why = []
    for hp in master.removeprefix("spark://").split(","):
        host, _, port = hp.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"invalid spark.master {master!r}: allowed spark://HOST:PORT[,HOST:PORT...]")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout):
                return
        except socket.gaierror:
            why.append(f"unknown host {host!r}")
        except ConnectionRefusedError:
            why.append(f"nothing listens at {host}:{port} (connection refused)")
        except TimeoutError:
            why.append(f"{host}:{port} does not answer within {timeout:g}s")
        except OSError as e:  # no route to the host
            why.append(f"{host}:{port} cannot be reached ({e.strerror or type(e).__name__})")
    raise ValueError(f"the Spark master {master} cannot be reached: {'; '.join(why)}: allowed: a running standalone "
                     "master (SIMJOIN_SPARK_MASTER, --master), or local[*]")


def is_remote(spark: Any) -> bool:
    """True for a Spark Connect session (no SparkContext, no JVM in this process). A
    :class:`LazySpark` not started yet is remote when it will connect to the warm Spark."""
    if isinstance(spark, LazySpark):
        return is_remote(spark._real) if spark.started else remote_url() is not None
    return type(spark).__module__.startswith("pyspark.sql.connect")


def jobs_started(spark: Any = None) -> int | None:
    """How many Spark jobs this process's SparkContext has started so far (its scheduler's next job
    id): 0 before any JVM; None where it cannot be known (a Spark Connect session: the jobs run
    in the warm Spark, beside other clients')."""
    if spark is not None and getattr(spark, "started", True) and is_remote(spark):
        return None
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is None:
        return 0
    try:
        return int(sc._jsc.sc().dagScheduler().numTotalJobs())
    except Exception:  # not a JVM this process drives
        return None


def startup_seconds() -> float | None:
    """Seconds the first :func:`get_spark` of this process took (None before it ran)."""
    return _startup.get("seconds")


def get_spark(cfg: SparkConfig | None = None, extra: dict[str, Any] | None = None,
              record_to: str | None = None) -> SparkSession:
    """Return the active session or build it (idempotent within a process).

    With ``SIMJOIN_SPARK_REMOTE`` set (and no ``record_to``), connect to that warm Spark.
    ``record_to`` (JVM options from ``jvmcache.recording_flags``) makes the driver JVM record
    a class-data archive when it exits."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    t0 = time.perf_counter()
    cfg = cfg or load_config(SparkConfig, "spark")
    url = remote_url() if record_to is None else None
    spark = None
    if url is not None:
        if _answers(url):
            spark = _connect(url, cfg)
        else:
            log.warning("no warm Spark answers at %s (SIMJOIN_SPARK_REMOTE): starting a local one", url)
    if spark is None:
        log.info("starting Spark: master=%s warehouse=%s", cfg.master, cfg.warehouse)
        check_master(cfg.master)
        with _secret_properties():
            spark = _builder(cfg, extra, record_to).getOrCreate()
        spark.sparkContext.setLogLevel(cfg.log_level)
        conf = spark.sparkContext.getConf()
        packages = conf.get("spark.jars.packages", None)
        if jvmcache.enabled() and packages:
            jvmcache.remember_jars(packages, conf.get("spark.jars", "") or "")
    _startup.setdefault("seconds", time.perf_counter() - t0)
    return spark


class LazySpark:
    """A SparkSession that starts (or connects to the warm Spark) on first use
    (:func:`lazy_spark`). A CLI run or an Airflow task whose every step runs in the driver with
    ``deltalake`` and Arrow (a small S3J unit read by its Delta logs) never needs the JVM; any
    attribute of the session - ``read``, ``sql``, ``conf``, ``sparkContext`` - starts it, so
    code written for a SparkSession is unchanged."""

    def __init__(self, cfg: SparkConfig) -> None:
        object.__setattr__(self, "_cfg", cfg)
        object.__setattr__(self, "_real", None)
        object.__setattr__(self, "_lock", threading.Lock())
        object.__setattr__(self, "startup_s", 0.0)  # seconds its first use spent starting Spark

    @property
    def started(self) -> bool:
        return self._real is not None

    def session(self) -> SparkSession:
        with self._lock:
            if self._real is None:
                import traceback

                frames = [f for f in traceback.extract_stack()[:-2] if "/simjoin/" in f.filename
                          or "/jobs/" in f.filename]
                where = f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else "?"
                log.info("Spark needed by %s", where)
                main = threading.current_thread() is threading.main_thread()
                before = signal.getsignal(signal.SIGINT) if main else None
                t0 = time.perf_counter()
                object.__setattr__(self, "_real", get_spark(self._cfg))
                object.__setattr__(self, "startup_s", time.perf_counter() - t0)
                if main and before not in (None, signal.default_int_handler, signal.SIG_DFL):
                    # PySpark's context installs its own SIGINT handler; one the process set
                    # before (follow mode's clean stop) stays
                    signal.signal(signal.SIGINT, before)
            return self._real  # type: ignore[return-value]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.session(), name, value)


def lazy_spark(cfg: SparkConfig | None = None, connect_now: bool = True) -> Any:
    """The session a run uses: a :class:`LazySpark` (``SIMJOIN_LAZY_SPARK`` not 0), else
    :func:`get_spark` at once. With ``connect_now`` (a CLI run), the warm Spark is connected at
    once (about 0.5-1 s, and the token is checked before any work); an Airflow task passes
    False: a task whose work needs no Spark job does not open a session on the warm Spark."""
    if os.environ.get("SIMJOIN_LAZY_SPARK", "1") == "0" or (connect_now and remote_url() is not None):
        return get_spark(cfg)
    active = SparkSession.getActiveSession()
    return active if active is not None else LazySpark(cfg or load_config(SparkConfig, "spark"))


def real_session(spark: Any) -> Any:
    """The SparkSession behind ``spark`` (a :class:`LazySpark` is started)."""
    return spark.session() if isinstance(spark, LazySpark) else spark


LOOPBACK = ("localhost", "127.0.0.1", "::1", "ip6-localhost")


def check_listener(url: str) -> None:
    """Before a token leaves this process: the process listening at a loopback ``url`` must be
    this user's (``/proc/net/tcp`` names the owner of every socket, so a port another local user
    took while the warm Spark was down is told apart) and, in a task of ``make airflow`` (its
    ``SIMJOIN_STACK`` marker), the very warm Spark that stack started. Refused in one line,
    before any byte is sent. A server on another host is reached over its own channel (TLS)."""
    from simjoin import procs

    u = urlparse(url.replace("sc://", "http://", 1))
    if (u.hostname or "localhost") not in LOOPBACK or not os.path.isdir("/proc/net"):
        return
    port, marker = u.port or CONNECT_PORT, os.environ.get(procs.MARK_ENV)
    for uid, pid in procs.listeners(port):
        who = procs.describe(pid) if pid is not None else f"a process of user {uid}"
        if uid != os.getuid():
            raise ValueError(f"the process listening at {url} ({who}) runs as user {uid}, not as this user "
                             f"({os.getuid()}): refused to send it the warm Spark's token; allowed a "
                             "`simjoin spark-server` of this user (stop the other process, or "
                             "SIMJOIN_SPARK_REMOTE=off)")
        if marker and pid is not None and procs.marker_of(pid) != marker:
            raise ValueError(f"the process listening at {url} ({who}) is not the warm Spark this Airflow stack "
                             "started: refused to send it the token; allowed the stack's own server (restart "
                             "make airflow)")


def _connect(url: str, cfg: SparkConfig) -> SparkSession:
    t0 = time.perf_counter()
    check_listener(url)
    if not os.environ.get(TOKEN_ENV):  # a server started by hand wrote the token it generated
        u = urlparse(url.replace("sc://", "http://", 1))
        token = read_private(token_file(u.port or CONNECT_PORT))
        if token:
            os.environ[TOKEN_ENV] = token
    if os.environ.get(TOKEN_ENV):  # gRPC sends a token only over a local (or TLS) channel: "localhost"
        url = url.replace("sc://127.0.0.1", "sc://localhost", 1)
    spark = SparkSession.builder.remote(url).getOrCreate()
    want = {"spark.sql.shuffle.partitions": str(cfg.shuffle_partitions), "spark.sql.session.timeZone": "UTC",
            "spark.sql.execution.arrow.pyspark.enabled": "true", "spark.sql.adaptive.enabled": "true"}
    try:
        for k, v in want.items():  # per session: this process's settings reach no other task
            spark.conf.set(k, v)
    except Exception as e:
        if "UNAUTHENTICATED" in str(e) or "authentication" in str(e).lower():
            spark.stop()
            raise ValueError(f"the warm Spark at {url} refused this process: allowed with its token in "
                             f"{TOKEN_ENV} (make airflow passes it to its tasks), "
                             "or SIMJOIN_SPARK_REMOTE=off") from None
        raise
    log.info("Spark: connected to the warm Spark at %s in %.2fs", url, time.perf_counter() - t0)
    return spark


def stop_spark(wait_for_jvm: bool = False) -> None:
    """Stop the session; with ``wait_for_jvm`` also shut the driver JVM down and wait until it
    has exited (it writes a class-data archive on exit when recording)."""
    active = SparkSession.getActiveSession()
    if active is None:
        return
    if is_remote(active):
        active.stop()  # releases this process's server-side session; the warm Spark stays up
        return
    sc = active.sparkContext
    gateway = sc._gateway
    active.stop()
    if wait_for_jvm and gateway is not None:
        from pyspark import SparkContext

        proc = getattr(gateway, "proc", None)
        gateway.shutdown()
        SparkContext._gateway = None
        SparkContext._jvm = None
        if proc is not None:
            if proc.stdin:
                proc.stdin.close()  # the gateway server exits when its stdin closes
            proc.wait(timeout=300)


def small_frame(spark: SparkSession, rows: list, schema: Any) -> DataFrame:
    """A DataFrame of a few driver-side rows in one partition: one task and one file per write,
    not one per default-parallelism slice."""
    return spark.createDataFrame(rows, schema).coalesce(1)


def arrow_frame(spark: SparkSession, table: Any) -> DataFrame:
    """A DataFrame of an Arrow table, an empty one too (over Spark Connect, ``createDataFrame``
    cannot infer a schema from no rows; the Arrow schema gives it)."""
    if table.num_rows:
        return spark.createDataFrame(table)
    from pyspark.sql.pandas.types import from_arrow_schema

    return spark.createDataFrame([], from_arrow_schema(table.schema))


def serve(host: str = "127.0.0.1", port: int = CONNECT_PORT, cfg: SparkConfig | None = None,
          ready: Any = None) -> None:
    """Run a warm Spark (Delta, this Python) and serve it over Spark Connect on ``host:port``
    until SIGINT or SIGTERM. ``ready(url)`` is called once it accepts connections."""
    cfg = cfg or load_config(SparkConfig, "spark")
    url = f"sc://{host}:{port}"
    if _answers(url, timeout=0.5):
        raise ValueError(f"port {port} on {host} is already in use: allowed a free port (--port)")
    os.environ.pop("SIMJOIN_SPARK_REMOTE", None)
    if not os.environ.get(AUTH_SECRET_ENV, "").strip():
        # the warm driver's RPC and block manager, on loopback, take only its own executors: a
        # secret of this process's own, in the JVM's 0600 properties file (never a --conf)
        os.environ[AUTH_SECRET_ENV] = secrets.token_urlsafe(24)
    token = os.environ.get(TOKEN_ENV) or ""
    written = None
    if not token:  # generated: written for this user's clients, never logged
        token = secrets.token_urlsafe(24)
        written = token_file(port)
        try:
            write_private(written, token + "\n")
        except OSError as e:
            raise ValueError(f"cannot write the generated token to {written} ({e.strerror}): allowed a writable "
                             f"{TOKEN_FILE_ENV}, or the token in {TOKEN_ENV}") from None
        os.environ[TOKEN_ENV] = token
    extra = {
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        # every client must present the token, so other local users cannot run code here. Spark
        # Connect reads it from the JVM's environment (SPARK_CONNECT_AUTHENTICATE_TOKEN, inherited
        # from this process): as spark.connect.authenticate.token it would be a --conf on the
        # JVM's command line, which every local user reads with ps
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
        # a 200k-record stage sends its collected plans and results through gRPC
        "spark.connect.grpc.maxInboundMessageSize": str(256 * 2**20),
        # executors' Python workers and Delta's snapshots stay warm between tasks
        "spark.python.worker.reuse": "true",
    }
    try:
        spark = get_spark(cfg, extra)
    except BaseException:
        if written:
            _remove(written)
        raise
    deadline = time.monotonic() + 60
    while not _answers(url, timeout=0.5):
        if time.monotonic() > deadline:
            raise RuntimeError(f"Spark Connect did not open {url} within 60 s")
        time.sleep(0.2)
    spark.range(1).count()  # one job, so the first task does not pay the cold start of the scheduler
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    log.info("warm Spark ready at %s (master %s, warehouse %s); Ctrl-C or SIGTERM stops it",
             url, cfg.master, os.path.abspath(cfg.warehouse))
    if written:
        log.info("clients need %s: this user's simjoin reads it from %s (mode 0600)", TOKEN_ENV, written)
    if ready is not None:
        ready(url)
    try:
        stop.wait()
        log.info("warm Spark at %s: stopping", url)
        spark.stop()
    finally:
        if written:
            _remove(written)


def _remove(path: str) -> None:
    with suppress(FileNotFoundError):
        os.unlink(path)


def active_session() -> Any:
    """The SparkSession active in this process, or None (no JVM or Connect session started)."""
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def release_warm_session() -> None:
    """End this task's session on the warm Spark now (its temp views and settings go with it),
    not when the server's idle timeout notices the process is gone."""
    active = active_session()
    if active is not None and is_remote(active):
        active.stop()
