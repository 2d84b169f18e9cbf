"""Two executors, one truth, for the partitioned API a batch pipeline runs on
(``simjoin.runtime.executor.Executor``: scan, map, shuffle, select, aggregate, union, collect,
count, write): over random tables and partitionings, the in-process executor and the Spark
executor give the same rows for the same task functions, a function never sees an empty
partition, and a row may go to several tasks."""

from __future__ import annotations

import functools
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark import cloudpickle

from simjoin.runtime.executor import InProcessExecutor, slices
from simjoin.spark.executor import SparkExecutor

# the task functions below travel to Spark's Python workers by value: those workers cannot import a
# test module by its name
sys.modules.setdefault(__name__, sys.modules[__name__])
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCHEMA = pa.schema([("k", pa.int64()), ("g", pa.int32()), ("s", pa.string()), ("x", pa.float64())])
OUT = pa.schema([("task", pa.int64()), ("k", pa.int64()), ("n", pa.int64()), ("part_rows", pa.int64())])


def _table(seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 400))
    return pa.table({"k": pa.array(rng.integers(-5, 50, n), pa.int64()),
                     "g": pa.array(rng.integers(0, 4, n).astype(np.int32)),
                     "s": pa.array([None if v < 0.1 else f"w{int(v * 30)}" for v in rng.random(n)], pa.string()),
                     "x": pa.array(rng.normal(size=n))}, schema=SCHEMA)


def _rows(t: pa.Table) -> list[tuple]:
    return sorted((tuple(r.values()) for r in t.to_pylist()), key=repr)


def _double(t: pa.Table, part: int) -> pa.Table:
    assert t.num_rows > 0  # never an empty partition
    return t.set_column(3, "x", pc.multiply(t.column("x"), 2.0))


def _split(t: pa.Table, part: int, n: int) -> tuple[np.ndarray, pa.Table]:
    """Each row to task k % n, and the rows of group 0 to task (k + 1) % n too: a row may go to
    several tasks."""
    assert t.num_rows > 0
    k = t.column("k").to_numpy()
    extra = t.filter(pc.equal(t.column("g"), 0))
    task = np.concatenate([k % n, (extra.column("k").to_numpy() + 1) % n])
    return task, pa.concat_tables([t, extra])


def _task(t: pa.Table, task: int) -> pa.Table:
    """Per key of a task: its rows (whatever partition they came from)."""
    assert t.num_rows > 0
    k = t.column("k").to_numpy()
    keys, counts = np.unique(k, return_counts=True)
    return pa.table({"task": np.full(keys.size, task), "k": keys, "n": counts,
                     "part_rows": np.full(keys.size, t.num_rows)}, schema=OUT)


@pytest.mark.parametrize("seed", range(6))
def test_both_executors_give_the_same_rows(spark, tmp_path, seed):
    t = _table(seed)
    rng = np.random.default_rng(seed + 100)
    local, remote = InProcessExecutor(), SparkExecutor(spark)
    a = slices(t, max(1, int(rng.integers(1, 120))))
    b = remote.from_arrow(t).repartition(int(rng.integers(1, 6)))
    n = int(rng.integers(1, 7))
    for ex, parts in ((local, a), (remote, b)):
        ex.persist(parts)
    got = []
    for ex, parts in ((local, a), (remote, b)):
        mapped = ex.map(parts, _double, SCHEMA)
        shuffled = ex.shuffle(parts, functools.partial(_split, n=n), n, _task, OUT, order=list(range(n))[::-1])
        picked = ex.select(parts, ["k", "s"], [("g", "!=", 1), ("k", ">=", 3)])
        summed = ex.aggregate(parts, ["g", "s"], {"x": "sum", "k": "max"})
        both = ex.union([parts, parts])
        got.append({"map": _rows(ex.collect(mapped)), "shuffle": _rows(ex.collect(shuffled).drop_columns(["part_rows"])),
                    "select": _rows(ex.collect(picked)), "count": ex.count(both),
                    "aggregate": sorted(((r["g"], r["s"], round(r["x"], 9), r["k"]) for r in summed.to_pylist()),
                                        key=repr)})
    assert got[0] == got[1]
    assert got[0]["count"] == 2 * t.num_rows
    # write: the same partition replaced by either executor reads back the same
    for name, (ex, parts) in {"local": (local, a), "spark": (remote, b)}.items():
        path = str(tmp_path / name)
        ex.write(parts, path, {"run_id": "r1"})
        ex.write(parts, path, {"run_id": "r1"})  # a rerun replaces, never appends
        back = local.collect(local.scan(path, list(SCHEMA.names), where=[("run_id", "=", "r1")]))
        assert _rows(back.cast(SCHEMA)) == _rows(t)


def test_the_spark_scan_reads_what_deltalake_reads(spark, tmp_path):
    """The Spark executor's scan of a local table (its data files read by the tasks with pyarrow,
    packed) gives the rows the in-process scan gives: a partition column's condition, a value
    condition, renames and literals, an older version, and the rows appended since a version. A
    table the tasks do not read that way (a path with ``%``) is read by Spark, alike."""
    from simjoin.spark import executor as E
    from simjoin.spark.session import arrow_frame

    local, remote = InProcessExecutor(), SparkExecutor(spark)
    t = _table(3)
    cases = [dict(columns=["k", "s"], where=[("run_id", "=", "a")]),
             dict(columns=["k", "x"], where=[("run_id", "=", "b"), ("k", ">=", 10)]),
             dict(columns=["k", "s"], where=[("run_id", "in", ["a", "b"]), ("g", "!=", 2)]),
             dict(columns=["k", "s"], rename={"k": "id", "s": "text"}, literals={"side": 1}),
             dict(columns=["k", "g"], version=1),
             dict(columns=["k", "s"], version=2, appended_since=1)]
    got = {}
    for name in ("plain", "per%cent"):
        path = str(tmp_path / name)
        remote.write(remote.from_arrow(t), path, {"run_id": "a"})  # version 0
        remote.write(remote.from_arrow(t.slice(0, 40)), path, {"run_id": "b"})  # version 1
        extra = t.slice(0, 7).append_column("run_id", pa.array(["a"] * 7))
        arrow_frame(spark, extra).write.format("delta").mode("append").save(path)  # version 2
        for i, kw in enumerate(cases):
            scan = E._file_scan(spark, path, kw["columns"], kw.get("version"), kw.get("where"),
                                kw.get("appended_since"), kw.get("rename"), kw.get("literals"))
            assert (scan is None) == ("%" in name), kw
            got[name, i] = remote.collect(remote.scan(path, **kw))
            if "%" not in name:
                want = local.collect(local.scan(path, **kw))
                assert got[name, i].column_names == want.column_names, kw
                assert _rows(got[name, i]) == _rows(want), kw
    for i in range(len(cases)):
        assert _rows(got["per%cent", i]) == _rows(got["plain", i]), cases[i]
