"""Two executors, one truth: a unit on the in-process executor (Arrow and deltalake, no Spark job)
and the same unit on the Spark executor (``--executor spark``: the stage functions inside Spark
jobs) write identical tables - output, state, stats (less the seconds), quarantine and
progress - whichever executor ran the units before it.

Property test per pipeline over seeds and shapes: self-joins and two streams, cuts inside
windows, out-of-order rows within the allowed lateness, late rows, duplicate ids, nulls and NaN;
for ineq time and count windows, for S3J tumbling and sliding windows, both metrics, S3J and
ClusterJoin, rebalancing that moves and splits worksets. Each seed runs its units twice: all in
process, then all on Spark (even seeds) or alternating (odd seeds: the state one executor wrote
is read by the other). A few seeds in ``make test``; more with ``-m exhaustive``.
Every run is also checked pair for pair against the brute force."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from tests.helpers import run_named

T0 = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
T0_US = int(T0.timestamp() * 1_000_000)
US = pa.timestamp("us", tz="UTC")
#: columns that hold wall-clock time or a run's own identity, not its result
NOT_RESULTS = {"seconds", "merge_seconds", "probe_seconds", "max_task_seconds", "checkpoint_id", "batch",
               "latency_p50_s", "latency_p99_s", "latency_max_s", "latency_s"}
INEQ_TABLES = {"output": "", "stats": "_stats", "quarantine": "_quarantine", "batches": "_state/batches",
               "progress": "_state/progress"}
S3J_TABLES = {"output": "", "stats": "_stats", "quarantine": "_quarantine", "join": "_state/join",
              "centroids": "_state/centroids", "assignment": "_state/assignment", "progress": "_state/progress"}


def _case(seed: int) -> tuple[dict, list[list[pa.Table]], bool]:
    """A random shape: the config, per unit the rows appended to each stream, and whether it is a time window."""
    rng = np.random.default_rng(seed)
    two = bool(rng.integers(0, 2))
    timed = bool(rng.integers(0, 2))
    n = int(rng.integers(60, 160))
    units = int(rng.integers(2, 4))
    conf: dict = {"where": ["l.a < r.a AND l.b >= r.b", "abs(l.a - r.a) <= 1 AND l.c != r.c",
                            "l.a + 2 < r.a"][int(rng.integers(0, 3))],
                  "workers": int(rng.integers(1, 4)), "merge_every": int(rng.integers(5, 30))}
    if timed:
        conf.update(window=f"{int(rng.integers(5, 40))}s", allowed_lateness=f"{int(rng.integers(0, 6))}s")
    else:
        conf.update(window_count=int(rng.integers(10, 50)))
    sides = 2 if two else 1
    pieces: list[list[pa.Table]] = []
    next_id = 0
    for u in range(units):
        per_side = []
        for _ in range(sides):
            m = n // units
            ids = np.arange(next_id, next_id + m, dtype=np.int64)
            next_id += m
            ts = T0_US + (u * 40 + rng.integers(0, 40, m)) * 1_000_000  # out of order inside a unit
            if u and timed:  # a few rows up to 8 s behind the previous unit: joined or late
                back = rng.random(m) < 0.1
                ts = np.where(back, T0_US + (u * 40 - rng.integers(0, 8, m)) * 1_000_000, ts)
            a = rng.integers(0, 30, m).astype(float)
            b = rng.integers(0, 20, m).astype(float)
            c = rng.integers(0, 3, m).astype(float)
            bad = rng.random(m)
            a = np.where(bad < 0.03, np.nan, a)
            ids = np.where((bad > 0.97) & (ids > 3), ids - 3, ids)  # a duplicate id: in this unit or a live one
            t = pa.table({"id": pa.array(ids), "ts": pa.array(ts).cast(US), "a": pa.array(a), "b": pa.array(b),
                          "c": pa.array(c)})
            if u == 0:
                t = pa.concat_tables([t, pa.table({"id": pa.array([None], pa.int64()), "ts": pa.array([T0_US]).cast(US),
                                                   "a": [1.0], "b": pa.array([None], pa.float64()), "c": [1.0]})])
            per_side.append(t)
        pieces.append(per_side)
    return conf, pieces, timed


def _tables(out: str, names: dict[str, str]) -> dict[str, list[tuple]]:
    from deltalake import DeltaTable

    got = {}
    for k, suffix in names.items():
        try:
            t = DeltaTable(out + suffix).to_pyarrow_table()
        except Exception:
            got[k] = []
            continue
        cols = sorted(c for c in t.column_names if c not in NOT_RESULTS)
        rows = t.select(cols).to_pylist()
        for r in rows:  # the progress row records which executor ran its unit: not a result
            if k == "progress" and r.get("meta"):
                meta = json.loads(r["meta"])
                assert meta.pop("executor") in ("in_process", "spark") and meta.pop("executor_reason")
                r["meta"] = json.dumps(meta, sort_keys=True)
        got[k] = sorted(tuple((c, repr(r[c])) for c in cols) for r in rows)
    return got


def _run(spark, tmp, conf: dict, pieces: list[list[pa.Table]], on_spark, monkeypatch, pipeline: str = "ineq",
         names: dict[str, str] = INEQ_TABLES) -> dict:
    from deltalake import write_deltalake

    conf = {**conf, "left": str(tmp / "l"), "output": str(tmp / "out")}
    if len(pieces[0]) == 2:
        conf["right"] = str(tmp / "r")
    for u, per_side in enumerate(pieces):
        for path, t in zip([conf["left"], conf.get("right")], per_side, strict=False):
            write_deltalake(path, t, mode="append")
        _, res = run_named(spark, pipeline, **conf, executor="spark" if on_spark(u) else "in_process")
        assert res["rounds"] and all(len(r) > 1 for r in res["rounds"]), res  # every stage ran
    return _tables(conf["output"], names)


def _both(spark, tmp_path, monkeypatch, seed: int, conf: dict, pieces: list[list[pa.Table]], pipeline: str,
          names: dict[str, str]) -> dict:
    """The case run all in process, then all on Spark (even seeds) or alternating (odd seeds: each
    executor reads state the other wrote); every table must be identical. The in-process run's tables."""
    local = _run(spark, tmp_path / "local", conf, pieces, lambda u: False, monkeypatch, pipeline, names)
    other = _run(spark, tmp_path / "other", conf, pieces, (lambda u: u % 2 == 1) if seed % 2 else (lambda u: True),
                 monkeypatch, pipeline, names)
    for k in local:
        only_local, only_other = sorted(set(local[k]) - set(other[k])), sorted(set(other[k]) - set(local[k]))
        assert local[k] == other[k], f"seed {seed}: {k} differs between the executors: {only_local} vs {only_other}"
    return local


