"""Inequality join stage 1, ingest: the engine reads what arrived in the stream(s) since the last
run and applies the join's declared input (:func:`spec`, ``simjoin.quality.rows``) to each
micro-batch.

The engine quarantines null or unreadable ``id``/``ts`` and future rows. By the declared rules,
rows go to
``<output>_quarantine`` with their reason when a predicate column the row's side needs is null,
NaN or infinite, when its (side, id) repeats - inside the batch, earlier in this unit, or among
the live tuples of the window - and, for time windows, when it is late: dated more than the
allowed lateness (``--allowed-lateness``, default 0s) before the largest ``ts`` its stream already
committed (it could meet tuples the window has already expired). A row within the lateness is
staged and joined exactly, as if it had arrived in order (docs/operations.md, "Lateness").
Good rows are staged as the new unit. Predicate columns are staged in their own type
(``simjoin.spark.exact_types``): integers as long, compared exactly; an integer compared with a
float column as double, its rows of magnitude 2^53 or more quarantined.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from jobs.ineq.common import IneqRun, tuple_live
from jobs.ineq.probe import live_tuples, state_before
from simjoin.core.exact import ExactTypes
from simjoin.pipeline.context import StageContext
from simjoin.quality.rows import Bounded, InputSpec, Late, Needed, UniqueIds
from simjoin.runtime.event_time import BatchInfo


def types(ctx: StageContext) -> ExactTypes:
    """The staged type of every predicate column (exact comparison in its own type)."""
    p = ctx.params
    return ctx.input_types([p.columns(s) for s in p.sides],
                       [(pr.left, pr.right) for pr in p.query.predicates])


def spec(run: IneqRun, exact: ExactTypes) -> InputSpec:
    """The join's input: each side's numeric predicate columns, in their exact staged types."""
    p = run.params()
    cols = sorted({c for s in p.sides for c in p.columns(s)})
    rules: list[Any] = [Needed(c, (s,)) for s in sorted(p.sides) for c in p.columns(s)]
    rules += [Bounded(c, k, b, why) for k, c, b, why in exact.bounds()]
    rules.append(UniqueIds(("ts", *cols)))
    if p.window.time_us is not None:
        rules.append(Late())
    return InputSpec(payload=tuple({c: "numeric" for c in p.columns(s)} for s in p.sides),
                     what="<numeric predicate columns>", rules=tuple(rules), staged=("id", "ts", "side", *cols),
                     casts=exact.casts)


def live_ids(ctx: StageContext) -> Any:
    """(side, id) of the live tuples: those the state holds (its PO-Join batches and mutable parts,
    read as the probe reads them, and kept for it in this process), less the expired ones that
    linger until their batch expires (the exact bound is applied here). Read with deltalake, or by
    Spark when they are not local."""
    run: IneqRun = ctx.run

    def live(info: BatchInfo) -> Any:
        p = run.params()
        t = live_tuples(state_before(run, int(info.unit),
                                     ctx.read))
        if t is None or not t.num_rows:
            return None
        keep = np.zeros(t.num_rows, bool)
        side = np.asarray(t.column("side").to_numpy(zero_copy_only=False), np.int64)
        for s in p.sides:
            keep |= (side == s) & tuple_live(p, info.progress, s, t)
        return t.filter(pa.array(keep)).select(["side", "id"])

    return live


def run(ctx: StageContext) -> dict[str, Any]:
    """Stage everything that arrived since the last run as one unit (or resume the open one)."""
    return ctx.stage_unit(spec(ctx.run, types(ctx)), live_ids(ctx))
