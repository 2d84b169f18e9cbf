"""S2J stage 3, quality gate (Great Expectations): the pair contract on the micro-batch's pairs
of every task - schema, no null, no pair twice within a task, a self-join never pairs a tuple with
itself. A pair of an earlier micro-batch cannot repeat here: every pair holds a tuple of this one,
and a live id is never admitted twice (ingest). Nothing is published unless it passes."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.s2j.common import S2JRun
from simjoin.contracts import RowKind
from simjoin.pipeline.context import StageContext
from simjoin.quality.gates import Expect, pairs_expectations, run_suite


def staged_pairs(run: S2JRun, u: Any) -> Any:
    """The micro-batch's pairs as a pyarrow Table: task index, left_id, right_id, ts. The gate
    checks them and publish writes one table per task (the same Table when both run in this
    process)."""
    key = f"s2j_pairs_{u.id}"
    return run.frame(key, lambda: run.keep(key, _pairs(u)))


def _pairs(u: Any) -> Any:
    j = u.rows("joined", RowKind.PAIR, ["task", "left_id", "right_id", "ts"])
    return j.set_column(3, "ts", j.column("ts").cast(pa.timestamp("us", tz="UTC")))


def run(ctx: StageContext) -> dict[str, Any]:
    run_: S2JRun = ctx.run
    u = ctx.unit
    pairs = staged_pairs(run_, u)
    ex = [*pairs_expectations(None, None, None, False, window_col="task"),
          Expect.of("ExpectColumnValuesToNotBeNull", column="ts"),
          Expect.of("ExpectColumnValuesToBeBetween", column="task", min_value=0, max_value=len(run_.tasks) - 1)]
    if run_.self_join:
        pairs = pairs.append_column("_self", pc.equal(pairs.column("left_id"), pairs.column("right_id")))
        ex.append(Expect.of("ExpectColumnValuesToNotBeInSet", column="_self", value_set=[True]))
    res = run_suite(pairs, "s2j_pairs", ex)
    return {"unit": u.id, "expectations": res.evaluated, "success": res.success}