def _kept(pieces: list[list[pa.Table]], gone: Any, key: Any) -> list[list[dict]]:
    """Per side, the input rows less the quarantined ones (``gone``: a Counter of ``key(side, row)``)."""
    rows: list[list[dict]] = [[] for _ in pieces[0]]
    for per in pieces:
        for s, t in enumerate(per):
            for r in t.to_pylist():
                k = key(s, r)
                if gone[k]:
                    gone[k] -= 1
                else:
                    rows[s].append(r)
    assert not +gone, f"quarantined rows not in the input: {+gone}"
    return rows


def _admitted(pieces: list[list[pa.Table]], out: str) -> list[dict[str, np.ndarray] | None]:
    """Per side, the rows ingest admitted (every row less the quarantined ones), in arrival order
    (unit, ts, id), with their unit: what the brute force joins."""
    import json

    from deltalake import DeltaTable

    q = DeltaTable(out + "_quarantine").to_pyarrow_table().to_pylist()
    gone: dict[tuple, list[dict]] = {}  # (side, id, ts) -> the quarantined rows' payloads
    for r in q:
        gone.setdefault((r["side"], r["id"], r["ts"]), []).append(json.loads(r["row"]) if r["row"] else {})

    def norm(v):
        return "NaN" if v != v else v

    sides = []
    for k in range(len(pieces[0])):
        rows = []
        for u, per_side in enumerate(pieces):
            for r in per_side[k].to_pylist():
                cands = gone.get((k, r["id"], r["ts"]), [])
                hit = next((i for i, pl in enumerate(cands) if all(norm(r[c]) == v for c, v in pl.items())), None)
                if hit is not None:
                    cands.pop(hit)
                    continue
                rows.append((u, int(r["ts"].timestamp() * 1e6) - T0_US, r["id"], r["a"], r["b"], r["c"]))
        rows.sort()
        sides.append({"unit": np.array([r[0] for r in rows]), "ts": np.array([r[1] for r in rows]),
                      "id": np.array([r[2] for r in rows]), **{c: np.array([r[3 + i] for r in rows], float)
                                                               for i, c in enumerate("abc")}})
    assert not any(gone.values()), f"quarantined rows not in the input: {gone}"
    assert all(r["id"] is not None for r in q if r["reason"] != "null id")
    return sides


