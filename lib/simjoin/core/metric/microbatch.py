"""S3J workset formulation of one space partition over a micro-batch (Section 7, steps 1-5).

Siachamis et al., DEBS'23, Section 7 describes a record-at-a-time operator; the Spark
pipeline feeds it micro-batches. A micro-batch holds, for one space partition, the new
copies of several windows (tumbling or sliding), and a window may span micro-batches.
``formulate_partition_microbatch`` is the driver each Spark formulation task runs
(``simjoin.spark.metric.formulate_worksets_df``), on numpy arrays only:

* windows in ascending order (``w``, their start), so a workset opened by an earlier
  window exists for the later ones - centroids persist across windows (join state is
  cleared at window end, Section 7);
* inside a window, records in arrival order ``(ts, side, id)`` - the order of the
  streaming operator, which fixes homes and the opening of worksets (Criterion 2);
* per window one ``worksets.formulate_partition_window`` step - the step the
  single-process driver (``join.s3j_join_window``) runs too - with the full 2t outer
  sets (``prune_outer=False``): a member that arrives in a later micro-batch may need an
  outer copy that this one routes;
* new worksets start on worker ``partition % n_workers`` (Section 7.5), and the
  partition's centroid list grows window by window;
* physical outer copies of the window that arrived in earlier micro-batches (the paper's
  buffer, role ``contracts.Role.BUFFER`` in the join state) are routed to the outer sets
  of the worksets the window's step opens; the centroid distances count as computations.

Known limitation, kept as is (a separate issue): buffered copies reach only the worksets
opened by *their own window's step in this call*. A workset opened earlier in the same
call by an earlier window of this partition, after the copies were buffered, does not
receive them.

API: ``formulate_partition_microbatch(window, ts, side, ids, X, is_outer, metric, t,
inclusive=False, *, partition, n_workers, workset_id=None, centroid=None, worker=None,
buffered_window=None, buffered=None, bounds=None, prune_outer=False)
-> list[MicroBatchWindow]``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from .distance import DEFAULT_BLOCK_ELEMENTS, PartitionBounds, check_threshold, partition_bounds
from .worksets import WindowWorksets, formulate_partition_window

__all__ = ["MicroBatchWindow", "formulate_partition_microbatch"]

IntArray = npt.NDArray[np.int64]


class MicroBatchWindow(NamedTuple):
    """One window of a micro-batch in one space partition.

    worksets.record indexes the micro-batch's copies (the driver's input arrays), in the
    window's arrival order; worksets.buffered_record indexes the buffered copies.
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
    buffered_window: npt.ArrayLike | None = None,
    buffered: npt.ArrayLike | None = None,
    bounds: PartitionBounds | None = None,
    max_block_elements: int = DEFAULT_BLOCK_ELEMENTS,
    prune_outer: bool = False,
) -> list[MicroBatchWindow]:
    """Formulate the worksets of one space partition for every window of a micro-batch.

    window, ts, side, ids, X (n, d), is_outer: the partition's copies of this micro-batch,
    any order (window = window start; arrival order inside a window is (ts, side, id)).
    workset_id / centroid / worker: the partition's persisted worksets (any order; ids
    unique). buffered_window / buffered (b, d): physical outer copies of still-open windows
    from earlier micro-batches. Returns one ``MicroBatchWindow`` per window, ascending.

    prune_outer must stay False when a window can span micro-batches (see the module
    docstring); True is only exact when this call holds every record of each window.
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
    if buffered is None:
        b_win = np.zeros(0, np.int64)
        Xb = np.zeros((0, d))
    else:
        Xb = np.asarray(buffered, dtype=np.float64).reshape(-1, d)
        b_win = np.asarray(buffered_window, dtype=np.int64).reshape(-1)
        if b_win.shape[0] != Xb.shape[0]:
            raise ValueError(f"buffered_window has {b_win.shape[0]} entries, buffered has {Xb.shape[0]} rows")

    out: list[MicroBatchWindow] = []
    for w in np.unique(win):
        sel = np.flatnonzero(win == w)
        # Arrival order inside the window: (ts, side, id).
        rows = sel[np.lexsort((id_arr[sel], sd[sel], ts_arr[sel]))]
        bsel = np.flatnonzero(b_win == w)
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
            buffered=Xb[bsel] if bsel.size else None,
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
                replace(step, record=rows[step.record], buffered_record=bsel[step.buffered_record]),
            )
        )
    return out
