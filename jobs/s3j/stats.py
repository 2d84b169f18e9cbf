"""S3J stage 6, statistics: one stats row per window, one per (window, worker) and one per
(window, workset) for the unit (Section 9.1: records by role, duplication ratio, distance
computations, comparisons ratio, pairs emitted without computation, load by Definition 5, bytes
of the join state, and the processing latency p50/p99/max of the window's worker tasks; a
workset's seconds are its task's by load share), written to ``<output>_work/stats``;
``publish`` appends them to ``<output>_stats``. The rebalance stage adds its own rows (level
``rebalance``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pyarrow as pa

from jobs.s3j.common import S3JRun, us
from simjoin.contracts import STATS_COMMON_SCHEMA, RowKind
from simjoin.core.metric import comparisons_ratio, imbalance
from simjoin.io.rows import rows_table
from simjoin.pipeline.context import StageContext

STATS_SCHEMA = (
    STATS_COMMON_SCHEMA + ", level string, algorithm string, unit long, window_start timestamp, worker int, "
    "records long, "
    "space_copies long, inner long, outlier long, outer long, copies long, state_rows long, duplication_ratio double, "
    "worksets long, new_worksets long, distance_computations long, centroid_distance_computations long, "
    "shortcut_pairs long, result_pairs long, comparisons_ratio double, load double, load_imbalance double, "
    "max_worker_load double, latency_p50_s double, latency_p99_s double, latency_max_s double, "
    "partition int, workset_id long, bytes long, moved long, split long, bytes_migrated double, "
    "imbalance_after double, max_worker_load_after double, load_after double"
)
COLUMNS = [c.strip().split(" ")[0] for c in STATS_SCHEMA.split(",")]
ROW_BYTES = 48  # bytes of a join-state row besides its vector (ids, window, keys, role)


def stats_row(**values: Any) -> tuple[Any, ...]:
    """One stats row in ``STATS_SCHEMA`` order; columns not given are null."""
    unknown = set(values) - set(COLUMNS)
    if unknown:
        raise KeyError(f"unknown stats columns {sorted(unknown)}")
    return tuple(values.get(c) for c in COLUMNS)
UTC = dt.UTC


def _ts(us: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=int(us))


def run(ctx: StageContext) -> dict[str, Any]:
    run_: S3JRun = ctx.run
    u = ctx.unit
    rows, res = stats_rows(run_.cfg, u.id, u.dim, *_inputs(u))
    return {**res, "work": {"stats": rows_table(rows, STATS_SCHEMA)}}


def stats_rows(cfg: Any, b: int, dim: int, counters: list[Any], form: dict[tuple[int, int], int],
               cp: dict[int, tuple[int, int]], recs: dict[int, int]) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    """The unit's stats rows (``STATS_SCHEMA``) and totals, from the join's counter rows
    (``COUNTERS`` with ``kind, w, worker``), the formulation's per-window counts ``form``
    ((w, kind) -> new worksets or centroid distances), the space copies per window ``cp`` (w ->
    (copies, outer copies)) and the unit's records per window ``recs``."""
    P = int(cfg.workers)
    joined = [r for r in counters if int(r["kind"]) == int(RowKind.STATS)]
    # per-workset load statistics (the rebalance stage's input): rows, load, seconds, bytes
    row_bytes = 8 * dim + ROW_BYTES
    wsets: dict[int, list[Any]] = {}
    wbytes: dict[int, dict[int, int]] = {}
    for r in (r for r in counters if int(r["kind"]) == int(RowKind.WORKSET)):
        wsets.setdefault(int(r["w"]), []).append(r)
        wb = wbytes.setdefault(int(r["w"]), {})
        nb = int(r["n_inner"]) * row_bytes
        wb[int(r["worker"])] = wb.get(int(r["worker"]), 0) + nb
        wb[-1] = wb.get(-1, 0) + nb
    by_w: dict[int, list[Any]] = {}
    for r in joined:
        by_w.setdefault(int(r["w"]), []).append(r)
    rows: list[tuple[Any, ...]] = []
    tot = {"pairs": 0, "records": 0, "copies": 0, "computations": 0}
    for w in sorted(set(recs) | set(by_w)):
        ws = by_w.get(w, [])
        per = {int(r["worker"]): r for r in ws}
        load = np.array([float(per[k]["load"]) if k in per else 0.0 for k in range(P)])
        secs = np.array([float(r["seconds"]) for r in ws]) if ws else np.zeros(1)
        s = {k: int(sum(int(r[k]) for r in ws)) for k in (
            "n_inner", "n_outlier", "n_outer", "s_inner", "s_outlier", "s_outer", "worksets", "computations",
            "shortcut", "results")}
        n_rec = int(recs.get(w, 0))
        copies_n = s["n_inner"] + s["n_outlier"] + s["n_outer"]
        rows.append(stats_row(
            pipeline="s3j", seconds=float(secs.sum()), level="window", algorithm=cfg.algorithm, unit=b,
            window_start=_ts(w), records=n_rec, space_copies=int(cp.get(w, (0, 0))[0]), inner=s["n_inner"],
            outlier=s["n_outlier"], outer=s["n_outer"], copies=copies_n,
            state_rows=s["s_inner"] + s["s_outlier"] + s["s_outer"],
            duplication_ratio=copies_n / n_rec if n_rec else 0.0, worksets=s["worksets"],
            new_worksets=int(form.get((w, int(RowKind.CENTROID)), 0) or 0), distance_computations=s["computations"],
            centroid_distance_computations=int(form.get((w, int(RowKind.COUNTER)), 0) or 0),
            shortcut_pairs=s["shortcut"], result_pairs=s["results"],
            comparisons_ratio=comparisons_ratio(s["computations"], s["results"]), load=float(load.sum()),
            load_imbalance=imbalance(load), max_worker_load=float(load.max()),
            latency_p50_s=float(np.percentile(secs, 50)), latency_p99_s=float(np.percentile(secs, 99)),
            latency_max_s=float(secs.max()), bytes=int(wbytes.get(w, {}).get(-1, 0))))
        for k in range(P):
            wr: Any = per.get(k)

            def g(c: str, r: Any = wr) -> int:
                return int(r[c]) if r is not None else 0

            n_k = g("n_inner") + g("n_outlier") + g("n_outer")
            sec = float(wr["seconds"]) if wr is not None else 0.0
            rows.append(stats_row(
                pipeline="s3j", seconds=sec, level="worker", algorithm=cfg.algorithm, unit=b, window_start=_ts(w),
                worker=k, inner=g("n_inner"), outlier=g("n_outlier"), outer=g("n_outer"), copies=n_k,
                state_rows=g("s_inner") + g("s_outlier") + g("s_outer"), worksets=g("worksets"),
                distance_computations=g("computations"), shortcut_pairs=g("shortcut"), result_pairs=g("results"),
                comparisons_ratio=comparisons_ratio(g("computations"), g("results")), load=float(load[k]),
                latency_p50_s=sec, latency_p99_s=sec, latency_max_s=sec, bytes=int(wbytes.get(w, {}).get(k, 0))))
        for r in wsets.get(w, []):
            rows.append(stats_row(
                pipeline="s3j", seconds=float(r["seconds"]), level="workset", algorithm=cfg.algorithm, unit=b,
                window_start=_ts(w), worker=int(r["worker"]), records=int(r["n_inner"]), load=float(r["load"]),
                partition=int(r["partition"]), workset_id=int(r["workset_id"]),
                bytes=int(r["n_inner"]) * row_bytes))
        tot["pairs"] += s["results"]
        tot["records"] += n_rec
        tot["copies"] += copies_n
        tot["computations"] += s["computations"]
    return rows, {"unit": b, "windows": sorted(by_w), **tot}