def _check(spark, tmp_path, monkeypatch, seed):
    from deltalake import DeltaTable

    from simjoin.config import parse_duration
    from simjoin.core.inequality.query import parse_query
    from simjoin.core.inequality.spo import Window
    from tests.unit.test_inequality_stream import brute_force

    conf, pieces, timed = _case(seed)
    local = _both(spark, tmp_path, monkeypatch, seed, conf, pieces, "ineq", INEQ_TABLES)
    # and the pairs are the brute force over the rows ingest admitted
    out = str(tmp_path / "local" / "out")
    sides = _admitted(pieces, out)
    window = (Window(time_us=round(parse_duration(conf["window"]) * 1e6)) if timed
              else Window(count=conf["window_count"]))
    L, R = sides[0], (sides[1] if len(sides) == 2 else None)
    ref = brute_force(parse_query(conf["where"]), L, R, window, L["unit"], None if R is None else R["unit"])
    t = DeltaTable(out).to_pyarrow_table()
    got = sorted(zip(t.column("left_id").to_pylist(), t.column("right_id").to_pylist(), strict=True))
    assert got == ref, f"seed {seed}: {len(got)} pairs, the brute force {len(ref)}"
    assert local["quarantine"], "the case has bad rows"
    _check_jobs(tmp_path)


def _stage_jobs(out) -> list[tuple[str, int | None]]:
    """(stage, Spark jobs) of every stage run the task-timing table recorded for the output ``out``."""
    import os

    from deltalake import DeltaTable

    from simjoin.pipeline.timing import timing_path

    t = DeltaTable(timing_path()).to_pyarrow_table(columns=["stage", "spark_jobs", "output"])
    return [(r["stage"], r["spark_jobs"]) for r in t.to_pylist() if r["output"] == os.path.abspath(str(out))]


def _check_jobs(tmp_path) -> None:
    """The task-timing table counts each stage's Spark jobs: none after ingest on the in-process
    executor, some on the Spark executor."""
    local, other = (_stage_jobs(tmp_path / run / "out") for run in ("local", "other"))
    assert local and all(j == 0 for st, j in local if st != "ingest"), local
    assert sum(j for st, j in other if st != "ingest") > 0, other


#: fast seeds cover: two streams with a time window and lateness (0), a self-join with a time
#: window over 3 units (1), two streams with a count window (2) and a self-join with a count window (11)
SEEDS = [0, 1, 2, 11]


# ------------------------------------------------------------------------------------------ S3J


