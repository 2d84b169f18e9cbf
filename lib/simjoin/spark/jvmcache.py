"""Faster Spark start-up: cached Delta jar paths and a JVM class-data-sharing (AppCDS) archive.

A cold Spark driver spends seconds resolving Delta's jars with Ivy, then loading and verifying
some 15,000 classes. Both are the same on every run, so both are cached under
``$SIMJOIN_CACHE_DIR`` (default ``~/.cache/simjoin``):

- ``jars-<key>.json``: the jar files Ivy resolved for ``spark.jars.packages``. While they all
  still exist, later sessions pass them as ``spark.jars`` and skip Ivy.
- ``cds-<key>.jsa``: a dynamic AppCDS archive of the classes a representative run loads
  (``simjoin cache-jvm`` records it once). The driver JVM maps it with ``-XX:SharedArchiveFile``.
  The key covers the Java binary, pyspark's jars and the Delta version; a JVM that cannot use an
  archive ignores it and starts as usual, only slower.

Set ``SIMJOIN_JVM_CACHE=off`` to use neither.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

__all__ = ["enabled", "cache_dir", "cached_jars", "remember_jars", "archive_path", "archive_flags",
           "recording_flags", "finish_recording"]

_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def enabled() -> bool:
    return os.environ.get("SIMJOIN_JVM_CACHE", "on").lower() not in ("off", "0", "false", "no")


def cache_dir() -> Path:
    return Path(os.environ.get("SIMJOIN_CACHE_DIR") or Path.home() / ".cache" / "simjoin")


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    exe = os.path.join(home, "bin", "java") if home else shutil.which("java") or "java"
    return os.path.realpath(exe)


def _key(*parts: str) -> str:
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]


def _jars_file(packages: str) -> Path:
    return cache_dir() / f"jars-{_key(packages)}.json"


def cached_jars(packages: str) -> list[str] | None:
    """The jars Ivy resolved for ``packages`` last time, if every one of them still exists."""
    try:
        jars = json.loads(_jars_file(packages).read_text())["jars"]
    except (OSError, ValueError, KeyError):
        return None
    paths = [j.removeprefix("file://") for j in jars]
    return jars if jars and all(os.path.isfile(p) for p in paths) else None


def remember_jars(packages: str, jars: str) -> None:
    """Record the ``spark.jars`` a session resolved for ``packages`` (atomic; best effort)."""
    if not jars:
        return
    with contextlib.suppress(OSError):
        _atomic_write(_jars_file(packages), json.dumps({"packages": packages, "jars": jars.split(",")}))


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    tmp.write_text(text)
    os.replace(tmp, path)


def archive_path(packages: str) -> Path:
    import pyspark

    java = _java()
    try:
        stamp = str(os.stat(java).st_mtime_ns)
    except OSError:
        stamp = "?"
    # the JVM maps an archive only for the class path it was recorded with: key on the full paths
    jars = sorted(glob.glob(os.path.join(os.path.realpath(os.path.dirname(pyspark.__file__)), "jars", "*.jar")))
    return cache_dir() / f"cds-{_key(java, stamp, pyspark.__version__, packages, *jars)}.jsa"


def java_option(flag: str) -> str:
    """One JVM option as Spark's launcher parses ``extraJavaOptions`` (whitespace splits options;
    double quotes group, a backslash escapes): quoted when it holds whitespace or quotes, so a path
    with a space stays one option."""
    if not any(c.isspace() or c in "\"'\\" for c in flag):
        return flag
    return '"' + flag.replace("\\", "\\\\").replace('"', '\\"') + '"'


def archive_flags(packages: str) -> str:
    """JVM options that map the CDS archive, or '' when there is none."""
    p = archive_path(packages)
    return f"{java_option(f'-XX:SharedArchiveFile={p}')} {_QUIET}" if enabled() and p.is_file() else ""


def recording_flags(packages: str) -> tuple[str, Path]:
    """JVM options that record a new archive at JVM exit, and the temporary file it goes to."""
    final = archive_path(packages)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.{uuid.uuid4().hex}")
    return f"{java_option(f'-XX:ArchiveClassesAtExit={tmp}')} {_QUIET}", tmp


def finish_recording(tmp: Path, packages: str) -> Path:
    """Move a complete recording into place (atomic, so a concurrent start never maps half a file)."""
    final = archive_path(packages)
    if not tmp.is_file() or tmp.stat().st_size == 0:
        raise RuntimeError(f"the JVM wrote no class-data archive at {tmp}")
    os.replace(tmp, final)
    return final
