"""One run per output at a time: an exclusive lock file beside the output.

Delta's blind appends do not conflict, so two runs writing one output at once could both
commit (a stream's unit twice, or a batch table's partition from two runs). A run therefore
holds ``<output>_lock`` while it writes: the CLI's runner for the whole run, an Airflow task
for its stage (:mod:`simjoin.pipeline.runner`). The file is created atomically
(``O_CREAT | O_EXCL``) and holds ``{run_id, pid, host, started, token}``; a second run is
refused with one line (:class:`OutputLocked`, a ``ValueError``). A lock whose process is gone
(same host, pid dead or reused since) is stale: the next run takes it over, with a warning.

A crash never leaves an output locked for good:

- the file is written in full before it becomes the lock (a private temporary file, then
  ``link``, which fails if a lock exists), so an empty or unreadable lock file is not "being
  written": it was left by a crash (or a full disk) and is stale once older than
  :data:`_EMPTY_STALE_S`;
- the lock is named after the output's real path (``os.path.realpath``), so a symlink to an
  output (or a path through a symlinked folder) takes the same lock, not a second one;
- every Airflow task has an ``execution_timeout`` (:func:`simjoin.pipeline.dags.task_timeout`):
  a hung holder is killed, and its lock, whose process is then gone, is stale.

The lock sits beside the output (never inside it), so taking it creates no output folder:
the overwrite guard and ``table_exists`` see the output as it was. Outputs that are not local
paths (``s3://...``, a table name) get no lock; that is logged once per output.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from simjoin.log import get_logger

__all__ = ["OutputLocked", "output_lock", "lock_path", "output_of", "read_lock"]

log = get_logger("simjoin.lock")
_unlocked_logged: set[str] = set()
#: A takeover marker older than this was left by a process that died while taking over.
_TAKEOVER_STALE_S = 60.0
#: An empty or unreadable lock file older than this is stale (a writer on a file system without
#: hard links writes it in place, within milliseconds).
_EMPTY_STALE_S = 2.0


class OutputLocked(ValueError):
    """Another run holds the output's lock."""


def output_of(run: Any) -> str | None:
    """The path a run writes: its ``output`` (or a tool's ``out``) field; None if it has none."""
    for name in ("output", "out"):
        v = getattr(run.cfg, name, None)
        if v:
            return str(v)
    return None


def _local(path: str) -> str | None:
    if "://" in path and not path.startswith("file://"):
        return None
    p = path.removeprefix("file://")
    if "/" not in p and not p.startswith(".") and not os.path.exists(p):
        return None  # a table name (simjoin.spark.delta.is_path)
    return os.path.realpath(p)  # a symlinked path takes the same lock as its target


def lock_path(output: str) -> str | None:
    """``<output>_lock`` beside the output's real path (symlinks resolved), for a local output
    path; else None."""
    loc = _local(output)
    return None if loc is None else loc.rstrip("/") + "_lock"


def read_lock(path: str) -> dict[str, Any] | None:
    """The lock's holder; None when there is no lock; ``{}`` when the file is empty or unreadable
    (stale once older than :data:`_EMPTY_STALE_S`)."""
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _alive(holder: dict[str, Any]) -> bool:
    """Whether the holder's process may still run: False only when it is surely gone (same host,
    and its pid is dead or belongs to a process started after the lock was taken)."""
    if holder.get("host") != socket.gethostname():
        return True
    try:
        pid = int(holder["pid"])
    except (KeyError, TypeError, ValueError):
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        import psutil

        started = float(holder.get("started_ts") or 0.0)
        if started and psutil.Process(pid).create_time() > started + 1.0:
            return False  # the pid was reused by a later process
    except Exception:  # psutil missing, or the process just exited: keep the lock
        pass
    return True


