"""The set-similarity join's steps on the in-process executor, without Spark: the path choice, the
duplicate rule, the incremental blocks and pairs, and the steps against the core's brute force
(``tests/spark/test_ssj_executors.py`` runs the same steps on Spark)."""

import numpy as np
import pyarrow as pa
import pytest

from simjoin.core.setsim import brute_force_pairs, make_plan
from simjoin.operators import setsim as O
from simjoin.operators import setsim_steps as steps
from simjoin.runtime import executor as E
from simjoin.runtime.placement import choose_path, in_process_bytes

EX = E.InProcessExecutor()

GiB = 2**30


def test_choose_path_rules():
    small = choose_path(1_000_000, 40 * 2**20, 24 * GiB, local_tables=True, cluster=False)
    assert small.in_process and "within 60%" in small.reason
    assert not choose_path(10**6, 10**8, 24 * GiB, local_tables=False, cluster=False).in_process
    huge = choose_path(10**9, 40 * GiB, 24 * GiB, local_tables=True, cluster=False)
    assert not huge.in_process and "over 60%" in huge.reason
    assert not choose_path(5_000_000, 10**8, 24 * GiB, local_tables=True, cluster=True).in_process
    assert choose_path(500_000, 10**7, 24 * GiB, local_tables=True, cluster=True).in_process
    forced = choose_path(10**9, 40 * GiB, 24 * GiB, local_tables=True, cluster=False, requested="in_process")
    assert forced.in_process and forced.reason.startswith("set by the user")
    assert choose_path(1, 1, 24 * GiB, local_tables=True, cluster=False, requested="spark").executor == "spark"
    with pytest.raises(ValueError, match="must be local Delta tables"):
        choose_path(1, 1, GiB, local_tables=False, cluster=False, requested="in_process")
    with pytest.raises(ValueError, match="allowed auto, in_process, spark"):
        choose_path(1, 1, GiB, local_tables=True, cluster=False, requested="gpu")
    assert in_process_bytes(2, 10) > in_process_bytes(1, 10)


def _rows(pairs):
    return pa.table({"side": pa.array([s for s, _, _ in pairs], pa.int32()),
                     "id": pa.array([i for _, i, _ in pairs], pa.int64()),
                     "text": pa.array([t for _, _, t in pairs], pa.string())})


def _tokenize(rows, rows_per_part=E.PARTITION_ROWS):
    tok = steps.tokenize(EX, E.slices(rows, rows_per_part), None)
    return tok, EX.collect(tok.records), EX.collect(tok.bad)


def test_tokenize_marks_repeats_keeps_first_by_text_and_quarantines_bad_rows():
    rows = _rows([(0, 5, "b c"), (0, 1, "a b"), (0, 5, "a c"), (0, 2, None), (0, 3, "  "), (0, None, "x"),
                  (0, 5, "z z"), (0, 4, "a b c")])
    tok, records, bad_rows = _tokenize(rows, 3)  # several partitions: repeats across them
    bad = dict(zip(bad_rows.column("id").to_pylist(), bad_rows.column("reason").to_pylist()))
    assert bad[2] == "null text" and bad[3] == "empty text" and bad[None] == "null id"
    assert sorted(bad_rows.column("reason").to_pylist()).count("duplicate id 5") == 2
    rec = records.to_pylist()
    assert sorted(r["id"] for r in rec) == [1, 4, 5]
    assert sorted(r["rid"] for r in rec) == [0, 1, 2]  # dense, in length order
    d = tok.prof.dictionary.to_pylist()
    five = next(r for r in rec if r["id"] == 5)
    assert sorted(d[t] for t in five["tokens"]) == ["a", "c"]  # "a c" < "b c" < "z z"
    lengths = [r["length"] for r in sorted(rec, key=lambda r: r["rid"])]
    assert lengths == sorted(lengths)


