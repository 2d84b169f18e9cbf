"""S2J's query processor (Section 3.1): ``simjoin s2j query`` (one-time) and ``simjoin s2j follow``
(continuous) over a task's snapshots. Both read with ``deltalake``, with no Spark: a snapshot is a
commit of the task's table tagged ``{"snapshot": N, "unit": U}``, indexed as data in
``DIR/_snapshots`` (snapshot, unit, task, version), so the index outlives the log cleanup of
maintenance; a snapshot whose version is older than the retention is refused in one line.

* ``query --output DIR --task NAME [--from T1] [--to T2] [--snapshot N]``: the pairs with
  ``T1 <= ts < T2`` as of snapshot N (time travel to its version; default: the latest).
* ``follow --output DIR --task NAME``: prints each new snapshot's pairs as it lands (the files a
  version added; tables are append-only); Ctrl-C or SIGTERM stops it cleanly.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import sys
import time
from typing import Any

import click

__all__ = ["commands", "snapshots", "query_pairs"]

_UTC = dt.UTC


def _table_path(output: str, task: str) -> str:
    from simjoin.runtime.tables import DirTables

    return os.path.abspath(DirTables(output).task(task))


def _fail(msg: str) -> None:
    click.echo(f"error: {msg}", err=True)
    raise SystemExit(2)


def _open(output: str, task: str) -> Any:
    from deltalake import DeltaTable

    path = _table_path(output, task)
    if not DeltaTable.is_deltatable(path):
        tasks = sorted(n for n in os.listdir(output) if not n.startswith("_")) if os.path.isdir(output) else []
        _fail(f"no snapshot of task {task!r} at {path}: allowed a task of {output} "
              f"({', '.join(tasks) or 'none yet: run simjoin s2j run first'})")
    return DeltaTable(path)


def snapshots(table: Any, output: str | None = None, task: str | None = None) -> list[tuple[int, int, int]]:
    """(snapshot, unit, version) of every snapshot of a task table, oldest first: from the
    output's snapshot index (``DIR/_snapshots``, kept as data: it outlives the log cleanup) and
    from the commits still in the table's log (a snapshot whose index row a crash lost)."""
    found: dict[int, tuple[int, int, int]] = {}
    if output is not None and task is not None:
        from deltalake import DeltaTable

        from simjoin.runtime.tables import DirTables

        index = DirTables(os.path.abspath(output)).snapshots
        if DeltaTable.is_deltatable(index):
            for r in DeltaTable(index).to_pyarrow_table().to_pylist():
                if r["task"] == task:
                    found[int(r["snapshot"])] = (int(r["snapshot"]), int(r["unit"]), int(r["version"]))
    for h in table.history():
        meta = h.get("userMetadata")
        if not meta:
            continue
        try:
            tag = json.loads(meta)
        except ValueError:
            continue
        if isinstance(tag, dict) and "snapshot" in tag:
            sid = int(tag["snapshot"])
            found.setdefault(sid, (sid, int(tag.get("unit", -1)), int(h["version"])))
    return sorted(found.values())


def _retention(table: Any) -> str:
    conf = table.metadata().configuration or {}
    raw = conf.get("delta.logRetentionDuration") or "interval 30 days (Delta's default)"
    return raw.removeprefix("interval ")


def _ts(text: str | None, flag: str) -> dt.datetime | None:
    if text is None:
        return None
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        _fail(f"invalid {flag} {text!r}: allowed an ISO time such as 2026-08-01T10:30:00 (UTC unless it says)")
    return t.replace(tzinfo=_UTC) if t.tzinfo is None else t  # type: ignore[possibly-undefined]


def query_pairs(table: Any, t1: dt.datetime | None, t2: dt.datetime | None) -> Any:
    """The table's pairs with ``t1 <= ts < t2`` (pyarrow), sorted by ts, left_id, right_id."""
    import pyarrow.compute as pc

    t = table.to_pyarrow_table()
    mask = None
    if t1 is not None:
        mask = pc.greater_equal(t["ts"], t1)
    if t2 is not None:
        m2 = pc.less(t["ts"], t2)
        mask = m2 if mask is None else pc.and_(mask, m2)
    if mask is not None:
        t = t.filter(mask)
    return t.sort_by([("ts", "ascending"), ("left_id", "ascending"), ("right_id", "ascending")])


def _print_rows(t: Any, limit: int, prefix: str = "") -> None:
    n = t.num_rows if limit <= 0 else min(limit, t.num_rows)
    cols = [t.column(c).to_pylist()[:n] for c in ("left_id", "right_id", "ts")]
    for a, b, ts in zip(*cols):
        click.echo(f"{prefix}{a},{b},{ts.isoformat() if ts is not None else ''}")
    if n < t.num_rows:
        click.echo(f"{prefix}... {t.num_rows - n} more (--limit 0 prints all)")


