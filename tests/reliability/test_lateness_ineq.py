"""``simjoin ineq --allowed-lateness`` is exact (issue 37, item 1; docs/operations.md, "Lateness").

A row dated up to the allowed lateness L before the largest ``ts`` its stream committed is joined
as if it had arrived in order - a pair is reported once iff its predicates hold and
``0 <= ts_later - ts_earlier < W``, whatever micro-batches its tuples arrived in - and only rows
further behind are quarantined as ``late``. The reproductions of the issue run through the
pipeline on Spark + Delta; the property tests drive arrival out of order within the lateness
across micro-batches (cuts inside windows, ties in ts and values, rows exactly at the lateness
bound and one microsecond past it), through SPO-Join's steps (many seeds, no Spark) and through
the pipeline (a few seeds; more with ``-m exhaustive``), and compare pair for pair with a brute
force over every accepted row.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from tests.helpers import run_named
from tests.reliability.cases import T0
from tests.unit.test_inequality_stream import QUERIES, brute_force

SECOND = 1_000_000
COLS = ("a", "b", "c")


def _ts(t0: dt.datetime, us: int) -> dt.datetime:
    return t0 + dt.timedelta(microseconds=int(us))


def _append(spark, path, S, idx, t0=T0):
    rows = [(int(S["id"][i]), _ts(t0, S["ts"][i]), *(float(S[c][i]) for c in COLS)) for i in idx]
    spark.createDataFrame(rows, "id long, ts timestamp, a double, b double, c double") \
        .write.format("delta").mode("append").save(path)


def _pairs(path):
    from deltalake import DeltaTable

    t = DeltaTable(path).to_pyarrow_table()
    return list(zip(t.column("left_id").to_pylist(), t.column("right_id").to_pylist(), strict=True))


def _quarantined(spark, output):
    from simjoin.spark import delta

    q = output + "_quarantine"
    if not delta.table_exists(spark, q):
        return []
    return [(r["id"], r["reason"]) for r in spark.read.format("delta").load(q).collect()]


def _rows(rng, n, base, t_lo_s, t_hi_s, vmax=6):
    ts = np.sort(rng.integers(t_lo_s, t_hi_s + 1, n)).astype(np.int64) * SECOND
    return {"id": np.arange(n, dtype=np.int64) * 7 + base, "ts": ts,
            **{c: rng.integers(0, vmax, n).astype(float) for c in COLS}}


def _cat(*streams):
    return {k: np.concatenate([s[k] for s in streams]) for k in streams[0]}


# ----------------------------------------------------------------- (a) the reproductions of the issue


def test_a_lone_outlier_does_not_make_the_next_runs_rows_late(spark, tmp_path):
    """Run 1: normal rows and ONE row 50 minutes ahead of them (inside the default --max-future 1h).
    Run 2: 100 normal rows later than run 1's: none quarantined, every pair published. The outlier
    is dated after the wall clock, so it never advances its stream's committed max ts (issue 56's
    rule; a cap at publish time + 60 s was the one before); run 2's rows are dated 2-4 minutes after run 1 ended, as the next
    micro-batch's ordinary rows are (real micro-batches are minutes apart)."""
    t0 = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(minutes=10)
    rng = np.random.default_rng(37)
    run1 = _rows(rng, 100, 1, 0, 300)  # now - 10 min .. now - 5 min
    outlier = {"id": np.array([999_999]), "ts": np.array([run1["ts"].max() + 50 * 60 * SECOND]),
               **{c: np.array([3.0]) for c in COLS}}
    conf = {"left": str(tmp_path / "s"), "output": str(tmp_path / "out"), "where": "l.a < r.a AND l.b <= r.b",
            "window": "30m", "workers": 2}
    _append(spark, conf["left"], _cat(run1, outlier), range(101), t0)
    run_named(spark, "ineq", **conf)
    after = int((dt.datetime.now(dt.UTC) - t0).total_seconds())
    run2 = _rows(rng, 100, 5, after + 120, after + 240)
    _append(spark, conf["left"], run2, range(100), t0)
    run_named(spark, "ineq", **conf)
    assert _quarantined(spark, conf["output"]) == []
    S = _cat(run1, outlier, run2)
    from simjoin.core.inequality.query import parse_query
    from simjoin.core.inequality.spo import Window

    got = _pairs(conf["output"])
    ref = brute_force(parse_query(conf["where"]), S, None, Window(time_us=30 * 60 * SECOND), None, None)
    assert len(got) == len(set(got)) and sorted(got) == ref
    # the two runs' normal rows are within the window of each other: the second run found pairs
    ids1, ids2 = set(run1["id"].tolist()), set(run2["id"].tolist())
    assert any(a in ids2 and b in ids1 for a, b in got)


