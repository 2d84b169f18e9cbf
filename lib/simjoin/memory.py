"""How much memory an in-process run may plan for, honestly: what this machine has available now
(``MemAvailable``, not the physical total), bounded by this process's cgroup limit (a container's
``memory.max`` less what the cgroup already uses), less what other in-process runs on this machine
have reserved and not released. Standard library only.

**Reservations.** A process that chooses to run a join in process reserves its estimate
(:func:`reserve`): a small file ``<pid>-<start>.json`` under ``~/.cache/simjoin/memory`` (or
``SIMJOIN_MEMORY_LEDGER``), removed when the process exits. A concurrent run subtracts the live
reservations (a file whose process is gone counts for nothing and is removed), so four ssj DAG
runs no longer each plan for 60 % of the same memory.

**A run that died.** A reservation is removed when its process exits, also on an exception. A
file whose process is gone was left by a process that was killed (the kernel's OOM killer, a
container's limit, SIGKILL): it is kept as ``died-<pid>-<start>.json`` when it names the output
it was for (``key``), and the next run of that output finds it (:func:`died`) and takes the Spark
path, with the reason recorded (``jobs.ssj.tokenize.choose``). Such records go after
:data:`DIED_KEEP_S`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
from dataclasses import dataclass

__all__ = ["Available", "available_memory", "reserve", "reserved_by_others", "ledger_dir", "died", "hold"]

#: how long the record of a killed in-process run waits for the next run of its output
DIED_KEEP_S = 30 * 86400.0


@dataclass(frozen=True)
class Available:
    """Bytes a run may plan for, and where the number comes from (one line for the log)."""

    bytes: int
    source: str


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def _meminfo(root: str) -> tuple[int | None, int | None]:
    """(MemTotal, MemAvailable) in bytes from ``<root>/proc/meminfo``."""
    text = _read(os.path.join(root, "proc/meminfo")) or ""
    got: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            got[key] = int(parts[0]) * 1024
    return got.get("MemTotal"), got.get("MemAvailable")


def _cgroup(root: str) -> tuple[int, int] | None:
    """(limit, usage) of this process's memory cgroup (v2 ``memory.max``/``memory.current``, v1
    ``memory.limit_in_bytes``/``memory.usage_in_bytes``); None without a limit."""
    v1 = "sys/fs/cgroup/memory/memory."
    for limit_f, usage_f in (("sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory.current"),
                             (v1 + "limit_in_bytes", v1 + "usage_in_bytes")):
        limit = _read(os.path.join(root, limit_f))
        if limit is None:
            continue
        if not limit.isdigit() or int(limit) >= 1 << 60:  # "max", or v1's "no limit" value
            return None
        usage = _read(os.path.join(root, usage_f))
        return int(limit), int(usage) if usage and usage.isdigit() else 0
    return None


def ledger_dir() -> str:
    return os.environ.get("SIMJOIN_MEMORY_LEDGER") or os.path.expanduser("~/.cache/simjoin/memory")


def _start(pid: int) -> str | None:
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def reserved_by_others(ledger: str | None = None) -> int:
    """Bytes reserved by other live processes (their files); a dead process's file is removed."""
    d = ledger or ledger_dir()
    total = 0
    for name in os.listdir(d) if os.path.isdir(d) else []:
        if not name.endswith(".json"):
            continue
        pid_s, _, start = name[:-5].partition("-")
        if not pid_s.isdigit() or int(pid_s) == os.getpid():
            continue
        if _start(int(pid_s)) != start:
            _bury(d, name)
            continue
        with contextlib.suppress(OSError, ValueError):
            total += int(json.loads(_read(os.path.join(d, name)) or "{}").get("bytes", 0))
    return total


