"""Incremental ssj runs: a run on top of a published one joins only the appended records, and its
output equals brute force over the whole input, pair for pair, across several appends, for the
self-join and the R-S join. Where it cannot build on a run, it joins in full and says why."""

import random

import pytest

from simjoin.spark import delta
from tests.helpers import run_named
from tests.spark.test_ssj import _assert_same, _random_texts, _reference


def _good(rows):
    """Rows as the pipeline keeps them: text with a token, one row per id (the first by text)."""
    keep = {}
    for i, t in rows:
        if i is None or t is None or not t.split():
            continue
        if i not in keep or t < keep[i]:
            keep[i] = t
    return sorted(keep.items())


def _more(rng, first_id, n, old):
    """Appended rows: new texts, copies of old texts (exact ties), bad rows, and an id repeated
    inside the batch."""
    words = [f"t{k}" for k in range(15)]
    rows = []
    for j in range(n):
        i, r = first_id + 3 * j, rng.random()
        if r < 0.25 and old:
            rows.append((i, rng.choice(old)[1]))
        elif r < 0.3:
            rows.append((i, None if r < 0.28 else "   "))
        else:
            rows.append((i, " ".join(rng.choices(words, k=rng.randint(1, 7)))))
    rows.append((rows[0][0], "t1 t2 t3 zz"))  # the same id twice in one append
    return rows


def _write(spark, path, rows, version=None):
    df = spark.createDataFrame(rows, "id long, text string")
    if version is None:
        delta.overwrite(df, path)
    else:
        delta.append_idempotent(df, path, "test", version)


def _increment(spark, out, run_id):
    r = delta.read_table(spark, out + "_increments").filter(f"run_id = '{run_id}'").collect()
    assert len(r) == 1
    return r[0]


def _pairs(spark, out, run_id):
    rows = delta.read_table(spark, out).filter(f"run_id = '{run_id}'").collect()
    got = {(r.left_id, r.right_id): r.similarity for r in rows}
    assert len(got) == len(rows), "duplicate pairs"
    return got


MORE = [pytest.mark.slow, pytest.mark.exhaustive]  # make test-exhaustive
CASES = [  # seed, threshold, similarity, workers, mod
    # make test: tests/reliability/test_ssj_paths.py runs this same check (jaccard 0.6, 2 workers, mod 2:
    # a base run, an append, the incremental run against brute force) under two paths and a partitioned input
    pytest.param(1, 0.6, "jaccard", 2, 2, marks=MORE),
    pytest.param(2, 0.75, "cosine", None, None, marks=MORE),
    pytest.param(3, 0.5, "dice", 3, 1, marks=MORE),
    pytest.param(4, 0.8, "jaccard", 2, 3, marks=MORE),
    pytest.param(5, 1.0, "jaccard", 1, 2, marks=MORE),
]


@pytest.mark.parametrize("seed,theta,sim,workers,mod", CASES)
def test_self_join_appends_are_joined_incrementally_and_exactly(spark, tmp_path, seed, theta, sim, workers, mod):
    rng = random.Random(seed)
    src, out = str(tmp_path / "sets"), str(tmp_path / "pairs")
    rows = _random_texts(90, seed)
    _write(spark, src, rows)
    kw = {"input": src, "output": out, "threshold": theta, "similarity": sim, "workers": workers, "mod": mod}
    run_named(spark, "ssj", run_id="r0", **kw)
    assert _increment(spark, out, "r0")["mode"] == "full"
    for k in range(1, 3 if seed == 1 else 4):  # the fast seed: two appends
        more = _more(rng, 10_000 * k, 25 + 10 * k, rows)
        _write(spark, src, more, version=k)
        rows = rows + more
        _, res = run_named(spark, "ssj", run_id=f"r{k}", **kw)
        inc = _increment(spark, out, f"r{k}")
        assert (inc["mode"], inc["base_run"]) == ("incremental", f"r{k - 1}"), inc["reason"]
        assert inc["new_records"] == len(_good(more))  # every good appended row, once
        got = _pairs(spark, out, f"r{k}")
        _assert_same(got, _reference(_good(rows), theta, sim))
        assert all(a < b for a, b in got)
        assert inc["pairs"] == len(got) == res["rounds"][-1]["publish"]["pairs"]


