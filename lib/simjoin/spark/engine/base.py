"""The engine's identity (checkpoint, fingerprint, inputs), progress, reset, units and work tables."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from simjoin.config import fingerprint_changes
from simjoin.io import delta_source
from simjoin.runtime import manifest
from simjoin.runtime.event_time import CheckpointMismatch, Progress, Unit
from simjoin.runtime.tables import StreamTables
from simjoin.spark import delta
from simjoin.spark.engine.units import IDENTITY_FILE, UTC, is_dir_tables, local_path, log, path_inside, same_path


class EngineBase:
    """One stream pipeline's engine over its tables: identity, progress, units (see the package docstring)."""

    def __init__(self, spark: SparkSession, pipeline: str, tables: StreamTables, sources: Sequence[str],
                 fingerprint: str, ts_unit: str | None = None, max_future_s: float = 3600.0,
                 follow: Any = None, allowed_lateness_s: float = 0.0, ts_zone: str = "UTC",
                 max_records_per_unit: int | None = None, idle_timeout_s: float = 0.0) -> None:
        self.spark = spark
        self.pipeline = pipeline
        self.tables = tables
        self.sources = list(sources)
        self.fingerprint = fingerprint
        self.ts_unit = ts_unit
        self.max_future_s = float(max_future_s)
        self.allowed_lateness_s = float(allowed_lateness_s)
        #: two streams: a stream that received nothing for this long is caught up with the other (0: never)
        self.idle_timeout_s = float(idle_timeout_s)
        #: the zone of a TIMESTAMP_NTZ ts column or of ts strings without a zone
        self.ts_zone = ts_zone
        #: a direct ingest stages at most this many records as one unit (None: all that arrived)
        self.max_records_per_unit = max_records_per_unit
        #: follow mode (``simjoin.pipeline.runner.Follow``): ingest runs a processingTime query
        self.follow = follow
        self._progress: Progress | None = None
        self._direct_read_s = 0.0  # seconds the last direct batch took to read with pyarrow
        #: every table path of the run (``StreamRun.table_paths``): ``--reset`` of an output
        #: created before the identity file listed what it created removes these
        self.owned: list[str] = []

    def checkpoint_id(self) -> str | None:
        p = local_path(self.tables.checkpoint)
        if p is None:
            raise ValueError(f"checkpoint {self.tables.checkpoint}: only local paths are supported")
        f = os.path.join(p, IDENTITY_FILE)
        if not os.path.exists(f):
            return None
        return str(json.loads(open(f).read())["id"])

    def _checkpoint_consumed(self) -> bool:
        p = local_path(self.tables.checkpoint)
        commits = os.path.join(p or "", "commits")
        return os.path.isdir(commits) and any(not n.startswith(".") for n in os.listdir(commits))

    def ingest_mode(self) -> str:
        """How this output's ingest reads its stream, fixed when the output is created:
        ``foreach`` (a ``foreachBatch`` query in this process; a local Spark only), ``landing``
        (the query appends to a Delta landing table that this process then stages commit by
        commit; the mode of outputs created on the warm Spark over Spark Connect) or ``direct``
        (no query: this process reads the inputs' new versions by their Delta logs,
        :meth:`_ingest_direct`; local tables and a pipeline that stages through the driver, on a
        local or the warm Spark)."""
        p = local_path(self.tables.checkpoint)
        f = os.path.join(p or "", IDENTITY_FILE)
        if os.path.exists(f):
            return str(json.loads(open(f).read()).get("ingest", "foreach"))
        from simjoin.spark.session import is_remote

        if self._direct_possible():  # on either Spark: the warm one's server reads the same local files
            return "direct"
        return "landing" if is_remote(self.spark) else "foreach"

    def _direct_possible(self) -> bool:
        """Whether a new output may read its inputs by their Delta logs (``direct``): the pipeline
        declares its input (``ingest``'s spec), every table is local, every input
        is one ``delta_source`` reads, and ``SIMJOIN_DIRECT_INGEST`` is not 0."""
        if os.environ.get("SIMJOIN_DIRECT_INGEST", "1") == "0" or getattr(self, "_input", None) is None:
            return False
        if not self.local_tables() or local_path(self.tables.checkpoint) is None:
            return False
        for src in self.sources:
            loc = local_path(src)
            if loc is None or delta_source.latest_version(loc) < 0:
                return False
            why = delta_source.unsupported(loc)
            if why is not None:
                log.info("%s: input %s is read by a streaming query: %s", self.pipeline, src, why)
                return False
        return True

    def _new_checkpoint_id(self) -> str:
        p = local_path(self.tables.checkpoint)
        assert p is not None
        mode = self.ingest_mode()
        # what this output will own: refused if an input lives there or it holds foreign files
        targets = self._reset_targets(legacy=True)
        self._refuse_inputs_under(targets, "where this output's tables would be written")
        self._refuse_foreign_folder(targets)
        created, foreign = [], []
        for t in targets:
            loc = local_path(t)
            if loc is None or not os.path.exists(loc) or (os.path.isdir(loc) and not os.listdir(loc)):
                created.append(t)
            elif t != self.tables.checkpoint:
                foreign.append(t)
        if foreign:
            raise CheckpointMismatch(
                f"{foreign[0]} already exists and was not created by simjoin {self.pipeline} for "
                f"{self.tables.output}: allowed: a new --output, or remove it yourself")
        if self.tables.checkpoint not in created:
            created.append(self.tables.checkpoint)
        out = local_path(self.tables.output)
        dirs = [self.tables.output] if is_dir_tables(self.tables) and out and not os.path.exists(out) else []
        os.makedirs(p, exist_ok=True)
        ident = uuid.uuid4().hex
        # the manifest first: a crash between the two leaves a manifest (what --reset removes) and
        # no identity, which the next run creates again over the same tables
        manifest.write(manifest.create(self.pipeline, self.tables.output, self.tables.layout(), created, dirs))
        self._write_identity({"id": ident, "output": self.tables.output, "pipeline": self.pipeline,
                              "ingest": mode, "inputs": self._input_ids()})
        return ident

    def _refuse_foreign_folder(self, targets: list[str]) -> None:
        """An output that is a folder of tables (S2J's ``--output DIR``) is refused when it is a
        file, or holds anything but what this output creates (its tables, its manifest, what a
        crashed first run's manifest lists): a new output never takes over someone's folder."""
        out = local_path(self.tables.output)
        if out is None or not is_dir_tables(self.tables) or not os.path.lexists(out):
            return
        if not os.path.isdir(out):
            raise CheckpointMismatch(f"--output {out} is a file: allowed a folder simjoin {self.pipeline} creates "
                                     "(a new path, or an empty folder)")
        if manifest.locate(out) is not None:  # the folder is this output's (claimed at its first run, kept by --reset)
            return
        mine = {os.path.normpath(local_path(t) or t) for t in targets}
        extra = sorted(e for e in os.listdir(out) if os.path.normpath(os.path.join(out, e)) not in mine)
        if extra:
            more = f" and {len(extra) - 1} more" if len(extra) > 1 else ""
            raise CheckpointMismatch(
                f"--output {out} holds {extra[0]!r}{more}, which simjoin {self.pipeline} did not create: allowed a "
                "new path or an empty folder (an output never takes over files it did not write)")

    def output_manifest(self) -> manifest.Manifest | None:
        """The output's manifest (``simjoin.runtime.manifest``); an output of an earlier release gets
        one from its identity file (written: the run holds the output's lock). None: not created yet."""
        out = local_path(self.tables.output)
        return None if out is None else manifest.of(out, self.tables.layout(), save=True)

    def _identity(self) -> dict[str, Any] | None:
        """The checkpoint's identity file (None when there is none)."""
        p = local_path(self.tables.checkpoint)
        f = os.path.join(p or "", IDENTITY_FILE)
        if not os.path.exists(f):
            return None
        with open(f) as fh:
            return dict(json.load(fh))

    def _write_identity(self, content: dict[str, Any]) -> None:
        p = local_path(self.tables.checkpoint)
        assert p is not None
        tmp = os.path.join(p, IDENTITY_FILE + ".tmp")
        with open(tmp, "w") as fh:
            fh.write(json.dumps(content))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, os.path.join(p, IDENTITY_FILE))

    def _input_ids(self) -> list[dict[str, Any]]:
        """Each input's Delta table id (``metaData.id``; None where it cannot be read here)."""
        return [{"path": src, "table_id": delta_source.table_id(loc) if (loc := local_path(src)) else None}
                for src in self.sources]

    def _spark_offsets(self) -> dict[str, dict[str, Any]]:
        """The streaming query's last offsets in the checkpoint, per input table id (the Delta
        source's ``reservoirId``): ``reservoirVersion``, ``index``, ``isStartingVersion``."""
        d = self._direct_dir("offsets")
        ids = [int(n) for n in os.listdir(d) if n.isdigit()] if os.path.isdir(d) else []
        if not ids:
            return {}
        out: dict[str, dict[str, Any]] = {}
        with open(os.path.join(d, str(max(ids)))) as fh:
            for line in fh:
                try:
                    o = json.loads(line)
                except ValueError:
                    continue
                if isinstance(o, dict) and "reservoirId" in o:
                    out[str(o["reservoirId"])] = o
        return out

    def check_inputs(self) -> None:
        """Refuse, with one line naming the input and ``--reset``, an input that is not the table
        this output read (its Delta table id changed: deleted and written again at the same path)
        or whose versions this output still has to read are gone from its log. Outputs created
        before the ids were recorded get them now."""
        ident = self._identity()
        if ident is None:
            return
        recorded = [g.get("table_id") for g in ident.get("inputs") or []]  # in the order of the sources
        direct = ident.get("ingest") == "direct"
        spark_offsets = {} if direct else self._spark_offsets()
        last = self._direct_last("commits") if direct else -1
        read = self._direct_ranges(last) if direct and last >= 0 else None
        for k, src in enumerate(self.sources):
            loc = local_path(src)
            if loc is None:
                continue  # not a local table: the streaming source checks its id itself
            cur = delta_source.table_id(loc)
            if cur is None:
                if delta_source.latest_version(loc) < 0:
                    raise CheckpointMismatch(f"input {src} holds no Delta table any more: allowed: restore it, "
                                             f"or {self._reset_hint()}")
                continue
            was = recorded[k] if k < len(recorded) else None
            if was is None and spark_offsets and cur not in spark_offsets:  # recorded by the query
                was = " or ".join(sorted(spark_offsets))
            if was is not None and was != cur:
                raise CheckpointMismatch(
                    f"input {src} is another Delta table (id {cur}) than the one this output read (id {was}): "
                    f"it was deleted and written again: {self._reset_hint()}")
            latest = delta_source.latest_version(loc, after=read[k].end if read is not None else None)
            if read is not None:  # direct: the next batch reads the commits after the last end
                end = read[k].end
                if latest < end:
                    raise CheckpointMismatch(
                        f"input {src} ends at version {latest}, before version {end} that this output read: "
                        f"its log was rewritten: {self._reset_hint()}")
                gone = next((v for v in range(end + 1, latest + 1) if not delta_source.commit_exists(loc, v)), None)
            elif cur in spark_offsets:  # the streaming query resumes at its offset's version
                o = spark_offsets[cur]
                v = int(o.get("reservoirVersion", -1))
                if latest < v - 1 or (o.get("isStartingVersion") and latest < v):
                    raise CheckpointMismatch(
                        f"input {src} ends at version {latest}, before version {v} that this output read: "
                        f"its log was rewritten: {self._reset_hint()}")
                # it resumes by reading the commits from its offset's version on (a snapshot: at it)
                gone = (None if o.get("isStartingVersion") else
                        next((w for w in range(v, latest + 1) if not delta_source.commit_exists(loc, w)), None))
            else:
                gone = None
            if gone is not None:
                raise CheckpointMismatch(
                    f"input {src}: the log of version {gone} is gone (cleaned up or vacuumed before this output "
                    f"read it): allowed: keep the input's log until every output read it, or {self._reset_hint()}")
        if "inputs" not in ident:
            self._write_identity({**ident, "inputs": self._input_ids()})

    def _reset_targets(self, legacy: bool = False) -> list[str]:
        """What ``--reset`` removes: the tables and folders the output's manifest says this pipeline
        created for it (``owned``; an earlier release's output migrated from its identity file);
        without one (``legacy``, or an output whose checkpoint is gone too), the tables the engine
        names beside the output (for a directory output, its
        ``_`` tables and the run's tables in it, never the directory)."""
        m = None if legacy else self.output_manifest()
        if m is not None:
            return list(m.owned)
        dir_out = is_dir_tables(self.tables)
        base = [p for k, p in self.tables.paths().items() if not (dir_out and k == "output")]
        extra = [p for p in self.owned if p not in base and not any(path_inside(p, b) for b in base)
                 and not (dir_out and same_path(p, self.tables.output))]
        return base + extra

    def _refuse_inputs_under(self, targets: Sequence[str], why: str) -> None:
        for src in self.sources:
            for t in targets:
                if path_inside(src, t):
                    what = "is" if same_path(src, t) else "lives under"
                    raise ValueError(f"input {src} {what} {t}, {why}: allowed: inputs outside "
                                     f"{self.tables.output} and its tables (move the input, or choose another "
                                     "--output)")

    def own(self, paths: Sequence[str]) -> None:
        """Record in the output's manifest the tables this pipeline is about to create (``--reset``
        removes exactly what is recorded)."""
        m = self.output_manifest()
        if m is None:
            return
        new = [p for p in paths if not m.owns(p) and (loc := local_path(p)) is not None and not os.path.exists(loc)]
        if new:
            manifest.write(m.with_owned(new))

    def _reset_hint(self) -> str:
        return (f"run again with --reset to clear {self.tables.output} with its state, work, stats, "
                "quarantine and checkpoint together (every input is then joined again)")

    def progress(self, fresh: bool = False) -> Progress:
        """What the committed units say. Read once per engine (a run's stages share their
        unit's engine) and again after :meth:`publish` or :meth:`reset`; ``fresh`` rereads."""
        if self._progress is None or fresh:
            self._progress = self._read_progress()
        return self._progress

    def _read_progress(self) -> Progress:
        rows = self._progress_rows()
        for r in rows:  # deltalake reads an instant as aware UTC, Spark as naive UTC: one form
            if r["max_ts"] is not None and r["max_ts"].tzinfo is not None:
                r["max_ts"] = r["max_ts"].astimezone(UTC).replace(tzinfo=None)
        if not rows:
            return Progress(-1, None, {}, None, None, {}, self.allowed_lateness_s)
        last = max(rows, key=lambda r: r["unit"])
        marks: dict[int, dt.datetime] = {}
        for r in rows:
            if r["max_ts"] is not None:
                s = int(r["side"])
                marks[s] = max(marks[s], r["max_ts"]) if s in marks else r["max_ts"]
        wm = min(marks.values()) if len(marks) == len(self.sources) else None
        return Progress(int(last["unit"]), wm, marks, last["checkpoint_id"], last["fingerprint"],
                        json.loads(last["meta"] or "{}"), self.allowed_lateness_s)

    def _progress_rows(self) -> list[dict[str, Any]]:
        """The rows :meth:`_read_progress` needs: the last unit's, and per side the row with the
        largest ``max_ts``. A local table is reduced in Arrow (no Python per unit: the cost stays
        flat over a long run, with maintenance keeping the files few); others read every row."""
        local = local_path(self.tables.progress)
        if local is None or not os.path.isdir(os.path.join(local, "_delta_log")):
            return delta.small_rows(self.spark, self.tables.progress)
        try:
            from simjoin.io.delta_files import open_table

            t = open_table(local).to_pyarrow_table()
        except Exception:  # a reader feature deltalake lacks: Spark reads it
            return delta.small_rows(self.spark, self.tables.progress)
        if t.num_rows == 0:
            return []
        last = t.filter(pc.equal(t.column("unit"), pc.max(t.column("unit"))))
        best = t.group_by("side").aggregate([("max_ts", "max")])
        out = last.to_pylist()
        for side, mt in zip(best.column("side").to_pylist(), best.column("max_ts_max").to_pylist(), strict=True):
            if mt is not None:
                out.append({**out[0], "unit": -1, "side": side, "max_ts": mt})  # a side's largest max_ts
        return out  # type: ignore[no-any-return]

    def verify(self, prog: Progress | None = None) -> str:
        """The checkpoint's identity, after checking it and the config against the state.
        Creates the identity of a fresh output."""
        prog = prog if prog is not None else self.progress()
        ident = self.checkpoint_id()
        if prog.checkpoint_id is not None:
            if ident is None:
                raise CheckpointMismatch(
                    f"checkpoint {self.tables.checkpoint} is missing, but {self.tables.output} holds "
                    f"{prog.last_unit + 1} committed units: {self._reset_hint()}")
            if ident != prog.checkpoint_id:
                raise CheckpointMismatch(
                    f"checkpoint {self.tables.checkpoint} ({ident}) is not the one {self.tables.output} was "
                    f"written with ({prog.checkpoint_id}): {self._reset_hint()}")
            if prog.fingerprint != self.fingerprint:
                raise CheckpointMismatch(
                    f"{self.tables.output} holds state of another configuration (the output's -> this run's: "
                    f"{fingerprint_changes(prog.fingerprint or '', self.fingerprint)}): use the same settings, a new "
                    f"--output, or {self._reset_hint()}")
            return ident
        if ident is None:
            if self._checkpoint_consumed():
                raise CheckpointMismatch(f"checkpoint {self.tables.checkpoint} has no identity: "
                                         f"{self._reset_hint()}")
            if delta.table_exists(self.spark, self.tables.output):
                raise CheckpointMismatch(
                    f"{self.tables.output} already holds a table but no stream state: {self._reset_hint()}")
            return self._new_checkpoint_id()
        kept = [self.tables.records] + ([self.tables.work("landing")] if self.ingest_mode() == "landing" else [])
        if self._checkpoint_consumed() and not any(delta.table_exists(self.spark, t) for t in kept):
            raise CheckpointMismatch(
                f"checkpoint {self.tables.checkpoint} has consumed input that {self.tables.output} never "
                f"committed: {self._reset_hint()}")
        return ident

    def write_id(self, piece: str, checkpoint_id: str) -> str:
        return f"{self.pipeline}/{piece}/{checkpoint_id}"

    def reset(self) -> list[str]:
        """Remove exactly the tables and folders this pipeline created for the output, as its
        identity file lists them (:meth:`_reset_targets`); a folder it made to hold them (an S2J
        output directory) only once it is empty. Refused, before anything is removed, when an
        input is one of them or lives under one."""
        removed = []
        self._progress = None
        m = self.output_manifest()
        targets = self._reset_targets()
        for p in targets:
            if local_path(p) is None:
                raise ValueError(f"--reset: {p} is not a local path; remove it with your storage tools")
        self._refuse_inputs_under(targets, "which --reset would remove")
        # the identity file goes last: a reset that fails half-way is done again from the same list
        ck = self.tables.checkpoint
        for p in sorted(targets, key=lambda t: t == ck):
            loc = local_path(p)
            assert loc is not None
            if os.path.isdir(loc):
                shutil.rmtree(loc)
                removed.append(p)
            elif os.path.exists(loc):
                os.remove(loc)
                removed.append(p)
        if m is not None:  # the manifest last: a reset that fails half-way is done again from it
            manifest.remove(m)
            removed.append(m.path)
        for d in m.dirs if m is not None else []:
            loc = local_path(str(d))
            if loc is not None and os.path.isdir(loc) and not os.listdir(loc):
                os.rmdir(loc)
                removed.append(str(d))
            elif loc is not None and os.path.isdir(loc) and m is not None:  # a user's files there stay, so does it
                manifest.write(manifest.create(self.pipeline, self.tables.output, self.tables.layout(), [], m.dirs))
        log.info("%s: reset removed %s", self.pipeline, ", ".join(removed) or "nothing")
        return removed

    def open_unit(self) -> Unit | None:
        """The staged unit not yet committed, checked against the checkpoint and the config. The
        check reads a local records table with ``deltalake`` (no Spark job); the records are a
        DataFrame."""
        try:
            head = self.open_unit_table(columns=[])
        except delta.NotLocal:  # checked on Spark below
            pass
        else:
            if head is None:
                return None
            recs = delta.read_table(self.spark, self.tables.records).where(F.col("unit") == head.unit)
            return Unit(head.unit, recs.drop("fingerprint", "checkpoint_id"), head.checkpoint_id, head.meta)
        prog = self.progress()
        ident = self.verify(prog)
        if not delta.table_exists(self.spark, self.tables.records):
            return None
        recs = delta.read_table(self.spark, self.tables.records).where(F.col("unit") > prog.last_unit)
        row = recs.agg(F.min("unit").alias("u"), F.max("unit").alias("v"),
                       F.collect_set("fingerprint").alias("fp"),
                       F.collect_set("checkpoint_id").alias("ck"), F.first("meta").alias("meta")).first()
        if row is None or row["u"] is None:
            return None
        if row["u"] != row["v"]:
            raise RuntimeError(f"{self.tables.records} holds several open units {row['u']}..{row['v']}: "
                               f"{self._reset_hint()}")
        if list(row["fp"]) != [self.fingerprint]:
            raise CheckpointMismatch(
                f"unit {row['u']} was staged with another configuration (the unit's -> this run's: "
                f"{'; '.join(fingerprint_changes(fp, self.fingerprint) for fp in row['fp'])}): rerun with the same "
                f"settings, or {self._reset_hint()}")
        if list(row["ck"]) != [ident]:
            raise CheckpointMismatch(f"unit {row['u']} was staged under another checkpoint: {self._reset_hint()}")
        return Unit(int(row["u"]), recs.drop("fingerprint", "checkpoint_id"), ident, row["meta"])

    def open_unit_table(self, columns: Sequence[str] | None = None) -> Unit | None:
        """:meth:`open_unit` read in this process with ``deltalake`` (no Spark job): the unit's
        records as a pyarrow Table. Raises ``delta.NotLocal`` when the records table is not local or
        deltalake cannot read it (the caller then uses :meth:`open_unit`)."""
        prog = self.progress()
        ident = self.verify(prog)
        local = local_path(self.tables.records)
        if local is None or not os.path.isdir(os.path.join(local, "_delta_log")):
            if local is not None and not os.path.exists(local):
                return None
            raise delta.NotLocal(f"{self.tables.records} is not a local Delta table")
        try:
            from simjoin.io.delta_files import open_table

            t = open_table(local).to_pyarrow_table(columns=None if columns is None else [
                *columns, "unit", "fingerprint", "checkpoint_id", "meta"],
                filters=[("unit", ">", int(prog.last_unit))])
        except Exception as e:  # a reader feature deltalake lacks
            raise delta.NotLocal(f"deltalake cannot read {self.tables.records}: {e}") from e
        if t.num_rows == 0:
            return None
        lo, hi = pc.min_max(t.column("unit")).values()
        if lo.as_py() != hi.as_py():
            raise RuntimeError(f"{self.tables.records} holds several open units {lo}..{hi}: {self._reset_hint()}")
        fps = pc.unique(t.column("fingerprint")).to_pylist()
        if fps != [self.fingerprint]:
            raise CheckpointMismatch(
                f"unit {lo} was staged with another configuration (the unit's -> this run's: "
                f"{'; '.join(fingerprint_changes(str(fp), self.fingerprint) for fp in fps)}): rerun with the same "
                f"settings, or {self._reset_hint()}")
        if pc.unique(t.column("checkpoint_id")).to_pylist() != [ident]:
            raise CheckpointMismatch(f"unit {lo} was staged under another checkpoint: {self._reset_hint()}")
        meta = t.column("meta")[0].as_py()
        return Unit(int(lo.as_py()), t.drop_columns(["fingerprint", "checkpoint_id"]), ident, meta)

    def local_tables(self) -> bool:
        """Whether a batch may be staged through the driver (``_stage_local``): the records and
        quarantine tables are local, and ``SIMJOIN_LOCAL_INGEST`` is not 0."""
        if os.environ.get("SIMJOIN_LOCAL_INGEST", "1") == "0":
            return False
        return local_path(self.tables.records) is not None and local_path(self.tables.quarantine) is not None

    def _direct_dir(self, kind: str) -> str:
        base = local_path(self.tables.checkpoint)
        assert base is not None
        return os.path.join(base, kind)

    def _direct_last(self, kind: str) -> int:
        d = self._direct_dir(kind)
        ids = [int(n) for n in os.listdir(d) if n.isdigit()] if os.path.isdir(d) else []
        return max(ids, default=-1)

    def _direct_ranges(self, b: int) -> list[delta_source.Range]:
        with open(os.path.join(self._direct_dir("offsets"), str(b))) as fh:
            got = json.load(fh)["sources"]
        if [g["path"] for g in got] != list(self.sources):
            raise CheckpointMismatch(f"checkpoint {self.tables.checkpoint} read the inputs {[g['path'] for g in got]}, "
                                     f"not {list(self.sources)}: {self._reset_hint()}")
        return [delta_source.Range(int(g["start"]), int(g["end"])) for g in got]
