"""S3J stage 8, publish (after the gate): the unit's pairs -> the output, its stats -> the stats
table (with the rebalance stage's rows), its workset centroids and members (plus, for S3J, its
physical outer copies as the buffer) -> the state; then the engine commits the unit and windows
the watermark less ``--allowed-lateness`` has passed are dropped from the join state (centroids
persist; ``S3JRun.expiry``, applied by the runtime). Every append is idempotent per (checkpoint, unit), so a
publish rerun after a crash neither repeats nor loses a row."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from jobs.s3j.common import S3JRun
from jobs.s3j.gate import staged_files, staged_pairs
from simjoin.contracts import Role, RowKind
from simjoin.io.rows import arrow_schema
from simjoin.pipeline.context import StageContext


def run(ctx: StageContext) -> dict[str, Any]:
    run_: S3JRun = ctx.run
    u = ctx.unit
    res = u.publish(_pieces(run_, u), meta={"dim": u.dim}, options={"stats": {"mergeSchema": "true"}})
    return {**res, "rows_out": res["published"].get("pairs")}  # type: ignore[no-any-return]


STATE_DDL = ("window_start timestamp, window_end timestamp, partition int, workset_id long, worker int, "
             "side byte, id long, vector array<double>, role byte, unit long")
CENTROID_DDL = "partition int, workset_id long, vector array<double>, worker int, window_start timestamp, unit long"


def _as(ddl: str, n: int, **cols: Any) -> pa.Table:
    """``cols`` (pyarrow arrays, or one value for every row) as a table of the DDL's schema."""
    sch = arrow_schema(ddl)
    arrays = []
    for f in sch:
        v = cols[f.name]
        if not isinstance(v, (pa.Array, pa.ChunkedArray)):
            v = pa.array(np.full(n, v))
        if pa.types.is_timestamp(f.type) and pa.types.is_integer(v.type):
            v = v.cast(pa.int64()).cast(f.type)
        arrays.append(v.cast(f.type))
    return pa.Table.from_arrays(arrays, schema=sch)


def _pieces(run_: S3JRun, u: Any) -> list[tuple[str, Any, str]]:
    """The pieces a unit publishes: pairs (the join tasks' files, or rows), stats, centroids and
    join state."""
    b = u.id
    members = u.work("members")
    kind = np.asarray(members.column("kind").to_numpy(zero_copy_only=False), np.int8)
    mem = members.filter(pa.array(kind == int(RowKind.MEMBER)))
    state = [_as(STATE_DDL, mem.num_rows, window_start=mem.column("w"), window_end=mem.column("we"),
                 **{c: mem.column(c) for c in ("partition", "workset_id", "worker", "side", "id", "vector", "role")},
                 unit=b)]
    stats = u.work("stats", keep_unit=True)
    if run_.cfg.algorithm == "s3j" and run_.cfg.rebalance != "off":
        stats = pa.concat_tables([stats, u.work("rebalance", keep_unit=True).cast(stats.schema)])
    files = staged_files(run_, u)
    pairs = files if files is not None and files.rows else staged_pairs(run_, u, files)
    pieces = [("pairs", pairs, run_.output), ("stats", stats, run_.tables.stats)]
    if run_.cfg.algorithm == "s3j":
        copies = u.work("copies")
        buf = copies.filter(copies.column("is_outer"))
        state.append(_as(STATE_DDL, buf.num_rows, window_start=buf.column("w"), window_end=buf.column("we"),
                         partition=buf.column("partition"), workset_id=0, worker=-1, side=buf.column("side"),
                         id=buf.column("id"), vector=buf.column("vector"), role=int(Role.BUFFER), unit=b))
        cen = members.filter(pa.array(kind == int(RowKind.CENTROID)))
        pieces.append(("centroids", _as(CENTROID_DDL, cen.num_rows, window_start=cen.column("w"), unit=b,
                                        **{c: cen.column(c) for c in ("partition", "workset_id", "vector", "worker")}),
                       run_.centroids))
    pieces.append(("join_state", _open_windows(run_, u, pa.concat_tables(state)), run_.join_state))
    return pieces


def _open_windows(run_: S3JRun, u: Any, state: pa.Table) -> pa.Table:
    """The join state rows of windows this unit's publish leaves open: a window that ends at or
    before the watermark it commits, less the allowed lateness, is dropped right after it
    (``S3JRun.expiry``), so it is not written (a backlog run wrote GBs of state to delete them)."""
    import datetime as dt

    import pyarrow.compute as pc

    wm = u.closing_watermark()
    if wm is None or not state.num_rows:
        return state
    cut = (wm.replace(tzinfo=None) - u.time.lateness
           - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
    ends = pc.cast(pc.cast(state.column("window_end"), pa.timestamp("us")), pa.int64())
    return state.filter(pc.greater(ends, cut))
