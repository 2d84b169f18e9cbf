"""Two paths, one truth for the set-similarity join (issue 43): the in-process path (Arrow, numpy and
deltalake, no JVM) and the Spark path run the same per-partition stage functions, and must give the
same pairs, the same plan rows, the same quarantine and the same length statistics, over seeds and
shapes: self- and R-S joins, words and q-grams, ties, repeated ids, bad rows, inputs in several files
(Spark partitions), and incremental runs that switch path between runs. Every output is also checked
pair for pair against brute force."""

import random

import pytest

from simjoin.spark import delta
from tests.helpers import run_named
from tests.spark.test_ssj import _assert_same, _random_texts, _reference


def _write(spark, path, rows, files=1, append=None):
    df = spark.createDataFrame(rows, "id long, text string").repartition(files)
    if append is None:
        delta.overwrite(df, path)
    else:
        delta.append_idempotent(df, path, "test", append)


def _rows(spark, path, run_id="cli", drop=()):
    t = delta.read_arrow_any(spark, path, [("run_id", "=", run_id)])
    cols = [c for c in t.column_names if c not in drop]
    return sorted((tuple(r[c] for c in cols) for r in t.select(cols).to_pylist()), key=repr)


def _pairs(spark, out, run_id="cli"):
    got = {(r[0], r[1]): r[2] for r in _rows(spark, out, run_id, drop=("run_id",))}
    assert len(got) == len(_rows(spark, out, run_id)), "duplicate pairs"
    return got


def _run(spark, tmp_path, name, executor, **kw):
    out = str(tmp_path / f"{name}_{executor}")
    run, res = run_named(spark, "ssj", output=out, executor=executor, **kw)
    tok = res["rounds"][-1]["tokenize"]
    assert tok["executor"] == executor
    return out, res


def _same_tables(spark, a, b, run_id="cli"):
    """Pairs, plan rows (less where they ran), quarantine and lengths of two outputs are equal."""
    assert _pairs(spark, a, run_id) == _pairs(spark, b, run_id)
    drop = ("executor", "executor_reason")
    assert _rows(spark, a + "_plan", run_id, drop) == _rows(spark, b + "_plan", run_id, drop)
    assert _rows(spark, a + "_quarantine", run_id) == _rows(spark, b + "_quarantine", run_id)
    assert _rows(spark, a + "_lengths", run_id) == _rows(spark, b + "_lengths", run_id)


def _shape(seed):
    rng = random.Random(seed)
    rows = _random_texts(60 + 25 * (seed % 4), seed)
    rows += [(rows[1][0], "zz yy " + (rows[1][1] or "")),  # a repeated id (the first by text is kept)
             (7001, None), (7002, "   "), (None, "t1 t2")]  # bad rows
    rng.shuffle(rows)
    return rows


@pytest.mark.parametrize("seed", range(4))
def test_both_paths_give_the_same_tables_and_the_brute_force_pairs(spark, tmp_path, seed):
    rows = _shape(seed)
    src = str(tmp_path / "in")
    _write(spark, src, rows, files=1 + seed % 3)
    theta = (0.5, 0.75, 0.8, 0.6)[seed]
    kw = {"input": src, "threshold": theta}
    if seed == 3:  # q-grams, cosine
        kw.update(tokenizer="qgram:2", similarity="cosine")
    if seed == 2:  # an R-S join
        right = [(None if i is None else i + 100_000, t) for i, t in _shape(seed + 10)[:50]]
        kw["right"] = str(tmp_path / "right")
        _write(spark, kw["right"], right, files=2)
    a, _ = _run(spark, tmp_path, "p", "spark", **kw)
    b, _ = _run(spark, tmp_path, "p", "in_process", **kw)
    _same_tables(spark, a, b)
    if seed in (0, 1):  # brute force over the kept rows (the first text of a repeated id)
        keep = {}
        for i, t in rows:
            if i is not None and t is not None and t.split() and (i not in keep or t < keep[i]):
                keep[i] = t
        _assert_same(_pairs(spark, b), _reference(sorted(keep.items()), theta))
    if seed == 2:
        left = {i: t for i, t in rows if i is not None and t is not None and t.split()}
        assert len(_pairs(spark, b)) == len(_pairs(spark, a))
        assert all(x in left for x, _ in _pairs(spark, b))


def test_incremental_runs_switch_paths_and_stay_exact(spark, tmp_path):
    """Runs on top of each other, alternating path: each builds on the last published run,
    whichever path wrote it, and equals a full join by brute force."""
    rng = random.Random(7)
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    rows = [(i, t) for i, t in _random_texts(80, 3) if t]
    _write(spark, src, rows, files=2)
    words = [f"t{k}" for k in range(15)]
    for k, ex in enumerate(["in_process", "spark", "in_process"]):
        if k:
            more = [(50_000 + 100 * k + j, " ".join(rng.choices(words, k=rng.randint(1, 6)))) for j in range(30)]
            more.append((rows[0][0] + 1_000_000 * k, rows[0][1]))  # an exact copy of an old text
            _write(spark, src, more, append=k)
            rows += more
        _, res = run_named(spark, "ssj", run_id=f"r{k}", input=src, output=out, threshold=0.6, executor=ex)
        assert res["rounds"][-1]["tokenize"]["mode"] == ("full" if k == 0 else "incremental")
        _assert_same(_pairs(spark, out, f"r{k}"), _reference(rows, 0.6))


def test_auto_chooses_in_process_for_local_tables_and_says_so(spark, tmp_path, caplog):
    src = str(tmp_path / "in")
    _write(spark, src, _random_texts(40, 1))
    run, res = run_named(spark, "ssj", input=src, output=str(tmp_path / "out"), threshold=0.7)
    assert res["rounds"][-1]["tokenize"]["executor"] == "in_process"
    plan = delta.read_arrow_any(spark, str(tmp_path / "out") + "_plan")
    assert set(plan.column("executor").to_pylist()) == {"in_process"}
    reason = plan.column("executor_reason")[0].as_py()
    assert "within 60% of the" in reason and "GiB available" in reason
    inc = delta.read_arrow_any(spark, str(tmp_path / "out") + "_increments")
    assert inc.column("executor").to_pylist() == ["in_process"]
    from jobs.ssj.spec import summary

    assert " in process -> " in summary(run, res)