@pytest.mark.parametrize("seed", range(5))
def test_in_process_stages_equal_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 150
    texts = [" ".join(f"w{x}" for x in rng.choice(25, size=rng.integers(1, 7), replace=False)) for _ in range(n)]
    texts += texts[:10]  # exact copies: similarity 1
    ids = list(range(100, 100 + len(texts)))
    tok, records, _ = _tokenize(_rows([(0, i, t) for i, t in zip(ids, texts)]), 37)
    theta = (0.5, 0.6, 0.75, 0.8, 1.0)[seed]
    plan = make_plan(tok.prof.lengths, tok.prof.counts, theta, "jaccard", n=2, m=2)
    got_pairs, stats, _ = steps.join_units(EX, tok.records, plan, False)
    got = EX.collect(got_pairs)
    pairs = set(zip(got.column("left_id").to_pylist(), got.column("right_id").to_pylist()))
    sets = [sorted(set(t.split())) for t in texts]
    vocab = {w: k for k, w in enumerate(sorted({w for s in sets for w in s}))}
    ref = {(ids[x], ids[y]) for x, y, _ in brute_force_pairs([sorted(vocab[w] for w in s) for s in sets], theta)}
    assert pairs == ref and len(pairs) == got.num_rows
    assert sum(s["results"] for s in stats) == len(ref)
    _, f, results, fr = steps.measure_slices(EX, tok.records, theta, "jaccard", False, records.num_rows)
    assert f == 1.0 and fr == 1.0 and sum(results.values()) == len(ref)


def test_increment_blocks_and_self_pairs():
    rec = pa.table({"rid": pa.array([0, 1, 2], pa.int64()), "side": pa.array([0, O.APPENDED, 0], pa.int32()),
                    "id": pa.array([10, 11, 12], pa.int64()), "length": pa.array([1, 1, 1], pa.int32()),
                    "tokens": pa.array([[1], [1], [1]], pa.list_(pa.int32()))})
    (b,) = steps.increment_blocks(EX, [rec], False)
    b = EX.collect(b)
    assert b.column("side").to_pylist() == [0, 1, 1, 1]
    assert b.column("rid").to_pylist() == [2, 1, 3, 5]
    assert steps.appended_id_clash(EX, [rec]) is None
    assert steps.appended_id_clash(EX, [rec.set_column(2, "id", pa.array([10, 10, 12], pa.int64()))]) == 10
    p = pa.table({"left_id": pa.array([11, 11, 12, 11], pa.int64()), "right_id": pa.array([11, 10, 11, 12], pa.int64()),
                  "similarity": [1.0, 0.9, 0.8, 0.8]})
    out = EX.collect(steps.self_pairs(EX, [p.slice(0, 2), p.slice(2)])).sort_by([("left_id", "ascending")])
    assert out.to_pylist() == [{"left_id": 10, "right_id": 11, "similarity": 0.9},
                               {"left_id": 11, "right_id": 12, "similarity": 0.8}]


def test_slices_cover_the_table_once():
    t = pa.table({"x": np.arange(1001)})
    for rows, parts in ((100, None), (5000, 3), (1, 1)):
        got = E.slices(t, rows, parts)
        assert sum(s.num_rows for s in got) == 1001
        assert np.concatenate([s.column("x").to_numpy() for s in got]).tolist() == list(range(1001))
    assert E.slices(pa.table({"x": pa.array([], pa.int64())}))[0].num_rows == 0


def test_no_records_no_units():
    tok, records, bad = _tokenize(_rows([(0, 1, None), (0, 2, "   ")]))
    assert records.num_rows == 0 and bad.num_rows == 2
    plan = make_plan(np.array([1]), np.array([1]), 0.8, "jaccard", n=1, m=1)
    pairs, stats, _ = steps.join_units(EX, tok.records, plan, False)
    assert EX.count(pairs) == 0 and stats == []
    assert EX.count(_tokenize(_rows([]))[0].records) == 0