def _bury(d: str, name: str) -> None:
    """The reservation file ``name`` of a process that is gone: kept as ``died-...`` when it names
    an output (its process was killed before it could remove it), else removed."""
    path = os.path.join(d, name)
    try:
        key = json.loads(_read(path) or "{}").get("key")
    except ValueError:
        key = None
    with contextlib.suppress(OSError):
        if key:
            os.replace(path, os.path.join(d, "died-" + name))
        else:
            os.remove(path)


def died(key: str, ledger: str | None = None) -> dict[str, object] | None:
    """The reservation of an earlier process for ``key`` (an output) that was killed before it
    ended (see the module), consumed: ``{"pid", "bytes", "what", "at"}``; None when there is none.
    Records older than :data:`DIED_KEEP_S` are removed."""
    import time

    d = ledger or ledger_dir()
    reserved_by_others(d)  # a file of a process gone since is kept as died-... first
    found = None
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if not (name.startswith("died-") and name.endswith(".json")):
            continue
        path = os.path.join(d, name)
        try:
            at = os.path.getmtime(path)
            got = json.loads(_read(path) or "{}")
        except (OSError, ValueError):
            continue
        if time.time() - at > DIED_KEEP_S:
            with contextlib.suppress(OSError):
                os.remove(path)
        elif got.get("key") == key:
            with contextlib.suppress(OSError):
                os.remove(path)
            found = {"pid": int(name[5:].partition("-")[0]), "bytes": int(got.get("bytes", 0)),
                     "what": str(got.get("what", "")), "at": at}
    return found


def reserve(nbytes: int, what: str, ledger: str | None = None, key: str | None = None) -> str:
    """Reserve ``nbytes`` for this process until it exits (or a later call replaces it); ``key``:
    the output it is for (a killed process's reservation is then kept for :func:`died`)."""
    d = ledger or ledger_dir()
    os.makedirs(d, mode=0o700, exist_ok=True)
    path = os.path.join(d, f"{os.getpid()}-{_start(os.getpid())}.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"bytes": int(nbytes), "what": what, **({"key": key} if key else {})}, fh)
    os.replace(tmp, path)
    if path not in _HELD:
        _HELD.add(path)
        atexit.register(_release, path)
    return path


#: this process's reservation files (``release_all`` removes them)
_HELD: set[str] = set()


def release_all() -> None:
    """Remove this process's reservations now: what a process that ends with ``os._exit`` (the
    ``simjoin`` command, which skips exit handlers) calls first, or its next run of the same
    output would take it for a killed run and fall back to Spark."""
    for path in list(_HELD):
        _release(path)
        _HELD.discard(path)


def hold(key: str, what: str, ledger: str | None = None) -> str:
    """Mark this process as running ``what`` in process for ``key`` (an output), so that if it is
    killed the next attempt finds it (:func:`died`); a reservation this process already holds (its
    estimate, :func:`reserve`) is kept, with the key."""
    d = ledger or ledger_dir()
    path = os.path.join(d, f"{os.getpid()}-{_start(os.getpid())}.json")
    try:
        have = json.loads(_read(path) or "{}")
    except ValueError:
        have = {}
    return reserve(int(have.get("bytes", 0)), str(have.get("what") or what), ledger, key)


def _release(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


def available_memory(root: str = "/", ledger: str | None = None) -> Available:
    """What an in-process run may plan for now (see the module)."""
    total, avail = _meminfo(root)
    if avail is None:  # no /proc/meminfo: the physical total, as before
        try:
            avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            avail = 0
    parts = [f"{avail / 2**30:.1f} GiB available" + (f" of {total / 2**30:.1f} GiB" if total else "")]
    free = avail
    cg = _cgroup(root)
    if cg is not None:
        limit, usage = cg
        free = min(free, max(0, limit - usage))
        parts.append(f"cgroup limit {limit / 2**30:.1f} GiB, {usage / 2**30:.1f} GiB in use")
    others = reserved_by_others(ledger)
    if others:
        free = max(0, free - others)
        parts.append(f"{others / 2**30:.1f} GiB reserved by other in-process runs")
    return Available(int(free), "; ".join(parts))
