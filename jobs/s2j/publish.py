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

from jobs.s2j.common import EXPIRE_EVERY, S2JRun, dead_blocks
from jobs.s2j.gate import staged_pairs
from simjoin.pipeline.stream import rows_where
from simjoin.spark import delta


def snapshot_due(u: Any, run: S2JRun, meta: dict[str, Any]) -> bool:
    c = run.cfg
    last = int(meta.get("last_snapshot_unit", -1))
    every = c.snapshot_every if c.snapshot_every is not None or c.punctuation else 1
    if every is not None and u.id - last >= int(every):
        return True
    if c.punctuation:
        return bool(pc.any(u.records.column(c.punctuation)).as_py())
    return False


def _task_pairs(found: pa.Table, task: int) -> pa.Table:
    return rows_where(found, "task", task, ["left_id", "right_id", "ts"]).combine_chunks()


def run(spark: Any, run_: S2JRun) -> dict[str, Any]:
    u = run_.open_unit(spark)
    if u is None:
        return {"unit": None}
    meta = u.engine.progress().meta
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
    if int(dec["shed"]):
        pieces.append(("shed", u.work("shed", keep_unit=True), run_.tables.shed))
    pieces += [("stats", u.work("stats", keep_unit=True), run_.tables.stats),
               ("blocks", u.work("blocks", keep_unit=True), run_.blocks)]
    new_meta = {"workers": int(dec["workers"]), "high": int(dec["high"]), "low": int(dec["low"]),
                "next_block": int(dec["next_block"]), "snapshots": snaps + (1 if due else 0),
                "last_snapshot_unit": u.id if due else last}
    res = u.engine.publish(u.unit, pieces, meta=new_meta, options=options)
    # blocks no tuple that can still arrive reaches: readers skip them at once, and a DELETE
    # (a second or two) drops them every few units
    if u.id % EXPIRE_EVERY == EXPIRE_EVERY - 1:
        dead = dead_blocks(run_.params(), u.engine.progress().max_ts)
        if dead:
            u.engine.delete(run_.blocks, dead)
    if due and delta.table_exists(spark, run_.buffer):
        u.engine.delete(run_.buffer, f"unit <= {u.id}")
    return {**res, "snapshot": snaps if due else None}  # type: ignore[no-any-return]
