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