def _s3j_case(seed: int) -> tuple[dict, list[list[pa.Table]]]:
    """A random S3J shape: the config and, per unit, the rows appended to each stream. Vectors
    cluster around a hot spot (worksets the rebalance moves and splits); bad rows: a null vector,
    a NaN element, a wrong dimension, a duplicate id, rows far behind every open window (late), a
    zero vector under the angular metric; out-of-order rows stay within the allowed lateness."""
    rng = np.random.default_rng(1000 + seed)
    two = bool(rng.integers(0, 2))
    metric = ["euclidean", "angular"][int(rng.integers(0, 2))]
    dim = int(rng.integers(2, 4))
    window = int([10, 20, 30][int(rng.integers(0, 3))])
    lateness = int(rng.integers(2, 8))
    conf: dict = {"metric": metric, "threshold": float(rng.uniform(0.15, 0.3) if metric == "euclidean"
                                                      else rng.uniform(0.04, 0.08)),
                  "window": f"{window}s", "workers": int(rng.integers(1, 4)), "allowed_lateness": f"{lateness}s"}
    if rng.integers(0, 2):
        conf["slide"] = f"{window // 2}s"
    if seed % 4 == 3:
        conf["algorithm"] = "clusterjoin"
    elif rng.integers(0, 3):
        conf.update(rebalance="split", rebalance_trigger=0.05)
    units = int(rng.integers(2, 4))
    n = int(rng.integers(40, 80))
    pieces: list[list[pa.Table]] = []
    next_id = 10
    for u in range(units):
        per_side = []
        for _ in range(2 if two else 1):
            ids = np.arange(next_id, next_id + n, dtype=np.int64)
            next_id += n
            secs = u * 40 + np.round(rng.uniform(0, 40, n), 1)  # ties in ts
            if u:  # out of order: behind the previous unit's ts, within the lateness
                back = rng.random(n) < 0.15
                secs = np.where(back, u * 40 - np.round(rng.uniform(0, lateness - 1, n), 1), secs)
            hot = rng.random(n) < 0.5
            X = np.where(hot[:, None], 0.4 + rng.normal(0, 0.05, (n, dim)), rng.uniform(-1, 1, (n, dim)))
            vec: list = [list(map(float, x)) for x in X]
            bad = rng.random(n)
            for i in np.flatnonzero(bad < 0.02):
                vec[i] = None
            for i in np.flatnonzero((bad >= 0.02) & (bad < 0.04)):
                vec[i][0] = float("nan")
            for i in np.flatnonzero((bad >= 0.04) & (bad < 0.06)):
                vec[i] = vec[i] + [0.5]
            if metric == "angular":
                for i in np.flatnonzero((bad >= 0.06) & (bad < 0.07)):
                    vec[i] = [0.0] * dim
            dup = (bad > 0.96) & (ids > next_id - n + 3)
            ids = np.where(dup, ids - 3, ids)  # an id of this unit: a duplicate in an open window
            secs = np.where(dup, secs + 0.05, secs)
            if u:
                late = rng.random(n) < 0.05
                secs = np.where(late, -1000 - np.round(rng.uniform(0, 5, n), 1), secs)
            t = pa.table({"id": pa.array(ids), "ts": pa.array((T0_US + secs * 1e6).astype(np.int64)).cast(US),
                          "vector": pa.array(vec, pa.list_(pa.float64()))})
            per_side.append(t)
        pieces.append(per_side)
    return conf, pieces


def _s3j_brute_force(conf: dict, pieces: list[list[pa.Table]], out: str) -> set[tuple[int, int, int]]:
    """(left_id, right_id, window start in seconds) of every pair the brute force finds among the
    rows ingest admitted (every row less the quarantined ones: a quarantined row is quarantined
    in all its windows here, by the case's construction)."""
    from deltalake import DeltaTable

    from simjoin.core.metric import brute_force_join

    q = DeltaTable(out + "_quarantine").to_pyarrow_table().to_pylist()
    gone = {(r["side"], r["id"], r["ts"]) for r in q}
    assert all(r["id"] is not None for r in q)
    rows = []
    for per_side in pieces:
        for side, t in enumerate(per_side):
            for r in t.to_pylist():
                if (side, r["id"], r["ts"]) not in gone:
                    rows.append((side, r["id"], (r["ts"] - T0).total_seconds(), r["vector"]))
    size = float(conf["window"][:-1])
    slide = float(conf.get("slide", conf["window"])[:-1])
    two = len(pieces[0]) == 2
    ref = set()
    starts = {s for _, _, ts, _ in rows for s in np.arange(np.floor(ts / slide) * slide - size + slide,
                                                             np.floor(ts / slide) * slide + slide, slide)}
    for w in sorted(starts):
        inside = [r for r in rows if w <= r[2] < w + size]
        if len(inside) < 2:
            continue
        X = np.array([r[3] for r in inside])
        ids = np.array([r[1] for r in inside])
        side = np.array([r[0] for r in inside]) if two else None
        L, R, _ = brute_force_join(X, ids, side, conf["metric"], conf["threshold"])
        ref |= {(int(a), int(b), int(round(w))) for a, b in zip(L, R, strict=True)}
    return ref


