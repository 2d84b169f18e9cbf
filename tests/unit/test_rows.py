"""The declared row rules (``simjoin.quality.rows``): each rule's rows and reasons, and the Spark
executor's per-partition task (``tagged_rows``, partitions by (side, id)) giving exactly what the
in-process executor's :func:`check` gives on the whole batch, over many seeds and shapes."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

from simjoin.io.rows import arrow_schema
from simjoin.quality.rows import (
    Bounded,
    Derived,
    InputSpec,
    Late,
    Needed,
    RowContext,
    UniqueIds,
    Vectors,
    Windows,
    check,
    measure,
    pick_meta,
)

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
US = pa.timestamp("us", tz="UTC")


def _batch(rows, payload):
    """rows: (id, seconds or None, payload values..., side)."""
    cols = {"id": [r[0] for r in rows],
            "ts": [None if r[1] is None else T0 + dt.timedelta(seconds=r[1]) for r in rows],
            "ts_raw": [None if r[1] is None else f"t{r[1]}" for r in rows]}
    for k, (name, typ) in enumerate(payload):
        cols[name] = pa.array([r[2 + k] for r in rows], typ)
    cols["side"] = pa.array([r[-1] for r in rows], pa.int8())
    return pa.table({"id": pa.array(cols["id"], pa.int64()), "ts": pa.array(cols["ts"], US),
                     "ts_raw": pa.array(cols["ts_raw"], pa.string()),
                     **{n: cols[n] for n, _ in payload}, "side": cols["side"]})


def _ctx(**kw):
    base = {"now": T0 + dt.timedelta(days=1), "max_future_s": 60.0, "ts_unit": None, "max_ts": {}}
    return RowContext(**{**base, **kw})


def _reasons(got):
    return sorted(zip(got.bad.column("id").to_pylist(), got.bad.column("reason").to_pylist()), key=repr)


VEC = [("vector", pa.list_(pa.float64()))]
S3J = InputSpec(payload=({"vector": "vector"},), what="vector", staged=("id", "ts", "vector", "side"),
                rules=(Vectors("vector", nonzero="angular distance is undefined"), UniqueIds(("ts", "vector"), "seen earlier")),
                windows=Windows(60_000_000, 30_000_000))


def test_vector_rules_name_every_broken_rule_and_fix_the_dimension():
    t = _batch([(1, 1, [1.0, 0.0], 0), (2, 2, [0.0, 0.0], 0), (3, 3, [1.0, 2.0, 3.0], 0), (4, 4, None, 0),
                (5, 5, [float("nan"), 1.0], 0), (6, 6, [None, 1.0], 0), (7, 7, [float("inf"), 0.0, 0.0], 0),
                (8, None, [1.0, 1.0], 0), (None, 8, [1.0, 1.0], 0), (9, 9, [1.0, 1.0], 0), (9, 9, [0.5, 1.0], 0),
                (10, 2e9, [1.0, 1.0], 0), (11, 10, [0.5, 0.5], 0)], VEC)
    got = check(t, S3J, _ctx(seen=pa.table({"side": pa.array([0], pa.int8()), "id": pa.array([11], pa.int64())})))
    assert got.meta == {"dim": 2}
    assert _reasons(got) == sorted([
        (2, "zero vector (angular distance is undefined)"), (3, "vector dimension 3, expected 2"),
        (4, "null vector"), (5, "NaN or inf in vector"), (6, "null element in vector"),
        (7, "NaN or inf in vector; vector dimension 3, expected 2"), (8, "null ts"), (None, "null id"),
        (9, "duplicate id 9"),
        (10, f"future: ts 2089-05-18 03:33:20 is more than 60s past the current time {(T0 + dt.timedelta(days=1)).isoformat()}"),
        (11, "duplicate id 11 (seen earlier)")], key=repr)
    # the duplicate kept is the first by ts, then by the vector ([0.5, 1.0] < [1.0, 1.0])
    kept = {i: v for i, v in zip(got.staged.column("id").to_pylist(), got.staged.column("vector").to_pylist())}
    assert kept[9] == [0.5, 1.0] and sorted(kept) == [1, 9]
    # sliding windows of 60 s every 30 s: two copies per record
    assert got.staged.num_rows == 4 and got.staged.column_names[-2:] == ["window_start", "window_end"]


def test_a_copy_refused_for_itself_does_not_make_its_valid_twin_a_duplicate():
    """Issue 63 point 10: id 5 twice, the first by (ts, vector) a zero vector: the zero vector is
    quarantined for itself only, and the valid copy is staged (it was quarantined as ``duplicate
    id 5``, so both were lost). Two valid copies still keep one."""
    t = _batch([(5, 1, [0.0, 0.0], 0), (5, 2, [1.0, 0.0], 0), (6, 1, [1.0, 1.0], 0), (6, 1, [2.0, 1.0], 0),
                (7, None, [1.0, 1.0], 0), (7, 3, [1.0, 2.0], 0)], VEC)
    got = check(t, S3J, _ctx())
    assert _reasons(got) == sorted([(5, "zero vector (angular distance is undefined)"), (6, "duplicate id 6"),
                                    (7, "null ts")], key=repr)
    kept = {(i, tuple(v)) for i, v in zip(got.staged.column("id").to_pylist(), got.staged.column("vector").to_pylist())}
    assert kept == {(5, (1.0, 0.0)), (6, (1.0, 1.0)), (7, (1.0, 2.0))}


def test_a_known_dimension_holds_and_late_windows_quarantine_one_row_per_record():
    t = _batch([(1, 10, [1.0, 0.0], 0), (2, 100, [1.0, 0.0], 0), (3, 200, [1.0, 0.0, 0.0], 0)], VEC)
    got = check(t, S3J, _ctx(meta={"dim": 3}, watermark=T0 + dt.timedelta(seconds=150), lateness_s=50))
    assert got.meta == {"dim": 3}
    assert dict(_reasons(got)) == {1: "vector dimension 2, expected 3", 2: "vector dimension 2, expected 3"}
    assert got.staged.column("id").to_pylist() == [3, 3]
    got = check(_batch([(1, 10, [1.0, 0.0], 0), (2, 100, [1.0, 0.0], 0)], VEC), S3J,
                _ctx(watermark=T0 + dt.timedelta(seconds=150), lateness_s=50))
    late = _reasons(got)
    # id 1 (windows 0..60 and -30..30) is late once, by the first of its copies; id 2's windows 60..120 and 90..150 end
    # after the closed watermark 100 s: staged
    assert [i for i, _ in late] == [1] and late[0][1].startswith("late: window starting 2026-01-01 00:00:00 ")
    assert "closed at watermark 2026-01-01 00:01:40+00:00 (2026-01-01 00:02:30+00:00 less --allowed-lateness 50s)" \
        in late[0][1]
    assert got.staged.column("id").to_pylist() == [2, 2]


def test_needed_bounded_late_and_derived_columns():
    spec = InputSpec(payload=({"a": "numeric"}, {"b": "numeric"}), what="x", staged=("id", "ts", "side", "k"),
                     rules=(Needed("k", (0,), "key a", finite=False), Needed("k", (1,), "key b", finite=False),
                            Needed("x", (0,)), Bounded("x", 0, 2.0**53, "x too wide"), UniqueIds(("ts", "k")), Late()),
                     derived=(Derived("k", ("a", "b")),))
    cols = [("a", pa.int64()), ("b", pa.int64()), ("x", pa.float64())]
    t = _batch([(1, 10, 5, None, 1.0, 0), (2, 11, None, None, 2.0, 0), (3, 12, None, 7, None, 1),
                (4, 13, None, None, None, 1), (5, 14, 1, None, float("nan"), 0), (6, 15, 1, None, 2.0**60, 0),
                (7, 1, 1, None, 1.0, 0), (8, 1, None, 3, None, 1)], cols)
    got = check(t, spec, _ctx(max_ts={0: T0 + dt.timedelta(seconds=5), 1: T0}))
    assert dict(_reasons(got)) == {
        2: "null key a", 4: "null key b", 5: "NaN or inf in x", 6: "x too wide",
        7: "late: ts 2026-01-01 00:00:01 is before 2026-01-01T00:00:05+00:00, the latest ts its stream already "
           "committed"}
    assert dict(zip(got.staged.column("id").to_pylist(), got.staged.column("k").to_pylist())) == {1: 5, 3: 7, 8: 3}


def _random_batch(rng, n):
    ids = rng.integers(0, max(2, n // 3), n)
    secs = rng.choice([0.0, 1.0, 2.5, 40.0, 61.0, 95.0], n)
    lens = rng.choice([2, 2, 2, 3, 0], n)
    vecs = []
    for k in range(n):
        v = [float(x) for x in rng.choice([0.0, 1.0, -1.0, 0.5], lens[k])]
        r = rng.random()
        vecs.append(None if r < 0.05 else [*v[:-1], float("nan")] if r < 0.1 and v else v)
    rows = [(int(ids[k]) if rng.random() > 0.03 else None, None if rng.random() < 0.03 else float(secs[k]), vecs[k],
             int(rng.integers(0, 2))) for k in range(n)]
    return _batch(rows, VEC)


@pytest.mark.parametrize("seed", range(12))
def test_the_spark_task_over_partitions_by_side_and_id_equals_the_whole_batch_check(seed):
    """``tagged_rows`` is what the Spark executor runs in ``mapInArrow`` over the batch
    repartitioned by (side, id); its rows over any such partitioning equal the in-process
    executor's on the whole batch (the dimension fixed first, as :meth:`_stage_spark` does)."""
    from simjoin.spark.engine.staging import tagged_rows, unit_rows
    from simjoin.spark.engine.units import QUARANTINE_SCHEMA

    rng = np.random.default_rng(seed)
    t = _random_batch(rng, int(rng.integers(1, 80)))
    seen = pa.table({"side": pa.array([0, 1], pa.int8()), "id": pa.array(rng.integers(0, 20, 2), pa.int64())})
    ctx = _ctx(seen=seen, watermark=T0 + dt.timedelta(seconds=float(rng.choice([30, 90]))),
               max_ts={0: T0 + dt.timedelta(seconds=2)})
    spec = S3J if seed % 2 else InputSpec(payload=S3J.payload, what="v", staged=S3J.staged,
                                          rules=(*S3J.rules, Late()))
    args = (["vector"], 3, 7, "c-7", "fp", "c", arrow_schema(QUARANTINE_SCHEMA))
    st, q = unit_rows(check(t, spec, ctx), *args)
    meta = pick_meta(pa.concat_tables([measure(t.slice(i, 7), spec, ctx) for i in range(0, t.num_rows, 7)]),
                     spec, ctx.meta)
    parts = int(rng.integers(1, 5))
    key = (np.asarray(t.column("id").fill_null(-1).to_numpy(), np.int64) * 7
           + np.asarray(t.column("side").to_numpy(), np.int64)) % parts
    out = []
    for p in range(parts):
        piece = t.filter(pa.array(key == p))
        out += list(tagged_rows(iter(piece.to_batches(max_chunksize=5)), t.schema, spec, ctx, meta, args))
    tagged = pa.Table.from_batches(out)
    k = tagged.column("_k").to_numpy()

    def rows(x, cols):
        return sorted(map(repr, x.select(cols).to_pylist()))

    assert rows(tagged.filter(pa.array(k == 0)), st.column_names) == rows(st, st.column_names)
    assert rows(tagged.filter(pa.array(k == 1)), q.column_names) == rows(q, q.column_names)
    assert sum(tagged.filter(pa.array(k == 2)).column("_n").to_pylist()) == t.num_rows