def test_a_rows_30s_behind_the_committed_max_join_with_allowed_lateness_60s(spark, tmp_path):
    """Run 2's rows up to 30 s older than what the stream committed (about 40 of 100 were
    quarantined without a lateness): with --allowed-lateness 60s none is, and the join is exact."""
    rng = np.random.default_rng(3)
    run1 = _rows(rng, 100, 1, 0, 100)
    run2 = _rows(rng, 100, 2, 70, 145)
    mark = int(run1["ts"].max())
    assert int((run2["ts"] < mark).sum()) >= 30 and int(run2["ts"].min()) >= mark - 30 * SECOND
    conf = {"left": str(tmp_path / "s"), "output": str(tmp_path / "out"), "where": "l.a < r.a AND l.b >= r.b",
            "window": "20s", "slide": "2s", "workers": 2, "allowed_lateness": "60s"}
    _append(spark, conf["left"], run1, rng.permutation(100))
    run_named(spark, "ineq", **conf)
    _append(spark, conf["left"], run2, rng.permutation(100))
    run_named(spark, "ineq", **conf)
    assert _quarantined(spark, conf["output"]) == []
    from simjoin.core.inequality.query import parse_query
    from simjoin.core.inequality.spo import Window

    got = _pairs(conf["output"])
    ref = brute_force(parse_query(conf["where"]), _cat(run1, run2), None, Window(time_us=20 * SECOND), None, None)
    assert len(got) == len(set(got)) and sorted(got) == ref and len(ref) > 200


def test_a_count_window_refuses_a_lateness_with_one_line(spark, tmp_path):
    from simjoin.config import ConfigError

    with pytest.raises(ConfigError, match=r"^invalid config ineq.allowed_lateness='60s': allowed 0s with "
                                          r"--window-count[^\n]*$"):
        run_named(spark, "ineq", left=str(tmp_path / "s"), output=str(tmp_path / "out"), where="l.a < r.a",
                  window_count=10, allowed_lateness="60s")


# ----------------------------------------------------------------- (b) out-of-order arrival, many seeds


def _case(seed):
    """Streams whose rows arrive up to the lateness L after their ts, cut into units by arrival
    time (cuts fall inside windows), plus, in the last unit, per side a row exactly L behind what
    the side committed (on time), one a microsecond further and one seconds further (both late)."""
    rng = np.random.default_rng(1000 + seed)
    self_join = seed % 2 == 0
    lateness_s = int(rng.choice([3, 10, 30]))
    w_s = int(rng.choice([2, 5, 10, 20]))
    span = int(rng.integers(20, 80))
    k = int(rng.integers(3, 5))
    cut_at = np.sort(rng.uniform(0, span + lateness_s, k - 1))
    streams, units = [], []
    for side in range(1 if self_join else 2):
        n = int(rng.integers(25, 60))
        S = _rows(rng, n, 11 + side * 100_003, 0, span)
        arrival = S["ts"] / SECOND + rng.integers(0, lateness_s + 1, n)
        u = np.searchsorted(cut_at, arrival, side="right").astype(np.int64)
        last = k - 1
        prev = S["ts"][u < last]
        if len(prev):
            mark = int(prev.max())
            lag = lateness_s * SECOND
            extra = {"id": 90_000 + side * 10 + np.arange(3, dtype=np.int64),
                     "ts": np.array([mark - lag, mark - lag - 1, mark - lag - int(rng.integers(1, 20)) * SECOND]),
                     **{c: rng.integers(0, 6, 3).astype(float) for c in COLS}}
            S, u = _cat(S, extra), np.concatenate([u, np.full(3, last)])
        streams.append(S)
        units.append(u)
    where = QUERIES[int(rng.integers(0, len(QUERIES)))]
    merge = {"merge_every": int(rng.integers(2, 12))} if rng.integers(0, 2) else {"slide": f"{rng.choice([1, 2])}s"}
    return {"self_join": self_join, "lateness_s": lateness_s, "window_s": w_s, "where": where, "merge": merge,
            "streams": streams, "units": units, "k": k}


