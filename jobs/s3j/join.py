"""S3J stage 4, similarity computation (Section 7.7): rows routed by worker, joined in tasks.

New members are joined with each other and with the earlier members of the same worksets
kept in the join state (so a window spanning units reports each pair exactly once). Worksets
run where the rebalance stage's latest assignment puts them; a split workset's rows are
replicated per part (``route_by_assignment``). Pairs go to
the output table's directory as Parquet files no commit names yet (one per task, listed in
``<output>_work/joined``; the pairs themselves in ``joined`` when the output is not a local
table), the per-(window, worker) and per-workset counters to ``counters``; ``publish`` commits
the files to the output once the gate has passed. Both executors run the same task,
``join_task_arrow``, per worker (``OpenUnit.map_tasks``: a thread pool, or one Spark job).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.s3j.common import S3JRun, S3JUnit, assignment_arrow, window_state_arrow
from jobs.s3j.gate import PAIR_ARROW
from simjoin.contracts import Role, RowKind
from simjoin.io import tables as delta
from simjoin.operators.metric import JOIN_ARROW, join_counters_arrow, join_task_arrow, route_by_assignment_arrow
from simjoin.pipeline.context import StageContext

MEMBER_COLS = ["w", "we", "partition", "workset_id", "worker", "side", "id", "vector", "role", "is_new"]


def run(ctx: StageContext) -> dict[str, Any]:
    run_: S3JRun = ctx.run
    u = ctx.unit
    return _join(run_, u)


def _join_task(t: pa.Table, p: Any, target: Any) -> list[pa.RecordBatch]:
    return join_task_arrow(t, p, target).to_batches()  # type: ignore[no-any-return]


def _np(t: pa.Table, name: str, dtype: Any) -> np.ndarray:
    return np.asarray(t.column(name).to_numpy(zero_copy_only=False), dtype)


def _join(run_: S3JRun, u: S3JUnit) -> dict[str, Any]:
    """The unit's members and the earlier members of their worksets, one task per worker."""
    members = u.work("members")
    new = members.filter(pa.array(_np(members, "kind", np.int8) == int(RowKind.MEMBER))).select(MEMBER_COLS)
    rows = new
    js = window_state_arrow(run_, u, pc.unique(new.column("w")))
    if js is not None:  # each workset's earlier rows go where its new rows go (its worker now)
        old = js.filter(pa.array(_np(js, "role", np.int8) != int(Role.BUFFER)))
        keys = (new.filter(new.column("is_new")).select(["w", "partition", "workset_id", "worker"])
                .group_by(["w", "partition", "workset_id", "worker"]).aggregate([]))
        at = pa.table({"w": old.column("w"), "partition": old.column("partition").cast(pa.int32()),
                       "workset_id": old.column("workset_id").cast(pa.int64()),
                       "_row": pa.array(np.arange(old.num_rows, dtype=np.int64))})
        hit = at.join(keys, ["w", "partition", "workset_id"], join_type="inner").sort_by("_row")
        o = old.take(hit.column("_row"))
        cols = {**{c: o.column(c) for c in MEMBER_COLS if c in o.column_names}, "worker": hit.column("worker"),
                "is_new": pa.array(np.zeros(o.num_rows, bool))}
        rows = pa.concat_tables([new, pa.Table.from_arrays([cols[f.name].cast(f.type) for f in new.schema],
                                                           schema=new.schema)])
    routed = route_by_assignment_arrow(rows, assignment_arrow(run_, u))
    p, target = run_.params(u.dim), delta.file_target(run_.output, PAIR_ARROW)
    joined = u.map_tasks(routed, _np(routed, "worker", np.int64),
                         functools.partial(_join_task, p=p, target=target), JOIN_ARROW, "s3j-join")
    counters = join_counters_arrow(joined)
    stats = counters.filter(pa.array(_np(counters, "kind", np.int8) == int(RowKind.STATS)))
    return {"unit": u.id, "pairs": int(pc.sum(stats.column("results")).as_py() or 0),
            "work": {"joined": joined, "counters": counters}}
