"""The set-similarity join pipeline on Spark + Delta, pair-for-pair against brute force."""

import random

import pytest

from jobs.ssj.config import SSJConfig
from simjoin.config import ConfigError
from simjoin.core.setsim import brute_force_pairs
from simjoin.operators import setsim as O
from simjoin.spark import delta
from tests.helpers import run_ssj


def _words(text):
    return sorted(set(text.lower().split()))


def _reference(rows, theta, sim="jaccard", right=None, tokenize=_words):
    """Brute force over the raw texts: positions -> ids; R-S pairs as (left id, right id)."""
    recs = [(0, i, tokenize(t)) for i, t in rows if t is not None and t.strip()]
    if right is not None:
        recs += [(1, i, tokenize(t)) for i, t in right if t is not None and t.strip()]
    recs = [r for r in recs if r[2]]
    vocab = {w: k for k, w in enumerate(sorted({w for _, _, s in recs for w in s}))}
    sets = [sorted(vocab[w] for w in s) for _, _, s in recs]
    side = [r[0] for r in recs] if right is not None else None
    out = {}
    for x, y, s in brute_force_pairs(sets, theta, sim, side=side):
        a, b = recs[x], recs[y]
        if right is not None:
            key = (a[1], b[1]) if a[0] == 0 else (b[1], a[1])
        else:
            key = (min(a[1], b[1]), max(a[1], b[1]))
        out[key] = s
    return out


def _random_texts(n, seed, universe=40):
    rng = random.Random(seed)
    words = [f"t{k}" for k in range(universe)]
    rows = []
    for i in range(n):
        r = rng.random()
        if r < 0.15 and rows:
            rows.append((i * 3 + 1, rng.choice(rows)[1]))          # identical record
        elif r < 0.25:
            rows.append((i * 3 + 1, rng.choice(words)))            # one-token record
        elif r < 0.28:
            rows.append((i * 3 + 1, " ".join(rng.sample(words, 35))))  # very long record
        else:
            k = rng.randint(2, 8)
            rows.append((i * 3 + 1, " ".join(rng.choices(words[:15], k=k))))  # Zipf-ish: small vocabulary
    # ties exactly at 0.5 / 0.75 / 0.8 / 1.0
    rows += [(9001, "a b c d"), (9002, "a b c"), (9003, "a b c d e"), (9004, "a b"), (9005, "A B C D")]
    return rows


def _run(spark, tmp_path, rows, theta, right=None, **kw):
    src = str(tmp_path / "left")
    delta.overwrite(spark.createDataFrame(rows, "id long, text string"), src)
    rpath = None
    if right is not None:
        rpath = str(tmp_path / "right")
        delta.overwrite(spark.createDataFrame(right, "id long, text string"), rpath)
    out = str(tmp_path / "pairs")
    res = run_ssj(spark, input=src, output=out, threshold=theta, right=rpath, **kw)
    got = {(r.left_id, r.right_id): r.similarity for r in delta.read_table(spark, out).collect()}
    n = delta.read_table(spark, out).count()
    assert n == len(got), "duplicate pairs"
    return res, got


def _assert_same(got, ref):
    assert set(got) == set(ref), (sorted(set(ref) - set(got))[:5], sorted(set(got) - set(ref))[:5])
    for k, s in ref.items():
        assert abs(got[k] - s) < 1e-12


@pytest.mark.parametrize("theta,sim,workers,mod", [
    (0.5, "jaccard", 3, 2), (0.75, "jaccard", None, None), (0.8, "jaccard", 2, 3), (1.0, "jaccard", 2, 1),
    (0.6, "cosine", 2, 2), (0.7, "dice", 3, 1),
])
def test_self_join_equals_brute_force(spark, tmp_path, theta, sim, workers, mod):
    rows = _random_texts(220, seed=int(theta * 100))
    res, got = _run(spark, tmp_path, rows, theta, similarity=sim, workers=workers, mod=mod)
    ref = _reference(rows, theta, sim)
    _assert_same(got, ref)
    assert all(a < b for a, b in got)
    assert res.pairs == len(ref) > 0
    if theta == 0.75:
        assert (9001, 9002) in got and got[(9001, 9002)] == 0.75  # tie at θ is included
    if theta == 1.0:
        assert (9001, 9005) in got  # case-folded identical records