def _expected(c):
    """Per side, which rows are late by the rule (dated more than L before the max ts of the
    side's rows accepted by earlier units), and the brute-force pairs of the accepted rows."""
    from simjoin.core.inequality.query import parse_query
    from simjoin.core.inequality.spo import Window

    late_ids, kept = set(), []
    for S, u in zip(c["streams"], c["units"], strict=True):
        ok = np.ones(len(u), bool)
        for k in range(c["k"]):
            before = ok & (u < k)
            if before.any():
                mark = int(S["ts"][before].max())
                ok &= ~((u == k) & (S["ts"] < mark - c["lateness_s"] * SECOND))
        late_ids |= set(S["id"][~ok].tolist())
        kept.append({key: v[ok] for key, v in S.items()})
    R = None if c["self_join"] else kept[1]
    ref = brute_force(parse_query(c["where"]), kept[0], R, Window(time_us=c["window_s"] * SECOND), None, None)
    return ref, late_ids


def _drive(c):
    """The pipeline's unit loop on SPO-Join's steps without Spark (as ``jobs/ineq`` runs them):
    late rows dropped by the rule, every state row and the new tuples probed, merge, expiry with
    the lateness after every unit. Returns (pairs in publication order, late ids, most live tuples)."""
    from simjoin.core.inequality.spo import (
        BATCH,
        MUTABLE,
        NEW,
        IneqParams,
        Window,
        expired,
        merge_state,
        new_tuples,
        probe_row,
        read_mutable,
    )

    m = c["merge"]
    slide = int(m["slide"][:-1]) * SECOND if "slide" in m else None
    p = IneqParams(c["where"], c["self_join"], Window(time_us=c["window_s"] * SECOND), 2, m.get("merge_every"),
                   slide, c["lateness_s"] * SECOND)
    q = p.query
    state: list[dict] = []
    counts: dict[int, int] = {}
    max_ts: dict[int, int] = {}
    next_batch, out, late, most = 0, [], set(), 0
    for k in range(c["k"]):
        side_l, cols_l = [], []
        for s, (S, u) in enumerate(zip(c["streams"], c["units"], strict=True)):
            m_k = u == k
            if s in max_ts:
                bad = m_k & (S["ts"] < max_ts[s] - p.lateness_us)
                late |= set(S["id"][bad].tolist())
                m_k &= ~bad
            side_l.append(np.full(int(m_k.sum()), s))
            cols_l.append({key: v[m_k] for key, v in S.items()})
        side = np.concatenate(side_l)
        cols = {key: np.concatenate([x[key] for x in cols_l]) for key in ("id", "ts", *COLS)}
        if not len(side):
            continue
        new = new_tuples(side, cols["id"], cols["ts"], cols, p, counts)
        for row in [*state, {"kind": NEW, "side": 0, "batch_id": -1}]:
            lid, rid, _, _ = probe_row(q, row, new, p.window, p.self_join)
            out += list(zip(lid.tolist(), rid.tolist(), strict=True))
        rows, next_batch, _ = merge_state(read_mutable([r for r in state if r["kind"] == MUTABLE]), new, p,
                                          next_batch)
        state = [r for r in state if r["kind"] != MUTABLE] + rows
        for s, t in new.items():
            counts[s] = counts.get(s, 0) + len(t)
            if len(t):
                max_ts[s] = max(max_ts.get(s, int(t.ts.max())), int(t.ts.max()))
        state = [r for r in state if r["kind"] != BATCH or not expired(
            p.window, r["ts_max"], r["seq_max"], max_ts.get(r["side"] if p.self_join else 1 - r["side"]),
            counts.get(r["side"], 0), p.lateness_us)]
        most = max(most, sum(r["n"] for r in state))
    return out, late, most


