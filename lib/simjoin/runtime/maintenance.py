"""Table maintenance: what keeps a pipeline's tables small and its per-unit cost flat over weeks.

A follow run at a 5 s trigger commits about 30 files per unit (data files, log entries,
checkpoint offsets, publish markers): millions a week. :func:`maintain_output` brings every
table a pipeline owns for one output back to a bounded size, with ``deltalake`` (no JVM):

1. **compact** a table holding at least :data:`COMPACT_MIN_FILES` files below
   :data:`TARGET_FILE_BYTES` into files of about that size (``OPTIMIZE``: the rows stay, readers
   of older versions still find their files). State written one part per file so that expiry
   drops whole files (``StreamRun.STATE_BY_PART``: the inequality join's PO-Join batches) is not
   compacted: merging its parts would make each expiry rewrite the parts that stay.
2. **vacuum** (full: files no commit references, e.g. a failed task's, go too) what was removed
   longer ago than the retention, then write a log checkpoint and drop log entries older than
   the retention (``delta.logRetentionDuration`` and ``delta.deletedFileRetentionDuration`` are
   set to it, so Spark's own ``VACUUM`` keeps the same promise).
3. **bookkeeping:** a direct ingest's ``offsets/`` and ``commits/`` files of all but the last
   :data:`KEEP_BATCHES` committed micro-batches, and the ``_publishing`` markers of published
   units.

Retention: the output, stats and quarantine tables (what users read, time-travel, and what a
downstream reader of an older version needs) keep removed files and log entries for
``retention`` (default :data:`DEFAULT_RETENTION`, at least :data:`MIN_RETENTION_S` unless
``SIMJOIN_RETENTION_CHECK=0``, as Delta's own retention check). The pipeline's own state and work
tables are read only by its stages, under the output's lock, at their newest version: while no
unit is open they keep nothing older (retention 0); while one is open (a stage or a gate may be
reading it) they keep ``retention`` too.

The caller holds the output's lock (``simjoin maintain`` takes it; a follow run and a DAG's
``maintain`` task run it inside theirs). Docs: ``docs/operations.md``, "Maintenance".
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from simjoin.log import get_logger
from simjoin.runtime import manifest

__all__ = ["DEFAULT_RETENTION", "DEFAULT_EVERY", "TableResult", "Result", "parse_retention", "maintain_output",
           "maintain_table", "due", "every_units", "delta_tables", "pipeline_of", "last_unit",
           "maintain_timing", "prune_state", "HISTORY_UNITS", "disk_usage", "unit_open",
           "tables_of", "tables_in"]

log = get_logger("simjoin.maintain")

DEFAULT_RETENTION = "7d"
#: the shortest retention allowed (a reader of an older version, the documented time travel)
MIN_RETENTION_S = 3600.0
#: compacted files' size (``SIMJOIN_COMPACT_TARGET_BYTES``)
TARGET_FILE_BYTES = int(os.environ.get("SIMJOIN_COMPACT_TARGET_BYTES", str(64 << 20)))
#: a table is compacted once it holds this many files below the target size
COMPACT_MIN_FILES = int(os.environ.get("SIMJOIN_COMPACT_MIN_FILES", "8"))
#: committed micro-batches whose checkpoint offsets stay (the last one is what a restart reads)
KEEP_BATCHES = 10
#: units between two maintenance runs of a stream (``SIMJOIN_MAINTAIN_EVERY``; 0: never)
DEFAULT_EVERY = 100
EVERY_ENV = "SIMJOIN_MAINTAIN_EVERY"
RETENTION_ENV = "SIMJOIN_RETENTION"


def parse_retention(text: str | None) -> float:
    """``7d``, ``36h``, ``90m`` (or the forms of ``parse_duration``) -> seconds; below
    :data:`MIN_RETENTION_S` refused with one line unless ``SIMJOIN_RETENTION_CHECK=0``."""
    raw = (text or os.environ.get(RETENTION_ENV) or DEFAULT_RETENTION).strip()
    secs = _days_or_duration(raw, "--retention")
    if secs < MIN_RETENTION_S and os.environ.get("SIMJOIN_RETENTION_CHECK", "1") != "0":
        raise ValueError(f"--retention {raw}: allowed at least 1h (readers of older versions and time travel "
                         "need the files; SIMJOIN_RETENTION_CHECK=0 lifts the floor, as Delta's retention check)")
    return secs


def _days_or_duration(raw: str, flag: str) -> float:
    from simjoin.config import parse_duration

    try:
        secs = float(raw[:-1]) * 86400.0 if raw.lower().endswith("d") else parse_duration(raw)
    except ValueError:
        secs = -1.0
    if not secs >= 0 or math.isinf(secs):
        raise ValueError(f"{flag} {raw!r}: allowed a duration such as 7d, 36h or 90m")
    return secs


def every_units(value: int | None = None) -> int:
    """Units between two maintenance runs: ``value``, else ``SIMJOIN_MAINTAIN_EVERY``, else 100."""
    if value is None:
        raw = os.environ.get(EVERY_ENV, "").strip()
        try:
            value = int(raw) if raw else DEFAULT_EVERY
        except ValueError:
            raise ValueError(f"{EVERY_ENV}={raw!r}: allowed a whole number of units (0: never)") from None
    if value < 0:
        raise ValueError(f"--maintain-every {value}: allowed 0 (never) or more units")
    return value


RECORD = "maintenance.json"


def due(output: str, unit: int | None, every: int) -> bool:
    """Whether a stream's tables are due for maintenance once ``unit`` is published: ``every``
    units or more since the unit the last maintenance followed (recorded in the checkpoint)."""
    if unit is None or every <= 0:
        return False
    m = manifest.of(output)
    ck = m.at("checkpoint") if m is not None else None
    last = -1
    if ck is not None:
        try:
            with open(os.path.join(ck, RECORD)) as fh:
                last = int(json.load(fh).get("unit", -1))
        except (OSError, ValueError):
            last = -1
    return unit - last >= every


def _record(ck: str, unit: int | None, res: Result) -> None:
    path = os.path.join(ck, RECORD)
    with open(path + ".tmp", "w") as fh:
        json.dump({"unit": -1 if unit is None else unit, "at": time.time(), "seconds": res.seconds,
                   "files_after": sum(t.files_after for t in res.tables)}, fh)
    os.replace(path + ".tmp", path)


@dataclass
class TableResult:
    path: str
    #: ``output`` (what users read: kept for the retention) or ``internal`` (state, work)
    role: str
    files_before: int = 0
    files_after: int = 0
    compacted: int = 0
    vacuumed: int = 0
    log_files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    note: str = ""


@dataclass
class Result:
    output: str
    pipeline: str | None
    retention_s: float
    tables: list[TableResult] = field(default_factory=list)
    bookkeeping_removed: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        t = self.tables
        return (f"maintain {self.output}: {len(t)} tables, data files {sum(x.files_before for x in t)} -> "
                f"{sum(x.files_after for x in t)}, {sum(x.vacuumed for x in t)} files vacuumed, "
                f"{self.bookkeeping_removed} bookkeeping files removed, "
                f"{sum(x.bytes for x in t) / 1e6:.1f} MB on disk in {self.seconds:.1f}s")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def delta_tables(root: str) -> list[str]:
    """The Delta tables at or under the local folder ``root`` (a table's own folders are not
    searched for more), sorted."""
    if os.path.isdir(os.path.join(root, "_delta_log")):
        return [root]
    found: list[str] = []
    if not os.path.isdir(root):
        return found
    for name in sorted(os.listdir(root)):
        p = os.path.join(root, name)
        if os.path.isdir(p) and not os.path.islink(p):
            found += delta_tables(p)
    return found


def disk_usage(root: str) -> tuple[int, int]:
    """(files, bytes) under ``root``."""
    n = size = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            try:
                size += os.path.getsize(os.path.join(dirpath, f))
                n += 1
            except OSError:
                pass
    return n, size


def maintain_table(path: str, role: str, retention_s: float, compact: bool = True) -> TableResult:
    """Compact, vacuum and checkpoint the local Delta table at ``path`` (see the module)."""
    from deltalake import DeltaTable

    t0 = time.perf_counter()
    res = TableResult(path, role)
    table = DeltaTable(path)
    # the version current at the cutoff keeps a log checkpoint before anything commits: every
    # commit below (compaction, the retention properties, vacuum) may run Delta's own log cleanup
    _checkpoint_at_cutoff(path, table, retention_s)
    sizes = table.get_add_actions(flatten=True).column("size_bytes").to_pylist()
    res.files_before = len(sizes)
    small = sum(1 for s in sizes if s < TARGET_FILE_BYTES)
    if compact and small >= COMPACT_MIN_FILES:
        m = table.optimize.compact(target_size=TARGET_FILE_BYTES, max_concurrent_tasks=2)
        res.compacted = int(m.get("numFilesRemoved", 0))
    elif not compact:
        res.note = "not compacted (one part per file)"
    want = f"interval {int(retention_s)} seconds"
    conf = table.metadata().configuration or {}
    if conf.get("delta.logRetentionDuration") != want or conf.get("delta.deletedFileRetentionDuration") != want:
        table.alter.set_table_properties({"delta.logRetentionDuration": want,
                                          "delta.deletedFileRetentionDuration": want}, raise_if_not_exists=False)
    # vacuum counts whole hours: rounded up, never down, so a file removed within the retention
    # stays (90m keeps what was removed in the last 2 h), and so does every version current then
    hours = math.ceil(retention_s / 3600)
    res.vacuumed = len(table.vacuum(retention_hours=hours, dry_run=False, enforce_retention_duration=False,
                                    full=True))
    table = DeltaTable(path)
    table.create_checkpoint()
    table.cleanup_metadata()
    res.files_after = len(table.file_uris())
    res.log_files = len(os.listdir(os.path.join(path, "_delta_log")))
    res.bytes = disk_usage(path)[1]
    res.seconds = time.perf_counter() - t0
    return res


def _checkpoint_at_cutoff(path: str, table: Any, retention_s: float) -> None:
    """A log checkpoint at the version that was current ``retention_s`` ago, before the log
    cleanup drops commits older than that: the table as of any moment within the retention stays
    readable, also when its last commit before that moment is much older (a table written hours
    ago and replaced 70 minutes ago still reads as of 75 minutes ago under a 90-minute retention)."""
    from deltalake import DeltaTable

    cutoff = (time.time() - retention_s) * 1000
    v0 = _version_at(path, cutoff)
    if v0 is None:  # (also when it is the current version: maintenance's own commits follow)
        return
    ck = os.path.join(path, "_delta_log", f"{v0:020d}.checkpoint.parquet")
    if os.path.exists(ck):
        os.utime(ck)  # the cleanup goes by a log file's age: this one is still needed
    else:
        DeltaTable(path, version=v0).create_checkpoint()


def _version_at(path: str, at_ms: float) -> int | None:
    """The table's version current at ``at_ms`` (milliseconds since the epoch): the newest commit in
    its ``_delta_log`` dated at or before it (its ``commitInfo`` time, else the file's modification
    time). Read from the log folder, not ``DeltaTable.history()``, which lists only the commits
    after the last checkpoint: a commit before it may be the one current at the cutoff."""
    log_dir = os.path.join(path, "_delta_log")
    versions = sorted((int(n[:20]) for n in os.listdir(log_dir) if n.endswith(".json") and n[:20].isdigit()),
                      reverse=True)
    for v in versions:
        f = os.path.join(log_dir, f"{v:020d}.json")
        ts = None
        try:
            with open(f) as fh:
                for line in fh:
                    info = json.loads(line).get("commitInfo") if line.strip() else None
                    if isinstance(info, dict) and info.get("timestamp") is not None:
                        ts = float(info["timestamp"])
                        break
            if ts is None:
                ts = os.path.getmtime(f) * 1000
        except (OSError, ValueError):
            continue
        if ts <= at_ms:
            return v
    return None


def tables_in(m: manifest.Manifest) -> list[str]:
    """The Delta tables at or under the paths the manifest says the output owns, sorted."""
    return sorted({t for r in m.owned for t in delta_tables(r)})


def _open_unit(m: manifest.Manifest) -> bool:
    """Whether a unit is staged and not yet published: the records table (the manifest's
    ``records``) holds rows of a unit after the last published one (committed units' rows wait
    there for a periodic DELETE)."""
    from deltalake import DeltaTable

    p = m.at("records")
    if p is None or not os.path.isdir(os.path.join(p, "_delta_log")):
        return False
    last = _last_unit(m)
    try:
        acts = DeltaTable(p).get_add_actions(flatten=True)
        n = acts.column("num_records").to_pylist()
        top = acts.column("max.unit").to_pylist() if "max.unit" in acts.column_names else [None] * len(n)
    except Exception:
        return True  # unknown: keep what an open unit's readers may need
    return any((k is None or k > 0) and (u is None or last is None or u > last) for k, u in zip(n, top))


def unit_open(output: str) -> bool:
    """Whether a stream's unit is staged and not yet published (see :func:`_open_unit`)."""
    m = manifest.of(output)
    return m is not None and _open_unit(m)


