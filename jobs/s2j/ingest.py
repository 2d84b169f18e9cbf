"""S2J stage 1, ingest - the input adapter: the engine reads what arrived in the stream(s) since
the last run and applies the operator's declared input (:func:`spec`, ``simjoin.quality.rows``)
to each micro-batch.

Pre-projection: only the columns some task reads (and the punctuation column) are staged. Rows go
to ``DIR/_quarantine`` with their reason when a column the row's side needs is null, NaN or
infinite, when the punctuation value is null, when its (side, id) repeats - inside the batch,
earlier in this unit, or among the window's live blocks - and when it is late: dated more than
``--allowed-lateness`` before the largest ``ts`` its stream already committed (it could meet tuples
the window has already dropped); a row within it is joined exactly, as if it had arrived in order.
Pre-selection (the tasks' one-role predicates) happens in the join stage, on the tuples kept.
Task columns are staged in their own type (``simjoin.spark.exact_types``): integers as long,
compared exactly; an integer compared with a float column as double, its rows of magnitude 2^53
or more quarantined.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.s2j.common import S2JRun, dead_mask
from simjoin.core.exact import ExactTypes
from simjoin.pipeline.context import StageContext
from simjoin.quality.rows import Bounded, InputSpec, Late, Needed, UniqueIds
from simjoin.runtime.event_time import BatchInfo


def types(ctx: StageContext) -> ExactTypes:
    """The staged type of every task column (exact comparison in its own type)."""
    p = ctx.params
    return ctx.input_types([p.columns(s) for s in p.sides],
                           [(t.left, t.right) for task in p.tasks for t in task.thetas])


def spec(run: S2JRun, exact: ExactTypes) -> InputSpec:
    """The operator's input: the columns some task reads (pre-projection) and the punctuation column."""
    p = run.params()
    punct = run.cfg.punctuation
    cols = sorted({c for s in p.sides for c in p.columns(s)})
    rules: list[Any] = [Needed(c, (s,)) for s in sorted(p.sides) for c in p.columns(s)]
    rules += [Bounded(c, k, b, why) for k, c, b, why in exact.bounds()]
    if punct:
        rules.append(Needed(punct, label=f"{punct} (the punctuation column)", finite=False))
    rules += [UniqueIds(("ts", *cols)), Late()]
    extra = (punct,) if punct else ()
    payload: tuple[dict[str, Any], ...] = tuple(
        {**{c: "numeric" for c in p.columns(s)}, **({punct: "boolean"} if punct else {})} for s in p.sides)
    return InputSpec(payload=payload, what="<numeric columns of the tasks>", rules=tuple(rules),
                     staged=("id", "ts", "side", *cols, *extra), casts=exact.casts)


def live_ids(ctx: StageContext) -> Any:
    """(side, id) of the tuples in live blocks (``dead_mask``'s bound), read with deltalake, or by
    Spark when the blocks are not local."""
    run: S2JRun = ctx.run

    def live(info: BatchInfo) -> Any:
        p = run.params()
        t = ctx.read(run.blocks, [("unit", "<", int(info.unit))], ["side", "ids", "ts_max"])
        if t is None or not t.num_rows:
            return None
        t = t.filter(pa.array(~dead_mask(p, info.progress.time(), t)))
        ids = t.column("ids").combine_chunks()
        rows = pc.list_parent_indices(ids)
        return pa.table({"side": pc.take(t.column("side"), rows), "id": pc.list_flatten(ids)})

    return live


def run(ctx: StageContext) -> dict[str, Any]:
    """Stage everything that arrived since the last run as one unit (or resume the open one)."""
    return ctx.stage_unit(spec(ctx.run, types(ctx)), live_ids(ctx))