def test_small_memory_forces_more_units_same_pairs(spark, tmp_path):
    """--memory-gb below every t = 4 candidate's estimate: the search prunes them all (the plan table
    says why), doubles t, and the join gives the same pairs as with ample memory."""
    from simjoin.core.setsim import RamFactors

    rows = _random_texts(400, seed=5)
    _, ample = _run(spark, tmp_path, rows, 0.6)
    plan = delta.read_table(spark, str(tmp_path / "pairs_plan")).filter("kind = 'candidate'").collect()
    assert {(r.t, r.n, r.m) for r in plan} == {(4, 1, 4), (4, 2, 2), (4, 4, 1)}
    assert sum(r.verdict == "chosen" for r in plan) == 1 and all(r.reason for r in plan)
    limit = RamFactors.kernel().static_bytes + min(r.est_ram_bytes for r in plan) - 1
    _, small = _run(spark, tmp_path / "small", rows, 0.6, memory_gb=limit / 2**30)
    plan = delta.read_table(spark, str(tmp_path / "small" / "pairs_plan")).collect()
    cands = [r for r in plan if r.kind == "candidate"]
    assert all(r.verdict == "pruned" and "GiB per unit" in r.reason for r in cands if r.t == 4)
    units = [r for r in plan if r.kind == "unit"]
    assert len(units) >= 8 and max(r.est_ram_bytes for r in units) <= limit - RamFactors.kernel().static_bytes
    assert small == ample and len(small) == len(_reference(rows, 0.6)) > 0


def test_rs_join_equals_brute_force(spark, tmp_path):
    left = _random_texts(120, seed=11)
    right = [(i + 100000, t) for i, t in _random_texts(90, seed=12)]
    _, got = _run(spark, tmp_path, left, 0.6, right=right, workers=2, mod=2)
    ref = _reference(left, 0.6, right=right)
    _assert_same(got, ref)
    assert all(a < 100000 <= b for a, b in got)  # (left id, right id)


def test_qgram_tokenizer(spark, tmp_path):
    names = [(1, "Jonathan Smith"), (2, "Jonathon Smith"), (3, "Jon Smyth"), (4, "Anna Karenina"), (5, "ab"),
             (6, "anna karenina")]
    _, got = _run(spark, tmp_path, names, 0.5, tokenizer="qgram:3")

    def grams(t):
        t = t.lower()
        return sorted({t[i:i + 3] for i in range(max(len(t) - 2, 1))})

    _assert_same(got, _reference(names, 0.5, tokenize=grams))
    assert (4, 6) in got and (1, 2) in got


def test_quarantine_counts_and_no_loss(spark, tmp_path):
    rows = [(1, "a b"), (2, "a b"), (3, "  "), (4, None), (5, "a b c"), (5, "dup id"), (None, "a")]
    res, got = _run(spark, tmp_path, rows, 0.6)
    assert (res.records, res.quarantined) == (3, 4)
    q = delta.read_table(spark, str(tmp_path / "pairs_quarantine")).collect()
    assert sorted(r.reason for r in q) == ["duplicate id 5", "empty text", "null id", "null text"]
    assert set(got) == {(1, 2), (1, 5), (2, 5)}


def test_bad_input_fails_early_with_clear_message(spark, tmp_path):
    src = str(tmp_path / "in")
    delta.overwrite(spark.createDataFrame([(1, "a")], "key long, body string"), src)
    with pytest.raises(ValueError, match="column 'id' not found"):
        run_ssj(spark, input=src, output=str(tmp_path / "o"), threshold=0.5)
    with pytest.raises(ConfigError, match=r"ssj.threshold=1.2: allowed 0 < threshold <= 1"):
        SSJConfig(threshold=1.2)
    with pytest.raises(FileNotFoundError, match="no Delta table"):
        run_ssj(spark, input=str(tmp_path / "missing"), output=str(tmp_path / "o"), threshold=0.5)