def _last_unit(m: manifest.Manifest) -> int | None:
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    p = m.at("progress")
    if p is None or not os.path.isdir(os.path.join(p, "_delta_log")):
        return None
    units = DeltaTable(p).to_pyarrow_table(columns=["unit"]).column("unit")
    return None if len(units) == 0 else int(pc.max(units).as_py())


def last_unit(output: str) -> int | None:
    """The last unit a stream published to ``output`` (None: none, or not a stream)."""
    m = manifest.of(output)
    return _last_unit(m) if m is not None else None


def _bookkeeping(m: manifest.Manifest) -> int:
    """Remove the checkpoint offsets and commits of all but the last :data:`KEEP_BATCHES`
    committed micro-batches, and the publish markers of published units; how many files."""
    removed = 0
    ck = m.at("checkpoint")
    if ck is None:
        return 0
    commits = os.path.join(ck, "commits")
    done = max((int(n) for n in os.listdir(commits) if n.isdigit()), default=-1) if os.path.isdir(commits) else -1
    for kind in ("offsets", "commits"):
        d = os.path.join(ck, kind)
        if not os.path.isdir(d):
            continue
        for n in os.listdir(d):
            b = n[1:-4] if n.startswith(".") and n.endswith(".crc") else n
            if b.isdigit() and int(b) <= done - KEEP_BATCHES:
                os.remove(os.path.join(d, n))
                removed += 1
    last = _last_unit(m)
    marks = m.at("markers")
    if last is not None and marks is not None and os.path.isdir(marks):
        for n in os.listdir(marks):
            u = n.rsplit("-", 1)[-1]
            if u.isdigit() and int(u) <= last:
                os.remove(os.path.join(marks, n))
                removed += 1
    return removed


