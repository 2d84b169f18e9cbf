"""The warm gate: one long-lived process per user and code version that has Great Expectations
imported, and validates the gates of every ``simjoin`` process that asks.

Importing Great Expectations takes 3-5 s; a micro-batch's own work can take less. A CLI run (or
an Airflow task) whose gate validates a pyarrow Table with :class:`~simjoin.quality.gates.Expect`
expectations sends it here (:func:`simjoin.quality.gates.run_suite`) and never imports Great
Expectations itself. The first run that finds no server starts one and waits for it; the server
then stays for ``SIMJOIN_GATE_SERVER_IDLE`` seconds (default 900) after its last request, so the
next micro-batch finds it warm. The same expectations run on the same data: only the process
differs.

Safety: the server listens on a Unix socket only (never TCP), in a folder only its user may open
(``$XDG_RUNTIME_DIR/simjoin`` or ``<tmp>/simjoin-<uid>``, mode 0700, refused if another user owns it
or others may open it); a client must also prove it knows a random key kept in a 0600 file there
(``multiprocessing.connection``'s HMAC challenge). One server per code version: the socket's name
carries a digest of the interpreter, simjoin's and Great Expectations' versions and this package's
files, so a changed install starts its own. Requests are served one at a time.

    python -m simjoin.quality.gate_server [--idle SECONDS]     # what a client starts, detached
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import secrets
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["server_dir", "address", "connect", "running", "start", "serve", "Unsafe", "IDLE_ENV", "DEFAULT_IDLE_S"]

IDLE_ENV = "SIMJOIN_GATE_SERVER_IDLE"
DEFAULT_IDLE_S = 900.0


class Unsafe(RuntimeError):
    """The server folder exists but another user owns it or others may open it."""


def server_dir() -> Path:
    """The private folder of the socket and key (created 0700; an unsafe one raises :class:`Unsafe`)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and os.path.isdir(base):
        d = Path(base) / "simjoin"
    else:
        d = Path(tempfile.gettempdir()) / f"simjoin-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        d.mkdir(mode=0o700)
    st = d.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise Unsafe(f"{d}: owned by uid {st.st_uid} with mode {oct(st.st_mode & 0o777)}: allowed a folder of "
                     f"uid {os.getuid()} with mode 0700")
    return d


def _code_digest() -> str:
    """Interpreter, simjoin and Great Expectations versions and this package's files: a changed
    install gets its own server."""
    from importlib import metadata

    h = hashlib.sha256(sys.executable.encode())
    for dist in ("simjoin", "great_expectations"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            h.update(f"{dist}={metadata.version(dist)}".encode())
    here = Path(__file__).resolve().parent
    for f in sorted(here.glob("*.py")):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:16]


def address() -> tuple[str, Path]:
    """(the socket path, the key file) of this code version's server."""
    d, digest = server_dir(), _code_digest()
    sock = str(d / f"gate-{digest}.sock")
    if len(sock.encode()) > 100:  # a Unix socket's path holds at most 107 bytes
        raise Unsafe(f"{sock}: a socket path of {len(sock.encode())} bytes: allowed at most 100 "
                     "(set XDG_RUNTIME_DIR or TMPDIR to a shorter folder)")
    return sock, d / f"gate-{digest}.key"


def connect(timeout: float = 0.0) -> Any:
    """A connection to a running server, waiting up to ``timeout`` seconds for one to come up;
    None if there is none."""
    from multiprocessing import AuthenticationError
    from multiprocessing.connection import Client

    sock, key_file = address()
    t0 = time.monotonic()
    checked = t0
    while True:
        try:
            return Client(sock, family="AF_UNIX", authkey=key_file.read_bytes())
        except (OSError, EOFError, AuthenticationError):  # none yet, still importing, or a stopped one
            now = time.monotonic()
            if now - t0 >= timeout:
                return None
            if now - checked >= 10.0:  # no server holds the lock: none is starting either
                checked = now
                if not running():
                    return None
            time.sleep(0.05)


def running() -> bool:
    """Whether a server of this code version runs (or is starting): it holds the lock file."""
    import fcntl

    sock, _ = address()
    with open(sock[:-5] + ".lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
        return False


def start() -> None:
    """Start a server unless one runs, detached (its own session, no inherited descriptors, output
    to a log file in the private folder). Of two started at once, the second exits at once."""
    if running():
        return
    sock, _ = address()
    log = open(sock[:-5] + ".log", "ab")  # noqa: SIM115  # handed to the child
    try:
        subprocess.Popen([sys.executable, "-m", "simjoin.quality.gate_server"], stdin=subprocess.DEVNULL,
                         stdout=log, stderr=log, start_new_session=True, close_fds=True, cwd="/",
                         env={k: v for k, v in os.environ.items() if k != "SIMJOIN_FAULTS"})
    finally:
        log.close()


def _handle(conn: Any, busy: Any) -> None:
    """One client's request: its table validated (one at a time), the result sent back."""
    from simjoin.quality.gates import validate

    try:
        kind, payload, suite, expectations = conn.recv()
        with busy:
            if kind == "file":
                import pyarrow as pa

                with pa.memory_map(payload) as src:
                    payload = pa.ipc.open_file(src).read_all()
            try:
                out: tuple[str, Any] = ("ok", validate(payload, suite, expectations, False, True))
            except Exception as e:  # the client raises it
                out = ("error", f"{type(e).__name__}: {e}")
        conn.send(out)
    except (EOFError, OSError):
        pass  # the client went away
    finally:
        conn.close()


def serve(idle_s: float) -> int:
    """Import Great Expectations, then serve until ``idle_s`` seconds pass without a request."""
    import fcntl
    import threading
    from multiprocessing.connection import Listener

    sock, key_file = address()
    lock = open(sock[:-5] + ".lock", "a")  # noqa: SIM115  # held for the server's life
    for attempt in range(40):  # a client's running() holds it for microseconds; a server, for good
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            if attempt == 39:
                return 0  # another server of this version runs or is starting
            time.sleep(0.05)
    from simjoin.quality.gates import warm

    warm()
    key = secrets.token_bytes(32)
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    if os.path.exists(sock):
        os.unlink(sock)  # a stopped server's: the lock says none runs
    listener = Listener(sock, family="AF_UNIX", authkey=key)
    listener._listener._socket.settimeout(min(idle_s, 5.0))  # type: ignore[attr-defined]  # to check idleness
    busy, handlers = threading.Lock(), list[threading.Thread]()
    last = time.monotonic()
    print(f"{time.strftime('%H:%M:%S')} gate server {os.getpid()} ready at {sock}", flush=True)
    try:
        while True:
            try:
                conn = listener.accept()
            except TimeoutError:
                handlers = [h for h in handlers if h.is_alive()]
                if handlers:
                    last = time.monotonic()
                elif time.monotonic() - last >= idle_s:
                    return 0
                continue
            except Exception as e:  # a client without the key, or one that hung up
                print(f"{time.strftime('%H:%M:%S')} refused a connection: {type(e).__name__}", flush=True)
                continue
            last = time.monotonic()
            h = threading.Thread(target=_handle, args=(conn, busy), daemon=True)
            h.start()
            handlers.append(h)
    finally:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sock)


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m simjoin.quality.gate_server")
    ap.add_argument("--idle", type=float, default=float(os.environ.get(IDLE_ENV) or DEFAULT_IDLE_S),
                    help=f"seconds without a request before it exits (default ${IDLE_ENV} or {DEFAULT_IDLE_S:g})")
    return serve(ap.parse_args().idle)


if __name__ == "__main__":
    sys.exit(main())
