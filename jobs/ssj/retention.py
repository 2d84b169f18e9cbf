"""ssj's retention rule: every run writes its own ``run_id`` partition of the pairs, tokens,
lengths, plan and staging tables (a full copy of its pairs), so a schedule grows them without
bound. Maintenance (``simjoin maintain``, the DAG's ``maintain`` task) keeps the partitions of the
last ``SIMJOIN_SSJ_KEEP_RUNS`` published runs (default 10; a run's age is the time of its last
publish, ``_increments.published_at``, so a cleared and rerun old run counts as new), of the
latest published run of each parameter set (the base an incremental run builds on,
``jobs.ssj.increment``), and of every run not published yet that is newer than the oldest one
kept; the other runs' partitions go. The bookkeeping (``_runs``, ``_increments``, ``_stats``,
``_quarantine``) stays: it is small, and a rerun of a dropped run joins in full again from its
pinned input versions."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from simjoin.log import get_logger

__all__ = ["KEEP_RUNS", "kept_runs", "prune"]

log = get_logger("simjoin.ssj")

KEEP_RUNS = 10


def keep_runs() -> int:
    raw = os.environ.get("SIMJOIN_SSJ_KEEP_RUNS", "").strip()
    try:
        k = int(raw) if raw else KEEP_RUNS
    except ValueError:
        k = 0
    if k < 1:
        raise ValueError(f"SIMJOIN_SSJ_KEEP_RUNS={raw!r}: allowed a whole number of runs, at least 1")
    return k


def kept_runs(pins: list[dict[str, Any]], increments: list[dict[str, Any]], keep: int) -> set[str]:
    """The run ids whose partitions stay (see the module), from the ``_runs`` and ``_increments`` rows."""
    when: dict[str, Any] = {}
    published: dict[str, bool] = {}
    for r in pins:
        rid = str(r["run_id"])
        at = _utc(r["pinned_at"])
        when[rid] = max(when[rid], at) if rid in when else at
        published[rid] = published.get(rid, True) and bool(r["published"])
    for r in increments:  # a run's age is the time of its last publish: a rerun of an old run is new
        rid, at = str(r["run_id"]), _utc(r.get("published_at"))
        if rid in when and at is not None:
            when[rid] = max(when[rid], at)
    done = sorted((rid for rid in when if published[rid]), key=lambda rid: when[rid], reverse=True)
    kept = set(done[:keep])
    params = {str(r["run_id"]): r.get("params") for r in increments}
    seen: set[Any] = set()
    for rid in done:  # the latest published run of each parameter set: an incremental run's base
        key = params.get(rid)
        if key not in seen:
            seen.add(key)
            kept.add(rid)
    oldest = min((when[rid] for rid in kept), default=None)
    kept |= {rid for rid in when if not published[rid] and (oldest is None or when[rid] >= oldest)}
    return kept


def _utc(t: Any) -> Any:
    """A timestamp as an aware UTC datetime (Spark reads them naive, deltalake aware)."""
    import datetime as dt

    return t.replace(tzinfo=dt.UTC) if isinstance(t, dt.datetime) and t.tzinfo is None else t


def prune(output: str, tables: Sequence[str]) -> dict[str, Any]:
    """Drop the partitions of the runs :func:`kept_runs` lets go, from the local tables of the ssj
    output ``output`` (``tables``: its Delta tables); what was dropped, per table."""
    from deltalake import DeltaTable

    from simjoin.io.tables import predicate
    from simjoin.runtime import manifest

    m = manifest.of(output)
    have = {os.path.realpath(p) for p in tables}

    def table(role: str) -> str | None:  # the output's table of this role, by its manifest
        path = m.at(role) if m is not None else None
        return path if path is not None and os.path.realpath(path) in have else None

    def rows(path: str | None) -> list[dict[str, Any]]:
        return DeltaTable(path).to_pyarrow_table().to_pylist() if path else []

    pins = rows(table("runs"))
    if not pins:
        return {}
    kept = kept_runs(pins, rows(table("increments")), keep_runs())
    gone = sorted({str(r["run_id"]) for r in pins} - kept)
    dropped: dict[str, int] = {}
    if not gone:
        return dropped
    cond = predicate([[("run_id", "in", gone)]])
    for path in (table("output"), table("tokens"), table("lengths"), table("plan"), table("staging")):
        if path:
            res = DeltaTable(path).delete(cond)
            dropped[path] = int(res.get("num_deleted_rows", 0) or 0)
    log.info("ssj retention: kept runs %s; dropped the partitions of %s (%s rows)", sorted(kept), gone,
             sum(dropped.values()))
    return dropped