def _check_core(seed):
    c = _case(seed)
    ref, late_ids = _expected(c)
    got, late, _ = _drive(c)
    assert late == late_ids and late, f"seed {seed}: late {sorted(late)} != {sorted(late_ids)}"
    assert len(got) == len(set(got)), f"seed {seed}: {len(got) - len(set(got))} pairs repeated"
    assert sorted(got) == ref, (f"seed {seed}: {len(set(ref) - set(got))} missing, "
                                f"{len(set(got) - set(ref))} extra")


@pytest.mark.parametrize("seed", range(60))
def test_b_steps_out_of_order_within_lateness_equal_brute_force(seed):
    _check_core(seed)


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("seed", range(60, 600))
def test_b_steps_out_of_order_within_lateness_equal_brute_force_more_seeds(seed):
    _check_core(seed)


def test_b_state_is_kept_the_lateness_longer_and_no_longer():
    """Expiry uses the other side's committed max ts - W - L: the state stays bounded."""
    rng = np.random.default_rng(5)
    n = 1500
    S = _rows(rng, n, 0, 0, n)  # about one tuple a second
    arrival = S["ts"] / SECOND + rng.integers(0, 31, n)
    u = np.searchsorted(np.arange(100, n + 31, 100), arrival, side="right")
    c = {"self_join": True, "lateness_s": 30, "window_s": 20, "where": "l.a < r.a AND l.b > r.b",
         "merge": {"merge_every": 10}, "streams": [S], "units": [u], "k": int(u.max()) + 1}
    got, late, most = _drive(c)
    ref, late_ids = _expected(c)
    assert late == late_ids == set() and sorted(got) == ref
    assert most < 20 + 30 + 100 + 2 * 10 + 40, most


def _check_pipeline(spark, tmp_path, seed):
    c = _case(seed)
    ref, late_ids = _expected(c)
    m = c["merge"]
    conf = {"left": str(tmp_path / "l"), "output": str(tmp_path / "out"), "where": c["where"],
            "window": f"{c['window_s']}s", "allowed_lateness": f"{c['lateness_s']}s", "workers": 2, **m}
    if not c["self_join"]:
        conf["right"] = str(tmp_path / "r")
    rng = np.random.default_rng(seed)
    for k in range(c["k"]):
        for path, S, u in zip((conf["left"], conf.get("right")), c["streams"], c["units"], strict=False):
            # arrival order inside a unit is any; a stream without rows in a unit commits none
            _append(spark, path, S, rng.permutation(np.flatnonzero(u == k)))
        run_named(spark, "ineq", **conf)
    got = _pairs(conf["output"])
    q = _quarantined(spark, conf["output"])
    assert {i for i, _ in q} == late_ids and len(q) == len(late_ids) and late_ids, f"seed {seed}: {q}"
    assert all(r.startswith("late: ts ") and f"more than {c['lateness_s']}s before" in r for _, r in q), q
    assert len(got) == len(set(got)), f"seed {seed}: {len(got) - len(set(got))} pairs repeated"
    assert sorted(got) == ref, (f"seed {seed}: {len(set(ref) - set(got))} missing, "
                                f"{len(set(got) - set(ref))} extra")


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("seed", [0])
def test_b_pipeline_out_of_order_within_lateness_equals_brute_force(spark, tmp_path, seed):
    _check_pipeline(spark, tmp_path, seed)


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("seed", range(1, 12))
def test_b_pipeline_out_of_order_within_lateness_more_seeds(spark, tmp_path, seed):
    _check_pipeline(spark, tmp_path, seed)
