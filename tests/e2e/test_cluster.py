"""Cluster mode: a real Spark standalone master + worker on 127.0.0.1, a Delta round trip through
spark://127.0.0.1:<port>. The job runs in a subprocess so it gets its own SparkContext."""

import os
import subprocess
import sys
import textwrap

import pytest


@pytest.mark.cluster
def test_standalone_cluster_delta_roundtrip(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        from simjoin.spark.cluster import StandaloneCluster
        from simjoin.config import SparkConfig
        from simjoin.spark.session import get_spark
        from simjoin.spark import delta
        with StandaloneCluster(cores=1, memory="1g", work_dir={str(tmp_path)!r}) as url:
            spark = get_spark(SparkConfig(master=url, warehouse={str(tmp_path / 'wh')!r}, shuffle_partitions=2))
            assert spark.sparkContext.master == url
            df = spark.range(0, 1234, numPartitions=3).selectExpr("id", "id * id AS sq")
            delta.overwrite(df, {str(tmp_path / 'tbl')!r})
            back = delta.read_table(spark, {str(tmp_path / 'tbl')!r})
            n, s = back.count(), back.selectExpr("sum(sq)").first()[0]
            execs = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
            print("RESULT", url, n, s, execs)
            spark.stop()
    """)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env)
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT")]
    assert p.returncode == 0 and line, p.stderr[-3000:]
    _, url, n, s, execs = line[0].split()
    assert url.startswith("spark://127.0.0.1:")
    assert int(n) == 1234 and int(s) == sum(i * i for i in range(1234))
    assert int(execs) >= 2  # the driver plus the standalone worker's executor
    from deltalake import DeltaTable

    assert DeltaTable(str(tmp_path / "tbl")).to_pyarrow_table().num_rows == 1234


@pytest.mark.cluster
def test_ssj_on_a_standalone_cluster_equals_the_in_process_path(tmp_path):
    """Issue 43: the Spark path of ``simjoin ssj`` on a real standalone master and worker gives the
    pairs, plan rows and quarantine the in-process path gives on this machine."""
    script = textwrap.dedent(f"""
        import random
        from simjoin.spark.cluster import StandaloneCluster
        from simjoin.config import SparkConfig
        from simjoin.spark.session import get_spark
        from simjoin.spark import delta
        from simjoin.pipeline import get_spec
        from simjoin.pipeline.runner import run_pipeline
        rng = random.Random(5)
        words = [f"w{{k}}" for k in range(30)]
        rows = [(i, " ".join(rng.sample(words, rng.randint(1, 7)))) for i in range(400)]
        rows += [(1000 + i, t) for i, t in rows[:40]] + [(5000, None), (5001, "  ")]
        with StandaloneCluster(cores=1, memory="1g", work_dir={str(tmp_path)!r}) as url:
            spark = get_spark(SparkConfig(master=url, warehouse={str(tmp_path / 'wh')!r}, shuffle_partitions=2))
            src = {str(tmp_path / 'in')!r}
            delta.overwrite(spark.createDataFrame(rows, "id long, text string").repartition(3), src)
            got = {{}}
            for ex in ("spark", "in_process"):
                out = {str(tmp_path)!r} + "/out_" + ex
                run = get_spec("ssj").make_run({{"input": src, "output": out, "threshold": 0.6, "executor": ex,
                                                 "memory_gb": 1.0}}, run_id="cli")
                res = run_pipeline(spark, run)
                assert res["rounds"][-1]["tokenize"]["executor"] == ex
                pairs = sorted(tuple(r) for r in delta.read_arrow(out).select(["left_id", "right_id", "similarity"])
                               .to_pylist() for r in [tuple(r.values())])
                plan = sorted(repr(r) for r in delta.read_arrow(out + "_plan").drop_columns(
                    ["executor", "executor_reason"]).to_pylist())
                q = sorted(repr(r) for r in delta.read_arrow(out + "_quarantine").to_pylist())
                got[ex] = (pairs, plan, q)
            assert got["spark"] == got["in_process"]
            print("RESULT", url, len(got["spark"][0]), len(got["spark"][2]))
            spark.stop()
    """)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900, env=env)
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT")]
    assert p.returncode == 0 and line, p.stderr[-3000:]
    _, url, n_pairs, n_bad = line[0].split()
    assert url.startswith("spark://127.0.0.1:") and int(n_pairs) >= 40 and int(n_bad) == 2
