"""S3J over micro-batches, in process: what the Spark stages do, in numpy.

Siachamis et al., DEBS'23, Sections 6-7. ``S3JStream`` keeps the same state the Spark
pipeline keeps in Delta - the workset centroids (they persist across windows) and, per
still-open window, the join state: every record copy once (inner records with their home
workset, physical outer copies as the buffer) and every workset membership made - and runs
the same core steps per micro-batch:

1. space partitioning (``space_partition``, Section 6);
2. per space partition, ``formulate_partition_microbatch`` (Section 7, steps 1-5) with the
   partition's centroids and its join state of the micro-batch's windows;
3. per (window, worker), ``join_worker_window`` (Section 7.7): new rows, plus the earlier
   rows routed now and the join state of every workset with new rows, which meet only new
   rows.

It is the reference the property tests compare with brute force over many stream shapes
(windows, micro-batch cuts, metrics, strict or inclusive), and the Spark pipeline is
compared with it. ``push`` takes window copies (a record of a sliding window comes once per
window); ``expire(before)`` drops the state of windows that ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from simjoin.core.unique import unique

from .distance import check_threshold, partition_bounds
from .join import join_worker_window, split_key, split_rows
from .load import Assignment, RebalanceResult, rebalance
from .microbatch import PartitionState, formulate_partition_microbatch
from .partitioning import random_centroids, space_partition
from .worksets import OUTER

__all__ = ["S3JBatch", "S3JStream", "window_copies"]

IntArray = npt.NDArray[np.int64]


def window_copies(ts: npt.ArrayLike, size: int, slide: int | None = None) -> tuple[IntArray, IntArray]:
    """(record index, window start) of every window ``[s, s + size)`` holding ``ts``; windows
    start at multiples of ``slide`` (tumbling when slide is None or equal to size)."""
    t = np.asarray(ts, dtype=np.int64).reshape(-1)
    sl = int(size if slide is None else slide)
    if size <= 0 or sl <= 0 or sl > size:
        raise ValueError(f"need 0 < slide <= size, got size={size}, slide={sl}")
    k = -(-size // sl)  # windows per record, at most
    last = (t // sl) * sl
    rec = np.repeat(np.arange(t.shape[0], dtype=np.int64), k)
    start = (last[:, None] - sl * np.arange(k, dtype=np.int64)[None, :]).reshape(-1)
    keep = (start <= t[rec]) & (t[rec] < start + size)
    return rec[keep], start[keep]


@dataclass
class _Rows:
    """Growable columns (one list of arrays per column)."""

    cols: dict[str, list[np.ndarray]] = field(default_factory=dict)

    def add(self, **arrays: np.ndarray) -> None:
        for k, v in arrays.items():
            self.cols.setdefault(k, []).append(np.asarray(v))

    def get(self, name: str, dtype: type, width: int | None = None) -> np.ndarray:
        parts = self.cols.get(name, [])
        if not parts:
            return np.zeros((0, width) if width else 0, dtype)
        return np.concatenate(parts).astype(dtype, copy=False)

    def keep(self, mask: np.ndarray) -> None:
        self.cols = {k: [np.concatenate(v)[mask]] for k, v in self.cols.items() if v}


@dataclass(frozen=True)
class S3JBatch:
    """One micro-batch's result: pairs (window, left_id, right_id, distance) and counters."""

    window: IntArray
    left_id: IntArray
    right_id: IntArray
    distance: npt.NDArray[np.float64]
    copies: int
    routed: int
    computations: int
    centroid_distance_computations: int
    worker_load: dict[tuple[int, int], float]


