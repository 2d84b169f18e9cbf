"""Streaming HyperCube stage 4, quality gate (Great Expectations): the unit's output - pairs: the
pair contract (schema, no null, no pair twice, a key and a ts on each); counts: one positive
count per key. Nothing is published unless it passes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.hypercube.common import HyperCubeRun
from simjoin.contracts import RowKind
from simjoin.pipeline.context import StageContext
from simjoin.quality.gates import Expect, columns_expectations, pairs_expectations, run_suite


def staged_output(run: HyperCubeRun, u: Any) -> Any:
    """The unit's rows as the output table holds them, a pyarrow Table."""
    j = u.work("joined")
    kind = j.column("kind")
    if run.cfg.count_only:
        c = j.filter(pc.equal(kind, int(RowKind.COUNTER))).group_by("k").aggregate([("pairs", "sum")])
        return pa.table({"k": c.column("k"), "pairs": c.column("pairs_sum").cast(pa.int64()),
                         "batch_id": pa.array(np.full(c.num_rows, u.id, np.int64))})
    pr = u.rows("joined", RowKind.PAIR, ["left_id", "right_id", "k", "ts_us"])
    return pr.set_column(3, "ts", pr.column("ts_us").cast(pa.timestamp("us", tz="UTC")))


def run(ctx: StageContext) -> dict[str, Any]:
    run_: HyperCubeRun = ctx.run
    u = ctx.unit
    out = staged_output(run_, u)
    if run_.cfg.count_only:
        ex = [*columns_expectations({"k": "LongType", "pairs": "LongType", "batch_id": "LongType"},
                                    not_null=["k", "pairs", "batch_id"]),
              Expect.of("ExpectColumnValuesToBeBetween", column="pairs", min_value=1),
              Expect.of("ExpectColumnValuesToBeUnique", column="k")]
        name = "hypercube_counts"
    else:
        ex = [*pairs_expectations(None, None, None, False),
              *columns_expectations({"k": "LongType"}, not_null=["k", "ts"])]
        name = "hypercube_pairs"
    res = run_suite(out, name, ex)
    return {"unit": u.id, "expectations": res.evaluated, "success": res.success}