def _check_s3j(spark, tmp_path, monkeypatch, seed):
    from deltalake import DeltaTable

    conf, pieces = _s3j_case(seed)
    local = _both(spark, tmp_path, monkeypatch, seed, conf, pieces, "s3j", S3J_TABLES)
    out = str(tmp_path / "local" / "out")
    t = DeltaTable(out).to_pyarrow_table()
    got = [(a, b, int((w - T0).total_seconds())) for a, b, w in zip(
        t.column("left_id").to_pylist(), t.column("right_id").to_pylist(), t.column("window_start").to_pylist(),
        strict=True)]
    assert len(got) == len(set(got)), f"seed {seed}: a pair twice"
    ref = _s3j_brute_force(conf, pieces, out)
    assert set(got) == ref, f"seed {seed}: {len(got)} pairs, the brute force {len(ref)}"
    assert got and local["quarantine"], "the case has pairs and bad rows"
    if conf.get("rebalance") == "split" and seed in S3J_SEEDS:
        assert local["assignment"], f"seed {seed}: the rebalance never fired"
    _check_jobs(tmp_path)


#: fast seeds cover: a self-join with sliding windows and rebalancing on Spark (0), two streams,
#: alternating executors (1) and ClusterJoin (3)
S3J_SEEDS = [0, 1, 3]


# ------------------------------------------------------------------------------------ HyperCube


def _pieces(rng: np.random.Generator, units: int, sides: int, n: int, piece: Any) -> list[list[pa.Table]]:
    """Per unit, each side's appended rows: ``piece(unit, ids, bad)`` with n fresh ids (a few
    turned into an earlier id of the same piece: duplicates) and a uniform ``bad`` draw per row."""
    out: list[list[pa.Table]] = []
    for u in range(units):
        per_side = []
        for k in range(sides):
            first = 1 + (u * sides + k) * n
            ids = np.arange(first, first + n, dtype=np.int64)
            bad = rng.random(n)
            ids = np.where((bad > 0.97) & (ids > first + 3), ids - 3, ids)  # a duplicate id
            per_side.append(piece(u, ids, bad))
        out.append(per_side)
    return out

HYPERCUBE_TABLES = {"output": "", "stats": "_stats", "quarantine": "_quarantine", "tuples": "_state/tuples",
                    "sketch": "_state/sketch", "grids": "_state/grids", "progress": "_state/progress"}


def _hypercube_case(seed: int) -> tuple[dict, list[list[pa.Table]]]:
    """A random HyperCube shape: Zipf keys (keys that turn heavy, grids that grow), p 2-6, whole
    history or a window with lateness, pairs or counts; bad rows: a null key, a duplicate id, late
    rows; rows out of order inside each unit."""
    rng = np.random.default_rng(2000 + seed)
    alpha = float([0.0, 1.2, 1.8][int(rng.integers(0, 3))])
    conf: dict = {"key": "k", "workers": int(rng.integers(2, 7)), "count_only": bool(seed % 3 == 2)}
    window = int(rng.integers(10, 40)) if rng.integers(0, 2) else 0
    if window:
        conf.update(window=f"{window}s", allowed_lateness=f"{int(rng.integers(0, 5))}s")
    dom = 40
    pz = 1.0 / np.arange(1, dom + 1) ** alpha

    def piece(u: int, ids: np.ndarray, bad: np.ndarray) -> pa.Table:
        k = rng.choice(dom, ids.size, p=pz / pz.sum()).astype(np.int64) * 3 + 1
        secs = u * 40 + rng.integers(0, 40, ids.size)
        if u:
            secs = np.where(bad < 0.03, u * 40 - 100, secs)  # late (or, without a window, joined)
        null = (bad >= 0.03) & (bad < 0.05)
        return pa.table({"id": pa.array(ids), "ts": pa.array(T0_US + secs * 1_000_000).cast(US),
                         "k": pa.array(np.where(null, -1, k), mask=null)})

    return conf, _pieces(rng, int(rng.integers(2, 4)), 2, int(rng.integers(80, 200)), piece)


