"""S2J stage 4, publish (after the gate) - materialisation (Section 3.1): the micro-batch's pairs
become a snapshot, or wait in the buffer for one; then shed tuples -> ``DIR/_shed``, stats ->
``DIR/_stats``, new blocks -> ``DIR/_state/blocks``, and the engine commits the unit with the
workers, the scaling streaks and the snapshot count. Blocks no future tuple can reach are dropped
every few units (readers skip them as soon as they are dead), and buffered pairs already in a
snapshot afterwards.

**Snapshots.** Every ``--snapshot-every`` micro-batches (default: every one; with
``--punctuation`` alone, none), and in a micro-batch that holds a true ``--punctuation`` value,
each task's table gets one Delta commit with every pair found since the previous snapshot. The
commit's ``userMetadata`` is ``{"snapshot": N, "unit": U}``, which ``simjoin s2j query
--snapshot N`` time-travels to. Every append is idempotent per (checkpoint, unit), so a retried
publish neither loses nor repeats a pair.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.s2j.common import S2JRun
from jobs.s2j.gate import staged_pairs
from simjoin.pipeline.context import StageContext
from simjoin.pipeline.stream import rows_where


def snapshot_due(u: Any, run: S2JRun, meta: dict[str, Any]) -> bool:
    c = run.cfg
    last = int(meta.get("last_snapshot_unit", -1))
    every = c.snapshot_every if c.snapshot_every is not None or c.punctuation else 1
    if every is not None and u.id - last >= int(every):
        return True
    if c.punctuation:
        return bool(pc.any(u.records.column(c.punctuation)).as_py())
    return False


SNAPSHOT_INDEX_SCHEMA = "snapshot long, unit long, task string, version long"


def snapshot_versions(path: str, tag: dict[str, int]) -> int | None:
    """The version of the task table at ``path`` whose commit carries the snapshot ``tag``."""
    from deltalake import DeltaTable

    for h in DeltaTable(path).history(64):
        try:
            got = json.loads(h.get("userMetadata") or "null")
        except ValueError:
            continue
        if got == tag:
            return int(h["version"])
    return None


def index_snapshot(run_: S2JRun, u: Any, snap: int) -> None:
    """The snapshot as data: one row per task (snapshot, unit, task, the version its commit made) in
    ``DIR/_snapshots``, so ``simjoin s2j query`` finds every snapshot after the commits' log is
    cleaned up, and tells one older than the retention from one that never was. Once per unit (its
    ``txn``): a retried publish writes it once; one lost to a crash right after the publish is
    still in the log, which the query reads too."""
    tag = {"snapshot": snap, "unit": int(u.id)}
    rows = []
    for t in run_.tasks:
        v = snapshot_versions(run_.task_table(t.name), tag)
        if v is not None:
            rows.append((snap, int(u.id), t.name, v))
    if rows:
        u.own([run_.tables.snapshots])  # recorded before it is created: --reset removes it
        u.append_once("snapshots", rows, SNAPSHOT_INDEX_SCHEMA, run_.tables.snapshots)


def _task_pairs(found: pa.Table, task: int) -> pa.Table:
    return rows_where(found, "task", task, ["left_id", "right_id", "ts"]).combine_chunks()


def run(ctx: StageContext) -> dict[str, Any]:
    run_: S2JRun = ctx.run
    u = ctx.unit
    meta = u.progress().meta
    dec = u.work("decision").to_pylist()[0]
    pairs = staged_pairs(run_, u)
    due = snapshot_due(u, run_, meta)
    snaps = int(meta.get("snapshots", 0))
    last = int(meta.get("last_snapshot_unit", -1))
    pieces: list[tuple[str, Any, str]] = []
    options: dict[str, dict[str, str]] = {}
    if due:
        found = pairs
        held = u.read_state(run_.buffer, [("unit", ">", last), ("unit", "<", int(u.id))],
                            ["task", "left_id", "right_id", "ts"])
        if held is not None and held.num_rows:
            found = pa.concat_tables([pairs, held.cast(pairs.schema)])
        tag = json.dumps({"snapshot": snaps, "unit": u.id})
        for i, t in enumerate(run_.tasks):
            piece = f"task:{t.name}"
            pieces.append((piece, _task_pairs(found, i), run_.task_table(t.name)))
            options[piece] = {"userMetadata": tag}
    else:
        pieces.append(("buffer", pairs.append_column("unit", pa.array(np.full(pairs.num_rows, u.id, np.int64))),
                       run_.buffer))
    if int(dec["shed"]) or not u.table_exists(run_.tables.shed):  # created, empty, by the first unit
        pieces.append(("shed", u.work("shed", keep_unit=True), run_.tables.shed))
    pieces += [("stats", u.work("stats", keep_unit=True), run_.tables.stats),
               ("blocks", u.work("blocks", keep_unit=True), run_.blocks)]
    new_meta = {"workers": int(dec["workers"]), "high": int(dec["high"]), "low": int(dec["low"]),
                "next_block": int(dec["next_block"]), "snapshots": snaps + (1 if due else 0),
                "last_snapshot_unit": u.id if due else last}
    res = u.publish(pieces, meta=new_meta, options=options)
    if due:
        index_snapshot(run_, u, snaps)
    # the blocks no tuple can reach go by the run's declared expiry (S2JRun.expiry), in publish;
    # a snapshot consumed the buffered pairs of every unit up to this one
    if due and u.table_exists(run_.buffer):
        u.expire(run_.buffer, [[("unit", "<=", u.id)]])
    tasks = [n for k, n in res["published"].items() if k.startswith("task:")]  # pairs of a snapshot, or 0
    return {**res, "snapshot": snaps if due else None,  # type: ignore[no-any-return]
            "rows_out": None if None in tasks else sum(tasks)}
