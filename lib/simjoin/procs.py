"""The processes a stack starts, found and ended however the stack itself ends. Standard library
only: the watchdog runs it as a script (``python procs.py watchdog``) and imports nothing else.

- **Marked.** Every process the stack starts runs with ``SIMJOIN_STACK=<home>|<nonce>`` in its
  environment, and so does everything those start (Airflow's scheduler, its task processes, the
  gate server a task starts, the warm Spark's JVM), whatever session or process group they move
  to. :func:`marked` finds them by ``/proc/<pid>/environ`` (the environment a process started
  with), of this user only.
- **One way to stop.** :func:`terminate` sends SIGTERM to every process group and marked process
  at once, waits ``grace_s``, then SIGKILLs what is left: a stop is bounded, and never leaves a
  half-stopped Airflow.
- **A watchdog** (``python procs.py watchdog <marker>``) reads the stack's end of a pipe on its
  stdin and the process groups the stack announces there; at end of file (the stack exited, was
  killed by SIGKILL or by the kernel's OOM killer) it ends them all.
- **Who holds a port:** :func:`listeners` gives the uid and pid behind a listening port, so a
  client can check that it is the server it means before it sends a secret; :func:`port_owner`
  names it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterable

MARK_ENV = "SIMJOIN_STACK"

__all__ = ["MARK_ENV", "alive", "marked", "marker_of", "listeners", "port_owner", "proc_start", "terminate",
           "describe"]


def proc_start(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22), None
    when no such process runs (a zombie does not run). With the pid it names one process, so a
    recorded pid that the kernel gave to another process since is not mistaken for it."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def alive(pid: int, start: int | None = None) -> bool:
    """Whether ``pid`` runs (and, given ``start``, is still the process that started then)."""
    now = proc_start(pid)
    return now is not None and (start is None or now == start)


def _pids() -> list[int]:
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def _group_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[2])


def marked(prefix: str, exclude: Iterable[int] = ()) -> list[int]:
    """Pids of this user's running processes whose environment has ``SIMJOIN_STACK`` starting
    with ``prefix`` (``<home>|`` for any stack of that home, ``<home>|<nonce>`` for one)."""
    want = f"{MARK_ENV}={prefix}".encode()
    skip = {os.getpid(), *exclude}
    uid = os.getuid()
    found = []
    for pid in _pids():
        if pid in skip:
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if any(var.startswith(want) for var in env.split(b"\0")) and proc_start(pid) is not None:
            found.append(pid)
    return found


def _members(groups: Iterable[int]) -> list[int]:
    gs = set(groups)
    return [pid for pid in _pids() if pid != os.getpid() and _group_of(pid) in gs] if gs else []


def _signal_all(groups: Iterable[int], pids: Iterable[int], sig: int) -> None:
    for g in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(g, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def terminate(groups: Iterable[int] = (), marker: str | None = None, grace_s: float = 2.0,
              exclude: Iterable[int] = ()) -> int:
    """End every process of ``groups`` and every process marked with ``marker`` (a prefix, see
    :func:`marked`): SIGTERM to all at once, SIGKILL to what is left after ``grace_s``, then wait
    (up to 2 s more) until none runs. Returns how many processes there were."""
    groups = [g for g in groups if g > 1 and g != os.getpgid(0)]
    exclude = tuple(exclude)

    def running() -> set[int]:
        pids = set(_members(groups))
        if marker:
            pids.update(marked(marker, exclude))
        return pids - set(exclude)

    first = running()
    if not first:
        return 0
    _signal_all(groups, first, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    left = first
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = running()
    if left:
        _signal_all(groups, left, signal.SIGKILL)
        deadline = time.monotonic() + 2.0
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = running()
            _signal_all((), left, signal.SIGKILL)  # a process forked after the first SIGKILL
    return len(first | left)


def describe(pid: int) -> str:
    """``pid 123 (airflow scheduler)``: the pid and the first words of its command line."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        argv = []
    words = " ".join(" ".join(os.path.basename(argv[0]) if i == 0 else a.split())[:60]
                     for i, a in enumerate(argv[:4]))
    return f"pid {pid} ({words})" if words else f"pid {pid}"


def listeners(port: int) -> list[tuple[int, int | None]]:
    """Every socket listening on TCP ``port`` (any address, IPv4 or IPv6): the uid that owns it
    (``/proc/net/tcp`` shows every user's sockets) and the pid holding it (None when this user
    cannot see that process's files)."""
    found: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                found[f"socket:[{f[9]}]"] = int(f[7])
    if not found:
        return []
    pids: dict[str, int] = {}
    for pid in _pids():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link in found:
                    pids.setdefault(link, pid)
    return [(uid, pids.get(inode)) for inode, uid in found.items()]


def port_owner(port: int) -> str | None:
    """Who listens on TCP ``port``: ``pid 123 (python -m http.server)``, ``a process of user 1001``
    when this user cannot see it, or None when nothing listens."""
    found = listeners(port)
    if not found:
        return None
    uid, pid = found[0]
    return describe(pid) if pid is not None else f"a process of user {uid}"


def marker_of(pid: int) -> str | None:
    """The ``SIMJOIN_STACK`` marker ``pid`` started with (None: none, or not this user's to read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read()
    except OSError:
        return None
    want = f"{MARK_ENV}=".encode()
    for var in env.split(b"\0"):
        if var.startswith(want):
            return var[len(want):].decode(errors="replace")
    return None


def _watchdog(marker: str) -> None:
    """Read process groups (one ``<pgid>`` per line) from stdin until end of file, then end them
    and every process marked ``marker``. Its own session: a SIGHUP to the terminal's process group
    (the terminal closed) does not reach it, and SIGINT/SIGTERM do not stop it early."""
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    groups = []
    for line in sys.stdin:
        with contextlib.suppress(ValueError):
            groups.append(int(line))
    terminate(groups, marker)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "watchdog":
        _watchdog(sys.argv[2])
    else:
        sys.exit("usage: procs.py watchdog <marker>")
