"""S3J workset formulation of one space partition over a micro-batch (Section 7, steps 1-5).

Siachamis et al., DEBS'23, Section 7 describes a record-at-a-time operator; the Spark
pipeline feeds it micro-batches. A micro-batch holds, for one space partition, the new
copies of several windows (tumbling or sliding), and a window may span micro-batches.
``formulate_partition_microbatch`` is the driver each formulation task runs
(``simjoin.operators.metric.formulate_partition_arrow``) and the in-process reference
(``stream.S3JStream``) runs too, on numpy arrays only:

* windows in ascending order (``w``, their start), so a workset opened by an earlier
  window exists for the later ones - centroids persist across windows (join state is
  cleared at window end, Section 7);
* inside a window, records in arrival order ``(ts, side, id)`` - the order of the
  streaming operator, which fixes homes and the opening of worksets (Criterion 2);
* per window one ``worksets.formulate_partition_window`` step - the step the
  single-process driver (``join.s3j_join_window``) runs too - given the window's rows
  from earlier micro-batches (``PartitionState``, read from the join state): their
  members give each workset its member radius, so the outer sets keep the exact bound
  t + m_W (never above 2t) across micro-batches, and every earlier row is routed to
  every workset that gets new members now, whenever that workset was opened, unless it
  is in its outer set already. Every record meets every workset it must meet, whichever
  was created first;
* new worksets start on worker ``partition % n_workers`` (Section 7.5), and the
  partition's centroid list grows window by window.

API: ``PartitionState``, ``formulate_partition_microbatch(window, ts, side, ids, X,
is_outer, metric, t, inclusive=False, *, partition, n_workers, workset_id=None,
centroid=None, worker=None, state=None, bounds=None, prune_outer=True)
-> list[MicroBatchWindow]``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from simjoin.core.unique import unique

from .distance import DEFAULT_BLOCK_ELEMENTS, PartitionBounds, check_threshold, partition_bounds
from .worksets import EarlierRows, WindowWorksets, formulate_partition_window

__all__ = ["MicroBatchWindow", "PartitionState", "formulate_partition_microbatch"]

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class PartitionState:
    """A space partition's join state for the windows of a micro-batch (earlier micro-batches).

    window / side / id / X / home: every record copy once - inner records with their home
    workset (home >= 1), physical outer copies with home 0 (the paper's buffer).
    routed_*: the outer-set memberships already made, one per (window, side, id, workset).
    """

    window: IntArray
    side: npt.NDArray[np.int8]
    id: IntArray
    X: npt.NDArray[np.float64]
    home: IntArray
    routed_window: IntArray
    routed_side: npt.NDArray[np.int8]
    routed_id: IntArray
    routed_workset_id: IntArray

    @classmethod
    def from_arrays(cls, window: npt.ArrayLike, side: npt.ArrayLike, ids: npt.ArrayLike, X: npt.ArrayLike,
                    home: npt.ArrayLike, routed_window: npt.ArrayLike | None = None,
                    routed_side: npt.ArrayLike | None = None, routed_id: npt.ArrayLike | None = None,
                    routed_workset_id: npt.ArrayLike | None = None, *, dim: int) -> PartitionState:
        w = np.asarray(window, dtype=np.int64).reshape(-1)
        Xv = np.asarray(X, dtype=np.float64).reshape(-1, int(dim))
        arrs = [np.asarray(a, dtype=np.int64).reshape(-1) for a in (side, ids, home)]
        rw, rs, ri, rg = (np.zeros(0, np.int64) if a is None else np.asarray(a, dtype=np.int64).reshape(-1)
                          for a in (routed_window, routed_side, routed_id, routed_workset_id))
        if any(a.shape[0] != w.shape[0] for a in arrs) or Xv.shape[0] != w.shape[0]:
            raise ValueError(f"state arrays disagree: window {w.shape}, X {Xv.shape}, "
                             f"side/id/home {[a.shape for a in arrs]}")
        if not (rw.shape == rs.shape == ri.shape == rg.shape):
            raise ValueError("routed_window, routed_side, routed_id and routed_workset_id must have equal lengths")
        return cls(w, arrs[0].astype(np.int8), arrs[1], Xv, arrs[2], rw, rs.astype(np.int8), ri, rg)

    @classmethod
    def empty(cls, dim: int) -> PartitionState:
        return cls.from_arrays([], [], [], np.zeros((0, int(dim))), [], dim=dim)

    def __len__(self) -> int:
        return int(self.window.shape[0])

    def for_window(self, w: int) -> tuple[IntArray, EarlierRows]:
        """(indexes of the window's rows in this state, the window's ``EarlierRows``)."""
        rows = np.flatnonzero(self.window == w)
        rsel = np.flatnonzero(self.routed_window == w)
        # routed memberships -> row indexes, matched on (side, id) inside the window
        r_row = np.full(rsel.shape[0], -1, np.int64)
        for sd in unique(self.side[rows]):
            rs = rows[self.side[rows] == sd]
            order = np.argsort(self.id[rs], kind="stable")
            ids_s = self.id[rs][order]
            q = rsel[self.routed_side[rsel] == sd]
            pos = np.searchsorted(ids_s, self.routed_id[q])
            ok = pos < ids_s.shape[0]
            ok[ok] = ids_s[pos[ok]] == self.routed_id[q][ok]
            r_row[np.flatnonzero(self.routed_side[rsel] == sd)[ok]] = np.searchsorted(rows, rs[order][pos[ok]])
        if np.any(r_row < 0):
            raise KeyError(f"window {w}: an outer-set membership names a record that is not in the state")
        return rows, EarlierRows(np.ascontiguousarray(self.X[rows]), self.home[rows], r_row,
                                 self.routed_workset_id[rsel])


class MicroBatchWindow(NamedTuple):
    """One window of a micro-batch in one space partition.

    worksets.record indexes the micro-batch's copies (the driver's input arrays), in the
    window's arrival order; worksets.routed_record indexes the ``PartitionState`` rows.
    """

    window: int
    worksets: WindowWorksets


def formulate_partition_microbatch(
    window: npt.ArrayLike,
    ts: npt.ArrayLike,
    side: npt.ArrayLike,
    ids: npt.ArrayLike,
    X: npt.ArrayLike,
    is_outer: npt.ArrayLike,
    metric: str,
    t: float,
    inclusive: bool = False,
    *,
    partition: int,
    n_workers: int,
    workset_id: npt.ArrayLike | None = None,
    centroid: npt.ArrayLike | None = None,
    worker: npt.ArrayLike | None = None,
    state: PartitionState | None = None,
    bounds: PartitionBounds | None = None,
    max_block_elements: int = DEFAULT_BLOCK_ELEMENTS,
    prune_outer: bool = True,
) -> list[MicroBatchWindow]:
    """Formulate the worksets of one space partition for every window of a micro-batch.

    window, ts, side, ids, X (n, d), is_outer: the partition's copies of this micro-batch,
    any order (window = window start; arrival order inside a window is (ts, side, id)).
    workset_id / centroid / worker: the partition's persisted worksets (any order; ids
    unique). state: the partition's rows of these windows from earlier micro-batches.
    Returns one ``MicroBatchWindow`` per window, ascending. prune_outer: outer sets cut to
    t + m_W (exact across micro-batches, see the module docstring), else the paper's 2t.
    """
    t = check_threshold(metric, t)
    Xv = np.asarray(X, dtype=np.float64)
    win = np.asarray(window, dtype=np.int64).reshape(-1)
    n = win.shape[0]
    if Xv.ndim != 2 or Xv.shape[0] != n:
        raise ValueError(f"X must have shape ({n}, d), got {Xv.shape}")
    d = Xv.shape[1]
    ts_arr = np.asarray(ts, dtype=np.int64).reshape(-1)
    sd = np.asarray(side, dtype=np.int8).reshape(-1)
    id_arr = np.asarray(ids, dtype=np.int64).reshape(-1)
    outer = np.asarray(is_outer, dtype=bool).reshape(-1)
    for name, arr in (("ts", ts_arr), ("side", sd), ("ids", id_arr), ("is_outer", outer)):
        if arr.shape[0] != n:
            raise ValueError(f"{name} has {arr.shape[0]} entries, window has {n}")
    if bounds is None:
        bounds = partition_bounds(metric, t, d, inclusive)
    ws_ids = np.zeros(0, np.int64) if workset_id is None else np.asarray(workset_id, dtype=np.int64).reshape(-1)
    order = np.argsort(ws_ids, kind="stable")
    ws_ids = ws_ids[order]
    C = np.zeros((0, d)) if not ws_ids.size else np.asarray(centroid, dtype=np.float64).reshape(-1, d)[order]
    home_worker = int(partition) % n_workers
    if worker is None:
        workers = np.full(ws_ids.shape[0], home_worker, np.int64)
    else:
        workers = np.asarray(worker, dtype=np.int64).reshape(-1)[order]
    if state is None:
        state = PartitionState.empty(d)
    elif len(state) and state.X.shape[1] != d:
        raise ValueError(f"state has dimension {state.X.shape[1]}, records have {d}")

    out: list[MicroBatchWindow] = []
    for w in unique(win):
        sel = np.flatnonzero(win == w)
        # Arrival order inside the window: (ts, side, id).
        rows = sel[np.lexsort((id_arr[sel], sd[sel], ts_arr[sel]))]
        bsel, earlier = state.for_window(int(w))
        step = formulate_partition_window(
            Xv[rows],
            outer[rows],
            metric,
            t,
            inclusive,
            partition=partition,
            n_workers=n_workers,
            workset_id=ws_ids,
            centroid=C,
            worker=workers,
            earlier=earlier if bsel.size else None,
            bounds=bounds,
            max_block_elements=max_block_elements,
            prune_outer=prune_outer,
        )
        if step.n_new_worksets:
            ws_ids = np.concatenate([ws_ids, step.new_workset_id])
            C = np.concatenate([C, step.new_centroid])
            workers = np.concatenate([workers, step.new_worker])
        out.append(
            MicroBatchWindow(
                int(w),
                replace(step, record=rows[step.record], routed_record=bsel[step.routed_record]),
            )
        )
    return out
