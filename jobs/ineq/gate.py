"""Inequality join stage 4, quality gate (Great Expectations): the pair contract on the unit's
pairs - schema, no null, no pair twice, a self-join never pairs a tuple with itself. A pair of an
earlier unit cannot repeat here: every pair holds a tuple of this unit, and a live id is never
admitted twice (ingest). Nothing is published unless it passes."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.ineq.common import IneqRun
from simjoin.contracts import RowKind
from simjoin.pipeline.context import StageContext
from simjoin.quality.gates import Expect, pairs_expectations, run_suite


def staged_pairs(u: Any) -> Any:
    """The unit's pairs as the output holds them, a pyarrow Table."""
    t = u.rows("probed", RowKind.PAIR, ["left_id", "right_id", "ts"])
    return t.set_column(2, "ts", t.column("ts").cast(pa.timestamp("us", tz="UTC")))


def run(ctx: StageContext) -> dict[str, Any]:
    run_: IneqRun = ctx.run
    u = ctx.unit
    pairs = staged_pairs(u)
    ex = [*pairs_expectations(None, None, None, False), Expect.of("ExpectColumnValuesToNotBeNull", column="ts")]
    if run_.self_join:  # two streams may share ids; one stream never pairs a tuple with itself
        pairs = pairs.append_column("_self", pc.equal(pairs.column("left_id"), pairs.column("right_id")))
        ex.append(Expect.of("ExpectColumnValuesToNotBeInSet", column="_self", value_set=[True]))
    res = run_suite(pairs, "ineq_pairs", ex)
    return {"unit": u.id, "expectations": res.evaluated, "success": res.success}