def test_rerun_same_run_id_replaces_not_appends(spark, tmp_path):
    rows = _random_texts(80, seed=3)
    _, first = _run(spark, tmp_path, rows, 0.7, workers=2, mod=2)
    _, second = _run(spark, tmp_path, rows, 0.7, workers=2, mod=2)
    assert first == second
    stats = delta.read_table(spark, str(tmp_path / "pairs_stats"))
    assert stats.count() == 4 and stats.groupBy().sum("results").first()[0] == len(first)
    plan = delta.read_table(spark, str(tmp_path / "pairs_plan")).collect()
    assert sorted((r.node, r.modgroup) for r in plan) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_tokenize_finds_repeated_ids_inside_and_across_partitions(spark):
    """Repeated (side, id) keys: each kept once (the first good row by text), the others
    quarantined as ``duplicate id``, found inside one partition or across partitions (then by a
    shuffle of the good ids), on Spark and in process alike."""

    from simjoin.operators import setsim_steps as steps
    from simjoin.runtime.executor import InProcessExecutor, slices
    from simjoin.spark.executor import SparkExecutor

    def dups(rows, parts, by_range=True):
        df = spark.createDataFrame(rows, "side int, id long, text string")
        df = df.repartitionByRange(parts, "id") if by_range else df.repartition(parts)
        got = []
        for ex, data in ((SparkExecutor(spark), df), (InProcessExecutor(), slices(df.toArrow(), 1 + len(rows) // parts))):
            tok = steps.tokenize(ex, data, None)
            bad = ex.collect(tok.bad)
            kept = {(r["side"], r["id"]): r for r in ex.collect(tok.records).to_pylist()}
            got.append((sorted({(r["side"], r["id"]) for r in bad.to_pylist() if r["reason"].startswith("duplicate")}),
                        sorted(kept)))
            ex.release(tok.records)
            ex.release(tok.tokenized)
        assert got[0] == got[1]
        return got[0][0]

    inside = [(0, i, "a b") for i in range(20)] + [(0, 3, "c"), (0, 15, "d"), (0, 15, "e")]
    assert dups(inside, 1) == [(0, 3), (0, 15)]
    assert dups(inside, 3) == [(0, 3), (0, 15)]  # disjoint ranges: each repeat stays in one partition
    across = [(0, i, "a") for i in range(10)] + [(0, 5, "b")]
    assert dups(across, 2, by_range=False) == [(0, 5)]  # ranges overlap: found by the shuffle
    # the same id on the two sides of an R-S join is no repeat; a bad row is no repeat either
    assert dups([(0, 1, "a"), (1, 1, "a"), (0, 2, None), (0, 2, "b")], 2) == []



def test_partition_keys_match_spark_hash(spark):
    import numpy as np
    from pyspark.sql import functions as F

    from simjoin.spark.routing import partition_keys, spark_hash_long

    vals = [0, 1, -1, 42, 2**31, 2**32 + 5, -2**63, 2**63 - 1] + list(range(100, 164))
    want = [r[0] for r in spark.createDataFrame([(v,) for v in vals], "v long").select(F.hash("v")).collect()]
    assert spark_hash_long(np.array(vals)).tolist() == want
    for n in (1, 4, 13):
        keys = spark.createDataFrame([(int(k),) for k in partition_keys(n)], "k long")
        assert [r[0] for r in keys.select(F.pmod(F.hash("k"), F.lit(n))).collect()] == list(range(n))


@pytest.mark.parametrize("rs", [False, True])
def test_measure_slices_equals_the_core_on_all_records(spark, rs):
    """One scan of the records, counts summed per partition and merged on the driver: at fraction
    1 the same W(i) and result pairs per slice as the core computes over all records at once."""
    import numpy as np
    import pyarrow as pa

    from simjoin.core.setsim.work import prefix_counts, slice_results, slice_work
    from simjoin.operators.setsim_steps import measure_slices
    from simjoin.runtime.executor import InProcessExecutor, slices
    from simjoin.spark.executor import SparkExecutor
    from simjoin.spark.session import arrow_frame

    rng = np.random.default_rng(3)
    n = 3000
    lengths = rng.integers(1, 12, n)
    recs = [np.unique(rng.zipf(1.4, k) % 400).astype(np.int32) for k in lengths]
    recs.sort(key=len)
    tokens = pa.array([r.tolist() for r in recs], pa.list_(pa.int32()))
    side = (rng.random(n) < 0.5).astype(np.int32) if rs else np.zeros(n, np.int32)
    table = pa.table({"rid": np.arange(n, dtype=np.int64), "side": side, "id": np.arange(n, dtype=np.int64) * 7,
                      "tokens": tokens})
    records = arrow_frame(spark, table).repartition(3)
    ex = SparkExecutor(spark)
    work, f_w, results, f_r = measure_slices(ex, records, 0.6, "jaccard", rs, n, work_rows=n, result_rows=n)
    assert f_w == f_r == 1.0
    flat, off = O.token_csr(tokens)
    assert work == pytest.approx(slice_work(*prefix_counts(flat, off, side, 0.6), theta=0.6, rs=rs))
    assert results == slice_results(flat, off, np.arange(n), side, 0.6, rs=rs)
    _, f_half, _, f_tenth = measure_slices(ex, records, 0.6, "jaccard", rs, n, work_rows=n // 2,
                                           result_rows=n // 10)
    assert (f_half, f_tenth) == (0.5, 0.1)
    # in process: the same per-partition scan and merge, the same sample (drawn by side and id, not
    # by rid or partition) at a sampled fraction too
    big = 2_000_000  # as if sampled from 2M records: 1/4 of the work rows, 1/100 of the result rows
    spark_got = measure_slices(ex, records, 0.6, "jaccard", rs, big)
    local_got = measure_slices(InProcessExecutor(), slices(table.take(np.random.default_rng(1).permutation(n)), 700),
                               0.6, "jaccard", rs, big)
    assert spark_got[1] == local_got[1] and spark_got[3] == local_got[3] < 1
    assert spark_got[0] == pytest.approx(local_got[0]) and spark_got[2] == pytest.approx(local_got[2])


def test_token_csr_joins_sliced_chunks():
    import numpy as np
    import pyarrow as pa


    lists = pa.list_(pa.int32())
    chunked = pa.chunked_array([pa.array([[1, 2], [3], []], lists).slice(1), pa.array([[4, 5, 6]], lists)])
    flat, off = O.token_csr(chunked)
    assert flat.dtype == np.int32 and flat.tolist() == [3, 4, 5, 6] and off.tolist() == [0, 1, 1, 4]
    flat, off = O.token_csr(pa.chunked_array([], lists))
    assert flat.size == 0 and off.tolist() == [0]