def _partial(what: str, w: np.ndarray, kind: np.ndarray, n: np.ndarray, o: np.ndarray) -> pa.Table:
    """Sums of ``n`` and ``o`` per (w, kind), labelled ``what``."""
    keys, inv = np.unique(np.stack([w.astype(np.int64), kind.astype(np.int64)], 1).reshape(-1, 2), axis=0,
                          return_inverse=True)
    inv = inv.ravel()
    def total(v: np.ndarray) -> np.ndarray:
        return np.bincount(inv, weights=v, minlength=len(keys)).astype(np.int64)
    return pa.table({"what": pa.array([what] * len(keys), pa.string()), "w": keys[:, 0],
                     "kind": keys[:, 1].astype(np.int32), "n": total(n), "o": total(o)})


def _col(t: pa.Table, name: str, dtype: Any) -> np.ndarray:
    return np.asarray(t.column(name).to_numpy(zero_copy_only=False), dtype)


def members_counts(t: pa.Table) -> pa.Table:
    """Per window: new worksets (CENTROID rows) and centroid distance computations (COUNTER rows)."""
    kind = _col(t, "kind", np.int64)
    m = kind != int(RowKind.MEMBER)
    n = np.where(kind[m] == int(RowKind.CENTROID), 1, _col(t, "n", np.int64)[m])
    return _partial("members", _col(t, "w", np.int64)[m], kind[m], n, np.zeros(int(m.sum()), np.int64))


def copies_counts(t: pa.Table) -> pa.Table:
    """Per window: space copies and outer copies."""
    k = t.num_rows
    return _partial("copies", _col(t, "w", np.int64), np.zeros(k, np.int64), np.ones(k, np.int64),
                    _col(t, "is_outer", np.int64))


def records_counts(t: pa.Table) -> pa.Table:
    """Per window: the unit's records."""
    k = t.num_rows
    w = np.asarray(us(t.column("window_start")).to_numpy(zero_copy_only=False), np.int64)
    return _partial("records", w, np.zeros(k, np.int64), np.ones(k, np.int64), np.zeros(k, np.int64))


def fold_counts(t: pa.Table) -> tuple[dict[tuple[int, int], int], dict[int, tuple[int, int]], dict[int, int]]:
    """:func:`stats_rows`' per-window inputs from partial counts (summed here): ``form`` ((w, kind)
    -> n), ``cp`` (w -> (copies, outer)) and ``recs`` (w -> records)."""
    form: dict[tuple[int, int], int] = {}
    cp: dict[int, tuple[int, int]] = {}
    recs: dict[int, int] = {}
    for what, w, kind, n, o in zip(*(t.column(c).to_pylist() for c in ("what", "w", "kind", "n", "o")), strict=True):
        if what == "members":
            form[(w, kind)] = form.get((w, kind), 0) + n
        elif what == "copies":
            c, e = cp.get(w, (0, 0))
            cp[w] = (c + n, e + o)
        else:
            recs[w] = recs.get(w, 0) + n
    return form, cp, recs


def _inputs(u: Any) -> tuple[list[Any], dict[tuple[int, int], int], dict[int, tuple[int, int]], dict[int, int]]:
    """:func:`stats_rows`' inputs of a unit: the counter rows, and the partial counts of the
    members, copies and records."""
    counters = u.work("counters").to_pylist()
    both = pa.concat_tables([members_counts(u.work("members")), copies_counts(u.work("copies")),
                             records_counts(u.records)])
    return (counters, *fold_counts(both))
