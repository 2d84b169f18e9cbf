"""Publish and expiry: a unit's pieces exactly once, then its progress row; state expiry by watermark."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame

from simjoin.faults import maybe_fail
from simjoin.io import delta_source
from simjoin.runtime.event_time import Unit, aware, epoch_us
from simjoin.spark import delta
from simjoin.spark.engine.base import EngineBase
from simjoin.spark.engine.units import (
    PROGRESS_SCHEMA,
    RECORDS_HOUSEKEEPING_EVERY,
    UTC,
    local_path,
    log,
    naive_utc,
    records_summary,
)

#: A DataFrame piece of up to this many rows, to a local table, is brought to the driver (one
#: Spark job) and committed with ``deltalake`` (milliseconds) instead of Spark's write (3-4 jobs and
#: about a second); ``SIMJOIN_PUBLISH_DRIVER_ROWS=0``: never.
PUBLISH_DRIVER_ROWS = int(os.environ.get("SIMJOIN_PUBLISH_DRIVER_ROWS", str(2_000_000)))


def driver_rows(df: DataFrame, path: str, opts: Mapping[str, str], small: bool) -> Any:
    """``df`` as a pyarrow Table when publish commits it from the driver: a ``small`` piece
    always; another when ``path`` is local, its options are ones a deltalake commit has, and it
    holds at most :data:`PUBLISH_DRIVER_ROWS` rows (None: Spark writes it)."""
    if small:
        return df.toArrow()
    if PUBLISH_DRIVER_ROWS <= 0 or local_path(path) is None or set(opts) - {"userMetadata", "mergeSchema"}:
        return None
    t = df.limit(PUBLISH_DRIVER_ROWS + 1).toArrow()
    return t if t.num_rows <= PUBLISH_DRIVER_ROWS else None


class Publisher(EngineBase):
    """Publishes a unit exactly once (:meth:`publish`) and expires state (:meth:`expire`)."""

    def _marker(self, unit: int) -> str:
        base = local_path(self.tables.work_dir)
        assert base is not None
        return os.path.join(base, "_publishing", f"{self.checkpoint_id()}-{unit}")

    def publishing(self, unit: int) -> bool:
        """Whether publishing of ``unit`` began (its gate passed before)."""
        return os.path.exists(self._marker(unit))

    def publish(self, unit: Unit, pieces: Sequence[tuple[str, DataFrame | delta.Files | Any, str]],
                meta: dict[str, Any] | None = None,
                options: Mapping[str, Mapping[str, str]] | None = None,
                small: Collection[str] = ("stats",)) -> dict[str, Any]:
        """Append each ``(piece, df, path)`` once per (checkpoint, unit), then commit the unit. ``df``
        may be ``delta.Files``: Parquet files tasks already wrote into ``path``, committed as they are.
        ``df`` may also be a pyarrow Table (rows computed in this process, e.g. by a unit run in the
        driver): one ``delta.append_rows`` commit.
        ``options``: extra Delta write options per piece (e.g. a commit's ``userMetadata``).
        ``small``: pieces of a few rows (stats), collected and committed with ``delta.append_rows``.
        Only called after the unit's gate passed. The result's ``published`` holds the rows each
        piece appended (None: a DataFrame appended by Spark, not counted)."""
        marker = self._marker(unit.unit)
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        open(marker, "w").close()
        self.own([path for _, _, path in pieces])  # a table created now is recorded first (--reset)
        # the pieces go to different tables: append them as concurrent Spark jobs
        from concurrent.futures import ThreadPoolExecutor

        published: dict[str, int | None] = {}

        def append(piece: str, df: DataFrame | delta.Files | Any, path: str) -> None:
            app, opts = self.write_id(piece, unit.checkpoint_id), dict((options or {}).get(piece) or {})
            if isinstance(df, delta.Files):  # files the tasks wrote into the table's directory: one commit
                if opts:
                    raise ValueError(f"publish: options {sorted(opts)} of the files piece {piece} are not supported")
                delta.append_files(self.spark, df, path, app, unit.unit)
                published[piece] = sum(int(r["n"]) for r in df.rows)
                return
            if not isinstance(df, pa.Table):  # a DataFrame: to the driver when small enough
                rows = driver_rows(df, path, opts, piece in small)
                if rows is None:
                    delta.append_idempotent(df, path, app, unit.unit, None, opts)
                    published[piece] = None
                    return
                df = rows
            published[piece] = int(df.num_rows)
            # rows in this process: one deltalake commit instead of Spark's jobs
            merge = str(opts.pop("mergeSchema", "false")).lower() == "true"
            metadata = opts.pop("userMetadata", None)
            if opts:
                raise ValueError(f"publish: options {sorted(opts)} of the piece {piece} are not supported")
            delta.append_rows(self.spark, df, "", path, app, unit.unit, metadata=metadata, merge_schema=merge)

        with ThreadPoolExecutor(max(1, min(8, len(pieces) + 1)), thread_name_prefix="publish") as pool:
            futures = [pool.submit(append, piece, df, path) for piece, df, path in pieces]
            # what the progress row needs is read beside the appends (the lock keeps it unchanged)
            due = dt.datetime.now(UTC).replace(tzinfo=None)  # the unit's publish time
            summary = pool.submit(records_summary, unit.records, due)
            prog = self.progress()
        for f in futures:
            f.result()
        got = summary.result()
        maybe_fail(f"{self.pipeline}.publish.mid")
        marks = self._marks(got, prog)
        staged_meta = json.loads(got[0]["meta"]) if got and got[0]["meta"] else {}
        meta_all = {**prog.meta, **staged_meta, **(meta or {})}
        self._catch_up_idle(marks, meta_all, prog.meta, {int(r["side"]) for r in got}, unit.unit)

        if self.ingest_mode() == "landing":  # the landing commits staged so far
            meta_all["landed"] = max([int(prog.meta.get("landed", -1))] + [int(r["b"]) for r in got])
        else:  # the stream's micro-batches staged so far (a replay of one of them is skipped)
            meta_all["staged_batch"] = max([int(prog.meta.get("staged_batch", -1))] + [int(r["b"]) for r in got])
        rows = [(unit.unit, int(s), mt, self.fingerprint, unit.checkpoint_id, json.dumps(meta_all, sort_keys=True))
                for s, mt in sorted(marks.items())]
        # the commit that publishes the unit says so (its time is the unit's publish time)
        delta.append_rows(self.spark, rows, PROGRESS_SCHEMA, self.tables.progress,
                          self.write_id("progress", unit.checkpoint_id), unit.unit,
                          metadata=json.dumps({"unit": unit.unit}))
        self._progress = None
        now = dt.datetime.now(UTC)
        wm = min(marks.values()) if len(marks) == len(self.sources) else None
        # housekeeping: committed units' staged rows are no longer needed (readers skip them by
        # unit; a DELETE costs a second or two, so it runs every few units)
        if unit.unit % RECORDS_HOUSEKEEPING_EVERY == RECORDS_HOUSEKEEPING_EVERY - 1:
            self.delete(self.tables.records, f"unit <= {unit.unit}")
            landing = self.tables.work("landing")
            if "landed" in meta_all and delta.table_exists(self.spark, landing) \
                    and delta.latest_version(self.spark, landing) == meta_all["landed"]:
                self.delete(landing, "true")  # every landed commit is staged and committed
        log.info("%s: unit %d published (%s), watermark %s", self.pipeline, unit.unit,
                 ", ".join(p for p, _, _ in pieces), wm)
        if got:  # event time to result: the newest and the oldest record of the unit
            lo = aware(min(r["lo"] for r in got))
            hi = aware(max(r["m"] for r in got))
            log.info("%s: unit %d: %d records, published %.2fs after its newest and %.2fs after its oldest "
                     "record's ts", self.pipeline, unit.unit, sum(int(r["n"]) for r in got),
                     (now - hi).total_seconds(), (now - lo).total_seconds())
        return {"unit": unit.unit, "watermark": None if wm is None else wm.isoformat(),
                "watermark_ts": wm, "previous_watermark_ts": prog.watermark, "published": published}

    @staticmethod
    def _marks(got: list[dict[str, Any]], prog: Any) -> dict[int, dt.datetime]:
        """Each stream's committed max ts (its mark) after a unit whose records summarise to
        ``got`` (:func:`records_summary` with the unit's publish time). A row dated after the
        publish time (inside ``--max-future``) is joined and kept like any row, but never advances
        its stream's mark: no later row of any stream becomes late because of it, whether the data
        runs at the wall clock or hours behind it."""
        marks = {int(r["side"]): naive_utc(r["due"]) for r in got if r.get("due") is not None}
        for s, mt in prog.max_ts.items():
            marks[s] = max(marks[s], mt) if s in marks else mt
        return marks

    def closing_watermark(self, unit: Unit) -> dt.datetime | None:
        """A lower bound of the watermark ``unit``'s publish commits (its idle catch-up and a later
        clock can only raise it), or None while a stream has none: state of the windows that end at
        or before it (less the allowed lateness) is dropped right after that publish, so a unit
        need not write it at all (a backlog's closed windows were written, then deleted)."""
        marks = self._marks(records_summary(unit.records, dt.datetime.now(UTC).replace(tzinfo=None)),
                            self.progress())
        return min(marks.values()) if len(marks) == len(self.sources) else None

    def _catch_up_idle(self, marks: dict[int, Any], meta_all: dict[str, Any], before: dict[str, Any],
                       arrived_now: set[int], unit: int) -> None:
        """``--idle-timeout`` (two streams): a stream that received nothing for that long (wall
        clock, recorded per stream in the progress ``meta`` as ``arrived`` while the timeout is on)
        has its committed max ts advanced to the other's, in ``marks`` before they are committed. Every rule reads the
        committed marks (expiry of the other stream's state, the watermark, lateness), so its state
        expires, and its rows that arrive later behind that mark are quarantined as late; what is
        committed is what every later unit and a restart go by (docs/operations.md, "Lateness")."""
        n = len(self.sources)
        if self.idle_timeout_s <= 0 or n < 2:  # off: the progress rows hold no wall-clock times
            return
        now = time.time()
        arrived = {str(k): float(v) for k, v in (before.get("arrived") or {}).items()}
        for s in arrived_now:
            arrived[str(s)] = now
        started = float(before.get("started", now))
        meta_all["arrived"], meta_all["started"] = arrived, started
        unread = self._unread_sides()
        idle = [s for s in range(n) if now - arrived.get(str(s), started) > self.idle_timeout_s and s not in unread]
        active = [marks[s] for s in range(n) if s not in idle and s in marks]
        if not idle or not active:
            return
        top = max(active)
        for s in idle:
            if s not in marks or marks[s] < top:
                log.info("%s: unit %d: stream %d received nothing for %.0fs (--idle-timeout %gs): its committed "
                         "max ts moves from %s to %s; the other stream's state expires as if it had caught up",
                         self.pipeline, unit, s, now - arrived.get(str(s), started), self.idle_timeout_s,
                         marks.get(s), top)
                marks[s] = top

    def _unread_sides(self) -> set[int]:
        """The streams whose input holds commits this output has not read yet (``direct`` ingest:
        an input's latest version past the end of the last batch planned). Such a stream is not
        idle, however long ago its last rows arrived: it was the pipeline that did not run (a stop,
        a schedule), or a unit held the other stream only (Flink's rule for idleness)."""
        if self.ingest_mode() != "direct" or self._direct_last("offsets") < 0:
            return set()
        out = set()
        for k, (src, r) in enumerate(zip(self.sources, self._direct_ranges(self._direct_last("offsets")),
                                         strict=True)):
            loc = local_path(src)
            if loc is not None and delta_source.latest_version(loc, after=r.end) > r.end:
                out.add(k)
        return out

    def delete(self, path: str, cond: str) -> None:
        delta.delete(self.spark, path, cond)

    def delete_ids(self, path: str, column: str, ids: Any, also: str | None = None) -> None:
        """Delete the rows whose integer ``column`` is one of ``ids`` (or that match ``also``), in
        bounded conditions (``delta.id_conditions``): a backlog expires tens of thousands at once."""
        conds = delta.id_conditions(column, ids)
        if also:
            conds = [f"{conds[0]} OR ({also})", *conds[1:]] if conds else [also]
        for cond in conds:
            self.delete(path, cond)

    def expire(self, path: str, watermark: dt.datetime | None, column: str = "window_end",
               previous: dt.datetime | None = None, windows: tuple[float, float] | None = None) -> None:
        """Drop state rows whose window ended at or before the watermark. With ``previous`` (the
        watermark before this unit) and ``windows`` (size, slide in seconds of epoch-aligned
        windows), skip the DELETE when no window ended between the two watermarks: rows of
        windows that ended earlier were dropped then (or are never read again)."""
        if watermark is None:
            return
        if previous is not None and windows is not None:
            size_us, slide_us = (round(x * 1e6) for x in windows)

            def closed(t: dt.datetime) -> int:
                return (epoch_us(t) - size_us) // slide_us

            if closed(previous) == closed(watermark):
                return
        self.delete(path, f"{column} <= '{aware(watermark).astimezone(UTC).isoformat()}'")