#: a ``"history"`` state table keeps the rows of this many units (``SIMJOIN_HISTORY_UNITS``)
HISTORY_UNITS = int(os.environ.get("SIMJOIN_HISTORY_UNITS", "10000"))


def prune_state(path: str, rule: str, last: int | None) -> int:
    """Apply a state table's retention rule (``StreamRun.STATE_RETENTION``): ``latest`` keeps the
    newest unit's rows, ``history`` the last :data:`HISTORY_UNITS` units'; rows deleted."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    table = DeltaTable(path)
    if rule == "latest":
        top = pc.max(table.to_pyarrow_table(columns=["unit"]).column("unit")).as_py()
        cut = None if top is None else int(top)
    elif rule == "history":
        cut = None if last is None else last - HISTORY_UNITS + 1
    else:
        raise ValueError(f"state retention {rule!r} of {path}: allowed latest or history")
    if cut is None:
        return 0
    m = table.delete(f"unit < {cut}")
    return int(m.get("num_deleted_rows", 0) or 0)


#: the task-timing table keeps rows of this many days (``SIMJOIN_TIMING_RETENTION``)
TIMING_RETENTION = "30d"


def maintain_timing(path: str, keep: str | None = None, retention: str | float | None = None) -> TableResult | None:
    """The warehouse's task-timing table: rows older than ``keep`` (default
    ``SIMJOIN_TIMING_RETENTION`` or 30 days) deleted, then maintained as a user table. None when
    there is no such table. Runs beside other pipelines' appends (they only add files)."""
    import datetime as dt

    from deltalake import DeltaTable

    if not os.path.isdir(os.path.join(path, "_delta_log")):
        return None
    raw = keep or os.environ.get("SIMJOIN_TIMING_RETENTION") or TIMING_RETENTION
    keep_s = _days_or_duration(raw, "--timing-retention")
    cut = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=keep_s)
    table = DeltaTable(path)
    if "started_at" in table.schema().to_arrow().names:
        table.delete(f"started_at < '{cut.isoformat()}'")
    retention_s = float(retention) if isinstance(retention, (int, float)) else parse_retention(retention)
    res = maintain_table(path, "output", retention_s)
    log.info("maintain %s: %d -> %d data files, rows kept %s back", path, res.files_before, res.files_after,
             keep or TIMING_RETENTION)
    return res