def _check_hypercube(spark, tmp_path, monkeypatch, seed):
    import json
    from collections import Counter

    from deltalake import DeltaTable

    conf, pieces = _hypercube_case(seed)
    local = _both(spark, tmp_path, monkeypatch, seed, conf, pieces, "hypercube", HYPERCUBE_TABLES)
    out = str(tmp_path / "local" / "out")
    q = DeltaTable(out + "_quarantine").to_pyarrow_table().to_pylist()
    gone = Counter((r["side"], r["id"], r["ts"], json.loads(r["row"] or "{}").get("k")) for r in q)
    rows = [[(r["id"], r["k"], r["ts"]) for r in side]
            for side in _kept(pieces, gone, lambda s, r: (s, r["id"], r["ts"], r["k"]))]
    w = float(conf.get("window", "0s")[:-1])
    ref = Counter((a, b, ka) for a, ka, ta in rows[0] for b, kb, tb in rows[1]
                  if ka == kb and (not w or abs((ta - tb).total_seconds()) < w))
    t = DeltaTable(out).to_pyarrow_table()
    if conf["count_only"]:
        got = Counter()
        for k, n in zip(t.column("k").to_pylist(), t.column("pairs").to_pylist(), strict=True):
            got[k] += n
        assert got == Counter(k for _, _, k in ref.elements()), f"seed {seed}: counts differ from the brute force"
    else:
        got = Counter(zip(t.column("left_id").to_pylist(), t.column("right_id").to_pylist(), t.column("k").to_pylist(),
                          strict=True))
        assert got == ref, f"seed {seed}: {sum(got.values())} pairs, the brute force {sum(ref.values())}"
    assert ref and local["quarantine"], "the case has pairs and bad rows"
    _check_jobs(tmp_path)


#: fast seeds cover: pairs on Spark only (0), pairs alternating executors (1), counts (2)
HYPERCUBE_SEEDS = [0, 1, 2]


# ------------------------------------------------------------------------------------------ S2J

S2J_TASKS = {"eq": (lambda l, r: l["a"] == r["a"]), "band": (lambda l, r: abs(l["b"] - r["b"]) <= 1.5),
             "gap": (lambda l, r: l["a"] + 5 < r["b"])}
S2J_TABLES = {**{t: f"/{t}" for t in S2J_TASKS}, "stats": "/_stats", "quarantine": "/_quarantine",
              "blocks": "/_state/blocks", "buffer": "/_state/buffer", "progress": "/_state/progress", "shed": "/_shed"}


def _s2j_case(seed: int) -> tuple[dict, list[list[pa.Table]]]:
    """A random S2J shape: three concurrent tasks (equality, band, inequality), two streams or
    a self-join, a window with lateness, small blocks (several per worker), snapshots every unit or
    every other (pairs wait in the buffer), a capacity that sheds and scales on odd seeds; bad
    rows: a null, a NaN, a duplicate id, late rows; rows out of order inside each unit."""
    rng = np.random.default_rng(3000 + seed)
    two = seed % 4 != 3
    window = int(rng.integers(10, 40))
    conf: dict = {"tasks": "eq: l.a = r.a; band: abs(l.b - r.b) <= 1.5; gap: l.a + 5 < r.b", "window": f"{window}s",
                  "allowed_lateness": f"{int(rng.integers(0, 5))}s", "workers": int(rng.integers(1, 4)),
                  "min_block": 16, "snapshot_every": int(rng.integers(1, 3))}
    if seed % 2:
        conf.update(capacity=int(rng.integers(60, 200)), sustain=1)

    def piece(u: int, ids: np.ndarray, bad: np.ndarray) -> pa.Table:
        secs = u * 40 + rng.integers(0, 40, ids.size)
        a = np.where(bad < 0.02, np.nan, rng.integers(0, 15, ids.size).astype(float))
        b = np.round(rng.uniform(0, 20, ids.size), 1)
        if u:
            secs = np.where((bad >= 0.02) & (bad < 0.05), u * 40 - 200, secs)  # late
        return pa.table({"id": pa.array(ids), "ts": pa.array(T0_US + secs * 1_000_000).cast(US),
                         "a": pa.array(a), "b": pa.array(b, mask=(bad >= 0.05) & (bad < 0.07))})

    return conf, _pieces(rng, int(rng.integers(2, 4)), 2 if two else 1, int(rng.integers(40, 100)), piece)