@click.command("query", help="One-time query: a task's pairs in a time span, from its snapshots (time travel).")
@click.option("--output", required=True, help="The s2j output directory.")
@click.option("--task", "task", required=True, help="The task name.")
@click.option("--from", "t1", default=None, help="Only pairs with ts >= this ISO time.")
@click.option("--to", "t2", default=None, help="Only pairs with ts < this ISO time.")
@click.option("--snapshot", type=click.IntRange(min=0), default=None,
              help="As of this snapshot (default: the latest).")
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True,
              help="Rows printed (0: all); the count covers every row.")
def query(output: str, task: str, t1: str | None, t2: str | None, snapshot: int | None, limit: int) -> None:
    start, end = _ts(t1, "--from"), _ts(t2, "--to")
    if start is not None and end is not None and end <= start:
        _fail(f"invalid --to {t2!r}: allowed a time after --from {t1!r}")
    table = _open(output, task)
    snaps = snapshots(table, output, task)
    if not snaps:
        _fail(f"task {task!r} at {_table_path(output, task)} has no snapshot yet")
    if snapshot is None:
        sid, _, version = snaps[-1]
    else:
        hit = [s for s in snaps if s[0] == snapshot]
        if not hit:
            _fail(f"invalid --snapshot {snapshot}: allowed {snaps[0][0]}..{snaps[-1][0]} (the snapshots of {task})")
        sid, _, version = hit[0]
    # the task tables are append-only and only a snapshot appends to them: the latest snapshot is
    # the table as it is (maintenance's later commits compact and vacuum, the rows stay)
    if sid != snaps[-1][0] and version != table.version():
        retention = _retention(table)
        try:
            table.load_as_version(version)
        except Exception:  # its log (and files) went with the maintenance's retention
            _fail(f"snapshot {sid} of task {task} (version {version}) is older than the table's retention "
                  f"({retention}): allowed a snapshot within it, such as the latest, {snaps[-1][0]}")
    t = query_pairs(table, start, end)
    click.echo("left_id,right_id,ts")
    _print_rows(t, limit)
    span = f"[{start.isoformat() if start else '-inf'}, {end.isoformat() if end else '+inf'})"
    click.echo(f"s2j query: {t.num_rows} pairs of task {task} with ts in {span} as of snapshot {sid} "
               f"(version {version})")


@click.command("follow", help="Continuous query: print a task's new pairs as each snapshot lands (Ctrl-C stops).")
@click.option("--output", required=True, help="The s2j output directory.")
@click.option("--task", "task", required=True, help="The task name.")
@click.option("--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="Seconds between polls of the Delta log.")
@click.option("--from-start", is_flag=True, default=False, help="Print every snapshot so far first.")
@click.option("--max-snapshots", type=click.IntRange(min=1), default=None,
              help="Stop after this many new snapshots.")
def follow(output: str, task: str, interval: float, from_start: bool, max_snapshots: int | None) -> None:
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    stop = {"now": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["now"] = True

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    path = _table_path(output, task)
    seen_snaps, pairs = 0, 0
    try:
        while not stop["now"] and not DeltaTable.is_deltatable(path):
            time.sleep(interval)  # the first snapshot has not landed yet
        if stop["now"]:
            raise KeyboardInterrupt
        table = DeltaTable(path)
        done = -1 if from_start else max((v for _, _, v in snapshots(table, output, task)), default=-1)
        click.echo(f"following task {task} at {path} (from {'the start' if from_start else f'version {done + 1}'})")
        sys.stdout.flush()
        while not stop["now"]:
            table.update_incremental()
            for sid, unit, version in snapshots(table, output, task):
                if version <= done:
                    continue
                before = set(DeltaTable(path, version=version - 1).file_uris()) if version > 0 else set()
                added = [f for f in DeltaTable(path, version=version).file_uris() if f not in before]
                n = 0
                for f in added:
                    t = pq.read_table(f).sort_by([("ts", "ascending"), ("left_id", "ascending")])
                    _print_rows(t, 0, prefix=f"snapshot {sid}: ")
                    n += t.num_rows
                click.echo(f"snapshot {sid} (unit {unit}, version {version}): {n} new pairs")
                sys.stdout.flush()
                done, seen_snaps, pairs = version, seen_snaps + 1, pairs + n
                if max_snapshots is not None and seen_snaps >= max_snapshots:
                    stop["now"] = True
                    break
            if not stop["now"]:
                time.sleep(interval)
    except KeyboardInterrupt:
        pass
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    click.echo(f"s2j follow: {seen_snaps} snapshots, {pairs} pairs of task {task}; stopped")


def commands() -> list[click.Command]:
    return [query, follow]