def _message(output: str, path: str, holder: dict[str, Any]) -> str:
    return (f"output {output} is being written by run {holder.get('run_id', '?')} (pid {holder.get('pid', '?')} on "
            f"{holder.get('host', '?')} since {holder.get('started', '?')}): allowed one run per output at a "
            f"time; wait for it, or remove {path} if that process is gone")


def _create(path: str, body: dict[str, Any]) -> bool:
    """Take the lock: write ``body`` to a temporary file, then link it to ``path`` (atomic, and
    refused if ``path`` exists), so the lock file is never seen empty or half-written."""
    tmp = f"{path}.{body['token']}.tmp"
    with open(tmp, "w") as fh:
        json.dump(body, fh)
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError:  # no hard links on this file system: create in place
        pass
    finally:
        os.unlink(tmp)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as fh:
        json.dump(body, fh)
        fh.flush()
        os.fsync(fh.fileno())
    return True


def _ident(path: str) -> tuple[int, int, int] | None:
    """Which file ``path`` is now (inode, size, mtime); None if there is none."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _take_over(path: str, stale: dict[str, Any], ident: tuple[int, int, int] | None = None) -> bool:
    """Remove a stale lock, if it is still the one seen (its content, and with ``ident`` the
    very same file); only one process at a time does this."""
    marker = path + ".takeover"
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        try:
            if time.time() - os.path.getmtime(marker) > _TAKEOVER_STALE_S:
                os.unlink(marker)
        except FileNotFoundError:
            pass
        return False
    os.close(fd)
    try:
        if read_lock(path) == stale and (ident is None or _ident(path) == ident):
            os.unlink(path)
            return True
        return False
    finally:
        os.unlink(marker)


@contextmanager
def output_lock(output: str | None, run_id: str, what: str = "") -> Iterator[str | None]:
    """Hold ``output``'s lock inside the block (yields the lock file, or None when the output is
    not a local path). Raises :class:`OutputLocked` with one line when another run holds it."""
    path = lock_path(output) if output else None
    if path is None:
        if output and output not in _unlocked_logged:
            _unlocked_logged.add(output)
            log.info("output %s is not a local path: no run lock is taken (one run at a time is up to you)", output)
        yield None
        return
    from simjoin.runtime import manifest

    manifest.read(str(output))  # a moved or copied output is refused before its lock is taken (Moved)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    body = {"run_id": run_id, "pid": os.getpid(), "host": socket.gethostname(),
            "started": now.isoformat(timespec="seconds"), "started_ts": now.timestamp(), "what": what,
            "token": uuid.uuid4().hex}
    for _attempt in range(5):
        if _create(path, body):
            break
        holder = read_lock(path)
        if holder is None:  # released meanwhile
            continue
        if holder and not _alive(holder):
            if _take_over(path, holder):
                log.warning("output %s: took over the stale lock of run %s (pid %s on %s since %s, no longer "
                            "running)", output, holder.get("run_id"), holder.get("pid"), holder.get("host"),
                            holder.get("started"))
            continue
        if not holder:  # empty or unreadable: left by a crash, unless written in place this instant
            ident = _ident(path)
            age = time.time() - ident[2] / 1e9 if ident else 0.0
            if ident is not None and age > _EMPTY_STALE_S:
                if _take_over(path, holder, ident):
                    log.warning("output %s: took over the stale lock %s (empty or unreadable, left %.0f s ago "
                                "by a process that crashed)", output, path, age)
                continue
            time.sleep(min(_EMPTY_STALE_S, max(0.05, _EMPTY_STALE_S - age + 0.05)))
            continue
        raise OutputLocked(_message(str(output), path, holder))
    else:
        holder = read_lock(path) or {}
        raise OutputLocked(_message(str(output), path, holder))
    try:
        yield path
    finally:
        if (read_lock(path) or {}).get("token") == body["token"]:
            try:
                os.unlink(path)
            except OSError as e:  # removed by hand meanwhile
                if e.errno != errno.ENOENT:
                    raise
