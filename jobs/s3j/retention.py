"""S3J's retention rule for its workset centroids (``<output>_state/centroids``).

Centroids persist across windows (a workset made in one window is reused by later ones), so a
stream whose data drifts adds centroids for as long as it runs. Maintenance drops the centroids of
worksets no open window holds a member of (no row of ``_state/join`` names them), while no unit
is open: no window's formulation has routed anything to them, so a later record is placed as if
they had never been made, and the outer-copy bounds of every open window stay as they were. The
highest workset id of each space partition always stays, so a new workset never reuses an id.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from simjoin.log import get_logger

__all__ = ["prune"]

log = get_logger("simjoin.s3j")

#: workset keys per DELETE (the predicate names each one)
CHUNK = 500


def _state_table(output: str, tables: Sequence[str], name: str) -> str | None:
    """The state table ``name`` of the output, under the state folder its manifest names (never
    a folder told by its name), when it is among ``tables``."""
    from simjoin.runtime import manifest

    m = manifest.of(output)
    state = m.at("state") if m is not None else None
    if state is None:
        return None
    want = os.path.realpath(os.path.join(state, name))
    return next((p for p in tables if os.path.realpath(p) == want), None)


def prune(output: str, tables: Sequence[str]) -> dict[str, Any]:
    """Drop the unused centroids (see the module); ``tables``: the output's Delta tables. The
    platform calls it only while no unit is open."""
    from deltalake import DeltaTable

    from simjoin.io.tables import predicate

    cpath, jpath = _state_table(output, tables, "centroids"), _state_table(output, tables, "join")
    if cpath is None or jpath is None:
        return {}
    cent = DeltaTable(cpath).to_pyarrow_table(columns=["partition", "workset_id"])
    live = DeltaTable(jpath).to_pyarrow_table(columns=["partition", "workset_id"])
    if cent.num_rows == 0:
        return {}
    top = cent.group_by("partition").aggregate([("workset_id", "max")])
    keep = {(int(p), int(w)) for p, w in zip(live.column("partition").to_pylist(),
                                             live.column("workset_id").to_pylist(), strict=True)}
    keep |= {(int(p), int(w)) for p, w in zip(top.column("partition").to_pylist(),
                                              top.column("workset_id_max").to_pylist(), strict=True)}
    have = {(int(p), int(w)) for p, w in zip(cent.column("partition").to_pylist(),
                                             cent.column("workset_id").to_pylist(), strict=True)}
    gone = sorted(have - keep)
    deleted = 0
    for i in range(0, len(gone), CHUNK):
        cond = predicate([[("partition", "=", p), ("workset_id", "=", w)] for p, w in gone[i:i + CHUNK]])
        m = DeltaTable(cpath).delete(cond)
        deleted += int(m.get("num_deleted_rows", 0) or 0)
    if gone:
        log.info("s3j retention: %d worksets no open window holds dropped from %s (%d rows); %d stay",
                 len(gone), cpath, deleted, len(have) - len(gone))
    return {"worksets": len(gone), "rows": deleted}