@pytest.mark.parametrize("seed", [7, pytest.param(8, marks=MORE)])
def test_rs_join_appends_on_either_side_are_joined_incrementally_and_exactly(spark, tmp_path, seed):
    rng = random.Random(seed)
    lp, rp, out = str(tmp_path / "left"), str(tmp_path / "right"), str(tmp_path / "pairs")
    left = _random_texts(70, seed)
    right = [(i + 500_000, t) for i, t in _random_texts(60, seed + 100)]
    _write(spark, lp, left)
    _write(spark, rp, right)
    kw = {"input": lp, "right": rp, "output": out, "threshold": 0.6, "workers": 2, "mod": 2}
    run_named(spark, "ssj", run_id="r0", **kw)
    # make test (seed 7): one append on both sides (new x old, old x new and new x new pairs)
    for k, which in enumerate(("both",) if seed == 7 else ("left", "right", "both"), start=1):
        if which in ("left", "both"):
            more = _more(rng, 100_000 * k, 30, left)
            _write(spark, lp, more, version=k)
            left = left + more
        if which in ("right", "both"):
            more = _more(rng, 600_000 + 100_000 * k, 30, right)
            _write(spark, rp, more, version=k)
            right = right + more
        run_named(spark, "ssj", run_id=f"r{k}", **kw)
        inc = _increment(spark, out, f"r{k}")
        assert inc["mode"] == "incremental", inc["reason"]
        _assert_same(_pairs(spark, out, f"r{k}"), _reference(_good(left), 0.6, right=_good(right)))


def test_a_full_join_when_it_cannot_build_on_a_run_and_it_says_why(spark, tmp_path):
    src, out = str(tmp_path / "sets"), str(tmp_path / "pairs")
    rows = _random_texts(60, 21)
    _write(spark, src, rows)
    kw = {"input": src, "output": out, "threshold": 0.6}

    def step(run_id, why, **more_kw):
        run_named(spark, "ssj", run_id=run_id, **{**kw, **more_kw})
        inc = _increment(spark, out, run_id)
        assert inc["mode"] == "full" and why in inc["reason"], inc["reason"]
        _assert_same(_pairs(spark, out, run_id), _reference(_good(rows), more_kw.get("threshold", 0.6)))

    step("a", "no published run")
    # other parameters: no base
    step("b", "with these parameters", threshold=0.7)
    # an appended id that an earlier row holds: which row is kept could change
    clash = [(rows[5][0], "t1 t2 t3 t4 t5 t6 t7"), (777_777, "t1 t2")]
    _write(spark, src, clash, version=1)
    rows = rows + clash
    step("c", f"the appended row id {rows[5][0]} repeats an id")
    # the input rewritten (overwrite): its rows may have moved
    rows = rows[10:]
    _write(spark, src, rows)
    step("d", "not an append")
    # the base run's pairs deleted from the output
    more = [(888_888, "t1 t2 t3")]
    _write(spark, src, more, version=2)
    rows = rows + more
    delta.delete(spark, out, "run_id = 'd'")
    step("e", "run d's output partition holds 0 pairs")


@pytest.mark.slow
@pytest.mark.exhaustive
def test_a_publish_killed_after_its_pairs_is_no_base_and_its_retry_is_exact(spark, tmp_path, monkeypatch):
    from simjoin.faults import ENV, InjectedFault

    src, out = str(tmp_path / "sets"), str(tmp_path / "pairs")
    rows = _random_texts(60, 31)
    _write(spark, src, rows)
    kw = {"input": src, "output": out, "threshold": 0.6}
    run_named(spark, "ssj", run_id="r0", **kw)
    more = _more(random.Random(31), 50_000, 30, rows)
    _write(spark, src, more, version=1)
    rows = rows + more
    monkeypatch.setenv(ENV, "ssj.publish.write@1")  # the pairs committed, their count not yet
    with pytest.raises(InjectedFault):
        run_named(spark, "ssj", run_id="r1", **kw)
    monkeypatch.delenv(ENV)
    assert _increment(spark, out, "r1")["pairs"] is None
    run_named(spark, "ssj", run_id="r2", **kw)  # r1 is no base: r0 is
    assert _increment(spark, out, "r2")["base_run"] == "r0"
    run_named(spark, "ssj", run_id="r1", **kw)  # the retry
    ref = _reference(_good(rows), 0.6)
    for run_id in ("r1", "r2"):
        _assert_same(_pairs(spark, out, run_id), ref)