class S3JStream:
    """The S3J micro-batch pipeline over numpy arrays (see the module docstring)."""

    def __init__(self, metric: str, t: float, inclusive: bool = False, *, n_workers: int, dim: int,
                 seed: int = 42, self_join: bool = False, prune_outer: bool = True) -> None:
        self.metric, self.t, self.inclusive = metric, check_threshold(metric, t), bool(inclusive)
        self.P, self.dim, self.self_join, self.prune_outer = int(n_workers), int(dim), bool(self_join), prune_outer
        self.space_centroids = random_centroids(self.P, self.dim, seed)
        self.bounds = partition_bounds(metric, self.t, self.dim, self.inclusive)
        # centroids per partition: (workset_id, centroid, worker)
        self.centroids: dict[int, tuple[IntArray, np.ndarray, IntArray]] = {}
        # join state: base rows (one per record copy) and memberships (one per (copy, workset))
        self.base = _Rows()
        self.members = _Rows()
        # the rebalance stage: the assignment in force and the loads since it was made
        self.assignment = Assignment.empty()
        self.monitor: dict[tuple[int, int], list[float]] = {}

    def _partition_state(self, p: int, windows: np.ndarray) -> PartitionState:
        b, m = self.base, self.members
        bp, bw = b.get("partition", np.int64), b.get("w", np.int64)
        sel = (bp == p) & np.isin(bw, windows)
        mp, mw, role = m.get("partition", np.int64), m.get("w", np.int64), m.get("role", np.int8)
        msel = (mp == p) & np.isin(mw, windows) & (role == OUTER)
        return PartitionState.from_arrays(
            bw[sel], b.get("side", np.int8)[sel], b.get("id", np.int64)[sel],
            b.get("X", np.float64, self.dim)[sel], b.get("home", np.int64)[sel],
            mw[msel], m.get("side", np.int8)[msel], m.get("id", np.int64)[msel],
            m.get("workset_id", np.int64)[msel], dim=self.dim)

    def push(self, window: npt.ArrayLike, ts: npt.ArrayLike, side: npt.ArrayLike | None, ids: npt.ArrayLike,
             X: npt.ArrayLike) -> S3JBatch:
        """Join one micro-batch of window copies (window start, ts, side, id, vector)."""
        w_all = np.asarray(window, dtype=np.int64).reshape(-1)
        ts_all = np.asarray(ts, dtype=np.int64).reshape(-1)
        n = w_all.shape[0]
        sd_all = np.zeros(n, np.int8) if side is None else np.asarray(side, dtype=np.int8).reshape(-1)
        id_all = np.asarray(ids, dtype=np.int64).reshape(-1)
        Xv = np.asarray(X, dtype=np.float64).reshape(n, self.dim)
        sp = space_partition(Xv, self.space_centroids, self.metric, self.t, self.inclusive)
        new, routed = _Rows(), _Rows()
        new_base = _Rows()
        cdc = 0
        for p in unique(sp.partition):
            m = sp.partition == p
            rec, outer = sp.record[m], sp.is_outer[m]
            z = np.zeros(0, np.int64)
            ids0, C0, wk0 = self.centroids.get(int(p), (z, np.zeros((0, self.dim)), z))
            st = self._partition_state(int(p), unique(w_all[rec]))
            res = formulate_partition_microbatch(
                w_all[rec], ts_all[rec], sd_all[rec], id_all[rec], Xv[rec], outer, self.metric, self.t,
                self.inclusive, partition=int(p), n_workers=self.P, workset_id=ids0, centroid=C0, worker=wk0,
                state=st, bounds=self.bounds, prune_outer=self.prune_outer)
            for mw in res:
                r = mw.worksets
                k = r.record.shape[0]
                new.add(w=np.full(k, mw.window), partition=np.full(k, p), workset_id=r.workset_id, worker=r.worker,
                        role=r.role, rec=rec[r.record])
                q = r.routed_record.shape[0]
                routed.add(w=np.full(q, mw.window), partition=np.full(q, p), workset_id=r.routed_workset_id,
                           worker=r.routed_worker, side=st.side[r.routed_record], id=st.id[r.routed_record],
                           X=st.X[r.routed_record])
                ids0 = np.concatenate([ids0, r.new_workset_id])
                C0 = np.concatenate([C0, r.new_centroid])
                wk0 = np.concatenate([wk0, r.new_worker])
                cdc += r.centroid_distance_computations
                # base rows: inner records with their home, physical outer copies with home 0
                home_rows = r.role != OUTER
                hr = rec[r.record[home_rows]]
                new_base.add(w=np.full(hr.shape[0], mw.window), partition=np.full(hr.shape[0], p),
                             side=sd_all[hr], id=id_all[hr], X=Xv[hr], home=r.workset_id[home_rows])
            self.centroids[int(p)] = (ids0, C0, wk0)
            ob = rec[outer]
            new_base.add(w=w_all[ob], partition=np.full(ob.shape[0], p), side=sd_all[ob], id=id_all[ob],
                         X=Xv[ob], home=np.zeros(ob.shape[0], np.int64))
        return self._join(new, routed, new_base, sd_all, id_all, Xv, cdc)

    def _join(self, new: _Rows, routed: _Rows, new_base: _Rows, sd_all: np.ndarray, id_all: np.ndarray,
              Xv: np.ndarray, cdc: int) -> S3JBatch:
        d = self.dim
        nrec = new.get("rec", np.int64)
        n_w, n_p, n_g = new.get("w", np.int64), new.get("partition", np.int64), new.get("workset_id", np.int64)
        n_k, n_r = new.get("worker", np.int64), new.get("role", np.int8)
        # worksets with new rows (and their worker now)
        key_new = np.stack([n_w, n_p, n_g], 1) if n_w.size else np.zeros((0, 3), np.int64)
        uk, first = np.unique(key_new, axis=0, return_index=True)
        worker_of = {tuple(k): int(n_k[i]) for k, i in zip(uk.tolist(), first)}
        st = self.members
        s_w, s_p, s_g = st.get("w", np.int64), st.get("partition", np.int64), st.get("workset_id", np.int64)
        old = np.array([(a, b, c) in worker_of for a, b, c in zip(s_w.tolist(), s_p.tolist(), s_g.tolist())],
                       dtype=bool)
        r_w, r_p, r_g = routed.get("w", np.int64), routed.get("partition", np.int64), routed.get("workset_id", np.int64)
        cols = {
            "w": [n_w, r_w, s_w[old]],
            "p": [n_p, r_p, s_p[old]],
            "g": [n_g, r_g, s_g[old]],
            "role": [n_r, np.full(r_w.shape[0], OUTER, np.int8), st.get("role", np.int8)[old]],
            "side": [sd_all[nrec], routed.get("side", np.int8), st.get("side", np.int8)[old]],
            "id": [id_all[nrec], routed.get("id", np.int64), st.get("id", np.int64)[old]],
            "X": [Xv[nrec], routed.get("X", np.float64, d), st.get("X", np.float64, d)[old]],
            "new": [np.ones(n_w.shape[0], bool), np.zeros(r_w.shape[0], bool), np.zeros(int(old.sum()), bool)],
        }
        c = {k: np.concatenate(v) for k, v in cols.items()}
        wk = np.array([worker_of[(a, b, g)] for a, b, g in zip(c["w"].tolist(), c["p"].tolist(), c["g"].tolist())],
                      dtype=np.int64)
        c, wk = self._route(c, wk)
        Ws, Ls, Rs, Ds = [], [], [], []
        comps = 0
        loads: dict[tuple[int, int], float] = {}
        for w in unique(c["w"]):
            for k in unique(wk[c["w"] == w]):
                s = np.flatnonzero((c["w"] == w) & (wk == k))
                jw = join_worker_window(c["X"][s], c["id"][s], c["role"][s], c["p"][s], c["g"][s], c["new"][s],
                                        self.metric, self.t, self.inclusive,
                                        side=None if self.self_join else c["side"][s])
                Ws.append(np.full(jw.result_pairs, w, np.int64))
                Ls.append(jw.left_id)
                Rs.append(jw.right_id)
                Ds.append(jw.distance)
                comps += jw.computations
                loads[(int(w), int(k))] = jw.load
                for pp, gg, rr, ll in zip(jw.workset_partition.tolist(), jw.workset_id.tolist(),
                                          jw.workset_rows.tolist(), jw.workset_load.tolist()):
                    acc = self.monitor.setdefault((pp, gg), [0.0, 0])
                    acc[0] += ll
                    acc[1] = max(acc[1], rr)
        # the join state grows by this micro-batch's memberships and record copies
        self.members.add(w=n_w, partition=n_p, workset_id=n_g, role=n_r, side=sd_all[nrec], id=id_all[nrec],
                         X=Xv[nrec])
        self.members.add(w=r_w, partition=r_p, workset_id=r_g, role=np.full(r_w.shape[0], OUTER, np.int8),
                         side=routed.get("side", np.int8), id=routed.get("id", np.int64),
                         X=routed.get("X", np.float64, d))
        for name, parts in new_base.cols.items():
            self.base.cols.setdefault(name, []).extend(parts)
        z = np.zeros(0, np.int64)
        return S3JBatch(
            window=np.concatenate(Ws) if Ws else z, left_id=np.concatenate(Ls) if Ls else z,
            right_id=np.concatenate(Rs) if Rs else z.copy(), distance=np.concatenate(Ds) if Ds else np.zeros(0),
            copies=int(n_w.shape[0]), routed=int(r_w.shape[0]), computations=int(comps),
            centroid_distance_computations=int(cdc), worker_load=loads)

    def _route(self, c: dict[str, np.ndarray], wk: IntArray) -> tuple[dict[str, np.ndarray], IntArray]:
        """Rows to workers by the assignment in force: split worksets are replicated per part."""
        placed = self.assignment.placements()
        if not placed:
            return c, wk
        keys = list(zip(c["p"].tolist(), c["g"].tolist()))
        parts = np.array([len(placed.get(k, (0,))) for k in keys], np.int64)
        row, part, new = split_rows(c["role"], c["new"], c["side"], c["id"], parts)
        out = {k: v[row] for k, v in c.items()}
        out["new"] = new
        out["g"] = split_key(out["g"], part)
        wk2 = np.array([placed[keys[r]][q] if keys[r] in placed else int(wk[r])
                        for r, q in zip(row.tolist(), part.tolist())], np.int64)
        return out, wk2

    def rebalance(self, *, trigger: float = 0.2, migration_factor: float = 0.0, split: bool = False) -> RebalanceResult:
        """The rebalance stage: Algorithm 1 (and splitting) over the loads since the last call."""
        keys = sorted(self.monitor)
        p = np.array([k[0] for k in keys], np.int64)
        g = np.array([k[1] for k in keys], np.int64)
        home = np.zeros(len(keys), np.int64)
        for i, (pp, gg) in enumerate(keys):
            ids0, _, wk0 = self.centroids[pp]
            home[i] = int(wk0[np.flatnonzero(ids0 == gg)[0]])
        load = [self.monitor[k][0] for k in keys]
        size = [self.monitor[k][1] * (8 * self.dim + 32) for k in keys]
        res = rebalance(p, g, load, size, home, self.P, previous=self.assignment, trigger=trigger,
                        migration_factor=migration_factor, split=split)
        self.assignment = res.assignment
        self.monitor = {}
        return res

    def expire(self, before: int) -> None:
        """Drop the join state of windows starting before ``before`` (centroids persist)."""
        for rows in (self.base, self.members):
            if rows.cols:
                rows.keep(rows.get("w", np.int64) >= before)
