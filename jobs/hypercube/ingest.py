"""Streaming HyperCube stage 1, ingest: the engine reads what arrived in both streams since the
last run and applies the join's declared input (:func:`spec`, ``simjoin.quality.rows``) to each
micro-batch.

The engine quarantines null or unreadable ``id``/``ts`` and future rows. By the declared rules,
rows go to
``<output>_quarantine`` with their reason when their key is null, when their (side, id) repeats
(inside the batch, earlier in this unit, or among the held tuples), and with a window when they
are late (dated more than ``--allowed-lateness`` before the largest ``ts`` their stream already
committed; a row within it is joined exactly, as if it had arrived in order). The key column of each
side (``--key`` / ``--right-key``, an integer type) becomes ``k``.
"""

from __future__ import annotations

from typing import Any

from jobs.hypercube.common import HyperCubeRun, held
from simjoin.pipeline.context import StageContext
from simjoin.quality.rows import Derived, InputSpec, Late, Needed, UniqueIds
from simjoin.runtime.event_time import BatchInfo


def spec(run: HyperCubeRun) -> InputSpec:
    """The join's input: each side's key column (an integer type), staged as ``k``."""
    lk, rk = str(run.cfg.key), run.right_key
    rules: list[Any] = [Needed("k", (0,), f"key {lk}", finite=False), Needed("k", (1,), f"key {rk}", finite=False),
                        UniqueIds(("ts", "k"))]
    if run.window_us > 0:
        rules.append(Late())
    return InputSpec(payload=({lk: "integer"}, {rk: "integer"}), what="<key column> of an integer type",
                     rules=tuple(rules), staged=("id", "ts", "side", "k"), casts={lk: "long", rk: "long"},
                     derived=(Derived("k", (lk, rk)),))


def live_ids(ctx: StageContext) -> Any:
    """(side, id) of the held tuples a new one can still meet (``held``), read with deltalake, or
    by Spark when the state is not local."""
    run: HyperCubeRun = ctx.run

    def live(info: BatchInfo) -> Any:
        got = held(ctx.read, run, info.unit, info.progress.time())
        run.keep(f"hypercube_held_{info.unit}", got)  # the unit's later stages in this process (``held_of``)
        return None if got is None else got.select(["side", "id"])

    return live


def run(ctx: StageContext) -> dict[str, Any]:
    """Stage everything that arrived since the last run as one unit (or resume the open one)."""
    return ctx.stage_unit(spec(ctx.run), live_ids(ctx))