def _check_s2j(spark, tmp_path, monkeypatch, seed):
    import json
    from collections import Counter

    from deltalake import DeltaTable

    conf, pieces = _s2j_case(seed)
    local = _both(spark, tmp_path, monkeypatch, seed, conf, pieces, "s2j", S2J_TABLES)
    assert local["quarantine"], "the case has bad rows"
    _check_jobs(tmp_path)
    if "capacity" in conf or len(pieces[0]) != 2:  # shedding, or a self-join: the executors agree, checked above
        return
    out = str(tmp_path / "local" / "out")
    q = DeltaTable(out + "/_quarantine").to_pyarrow_table().to_pylist()
    gone = Counter((r["side"], r["id"], r["ts"], repr(json.loads(r["row"] or "{}"))) for r in q)

    def norm(r):
        return repr({c: ("NaN" if r[c] != r[c] else r[c]) for c in ("a", "b") if r[c] is not None})

    rows = _kept(pieces, gone, lambda s, r: (s, r["id"], r["ts"], norm(r)))
    w = float(conf["window"][:-1])
    n_snap = len(pieces) if conf["snapshot_every"] == 1 else (len(pieces) // 2)  # units 1, 3, ... commit one
    for name, pred in S2J_TASKS.items():
        ref = Counter((x["id"], y["id"]) for x in rows[0] for y in rows[1]
                      if abs((x["ts"] - y["ts"]).total_seconds()) < w and pred(x, y))
        t = DeltaTable(out + "/" + name).to_pyarrow_table() if n_snap else None
        got = Counter() if t is None else Counter(zip(t.column("left_id").to_pylist(),
                                                      t.column("right_id").to_pylist(), strict=True))
        if conf["snapshot_every"] == 1:
            assert got == ref, f"seed {seed}, task {name}: {got.total()} pairs, the brute force {ref.total()}"
        else:  # the last unit's pairs may wait in the buffer
            assert not got - ref, f"seed {seed}, task {name}: pairs the brute force lacks"


#: fast seeds cover: two streams on Spark only (0), shedding and scaling with alternating executors (1)
S2J_SEEDS = [0, 1]


CHECKS = {"ineq": _check, "s3j": _check_s3j, "hypercube": _check_hypercube, "s2j": _check_s2j}
FAST = ([("ineq", s) for s in SEEDS] + [("s3j", s) for s in S3J_SEEDS] + [("hypercube", s) for s in HYPERCUBE_SEEDS]
        + [("s2j", s) for s in S2J_SEEDS])
MORE = ([("ineq", s) for s in range(3, 25) if s not in SEEDS] + [("s3j", s) for s in range(2, 20) if s not in S3J_SEEDS]
        + [("hypercube", s) for s in range(3, 16)] + [("s2j", s) for s in range(2, 14)])


@pytest.mark.parametrize("pipeline,seed", FAST)
def test_executors_write_identical_tables(spark, tmp_path, monkeypatch, pipeline, seed):
    CHECKS[pipeline](spark, tmp_path, monkeypatch, seed)


@pytest.mark.exhaustive
@pytest.mark.parametrize("pipeline,seed", MORE)
def test_executors_write_identical_tables_more_seeds(spark, tmp_path, monkeypatch, pipeline, seed):
    CHECKS[pipeline](spark, tmp_path, monkeypatch, seed)


def test_task_results_come_back_through_the_result_folder_or_spark_alike(spark, monkeypatch):
    """A Spark task's output reaches the driver as an Arrow IPC file in a private folder when the
    task sees it (here: local mode), else through Spark's own result path; both give the in-process
    executor's table, and no folder is left behind."""
    import os

    import pyarrow.compute as pc

    from simjoin.runtime import executor
    from simjoin.spark import routing

    schema = pa.schema([("x", pa.int64()), ("y", pa.int64())])
    t = pa.table({"x": pa.array(np.arange(30_000), pa.int64())})
    task = np.arange(30_000) % 4

    def fn(g: pa.Table) -> list[pa.RecordBatch]:
        return pa.table({"x": g.column("x"), "y": pc.multiply(g.column("x"), 3)}).to_batches()

    made: list[str] = []
    real = routing._result_folder

    def record() -> Any:
        got = real()
        if got is not None:
            made.append(got[0])
        return got

    monkeypatch.setattr(routing, "_result_folder", record)
    want = executor.task_table(t, task, fn, schema)
    before = routing.files_read
    via_files = routing.spark_task_table(spark, t, task, fn, schema)
    assert routing.files_read - before == 4  # one file per task
    monkeypatch.setenv(routing.RESULT_FILES_ENV, "0")
    via_spark = routing.spark_task_table(spark, t, task, fn, schema)
    assert routing.files_read - before == 4
    assert via_files.equals(want) and via_spark.equals(want)
    assert len(made) == 1 and not os.path.exists(made[0])  # the second run made none