def tables_of(output: str, layout: Mapping[str, str] | None = None) -> list[str]:
    """The paths of the Delta tables the output's manifest says it owns (``layout``: the
    pipeline's, to migrate an output of an earlier release, :func:`simjoin.runtime.manifest.legacy`)."""
    m = manifest.of(output, layout)
    return [] if m is None else tables_in(m)


def pipeline_of(output: str) -> str | None:
    """The pipeline that wrote ``output`` (its manifest; an earlier release's output: its
    identity file, else its table's owner mark)."""
    m = manifest.of(output)
    return None if m is None else (m.pipeline or None)


def maintain_output(output: str, retention: str | float | None = None, by_part: Sequence[str] = (),
                    rules: dict[str, str] | None = None, layout: Mapping[str, str] | None = None) -> Result:
    """Maintain every table the output's manifest says it owns (see the module); ``by_part``: the
    names of its state tables written one part per file (never compacted); ``rules``: state table
    name -> retention rule (:func:`prune_state`), applied first; ``layout``: the pipeline's (an
    output of an earlier release gets its manifest from it, written now). A table's retention
    class is its role's in the manifest: ``internal`` tables (state, work) keep only what an open
    unit needs. The caller holds the output's lock. Raises ``ValueError`` (one line) when no
    pipeline's table is there, :class:`simjoin.runtime.manifest.Moved` for a moved or copied output."""
    t0 = time.perf_counter()
    output = os.path.abspath(output)
    retention_s = float(retention) if isinstance(retention, (int, float)) else parse_retention(retention)
    m = manifest.of(output, layout, save=True)
    tables = tables_in(m) if m is not None else []
    if m is None or not tables:
        raise ValueError(f"--output {output}: no table a simjoin pipeline wrote is there: allowed the --output "
                         "of a pipeline run")
    res = Result(output, m.pipeline or None, retention_s)
    parts = set(by_part)
    if rules:
        last = _last_unit(m)
        for p in tables:
            rule = rules.get(os.path.basename(p))
            if rule:
                n = prune_state(p, rule, last)
                if n:
                    log.info("maintain %s: %d rows past its retention (%s) deleted", p, n, rule)
    internal_s = retention_s if _open_unit(m) else 0.0
    for i, p in enumerate(tables, 1):
        inner = m.keep(p) == "internal"
        got = maintain_table(p, "internal" if inner else "output", internal_s if inner else retention_s,
                             compact=not (inner and os.path.basename(p) in parts))
        res.tables.append(got)
        log.info("maintain %d/%d %s: %s, %d -> %d data files, %d vacuumed, %d log entries, %.1f MB (%.2fs)%s",
                 i, len(tables), p, m.role(p) or "output", got.files_before, got.files_after, got.vacuumed,
                 got.log_files, got.bytes / 1e6, got.seconds, f"; {got.note}" if got.note else "")
    res.bookkeeping_removed = _bookkeeping(m)
    _forget_open_tables(tables)
    res.seconds = time.perf_counter() - t0
    ck = m.at("checkpoint")
    if ck is not None and os.path.isdir(ck):
        _record(ck, _last_unit(m), res)
    log.info("%s", res.summary())
    return res


def _forget_open_tables(tables: Sequence[str]) -> None:
    """This thread's kept ``DeltaTable`` objects of ``tables`` are opened again on their next use
    (their early log entries may be gone now)."""
    from simjoin.io.delta_files import forget_open

    forget_open(tables)
