"""A warehouse path with a space (or a quote) starts Spark: the driver's JVM options quote it.

Reproduction (issue 42's real-data benchmark, whose scratch folder has a space): with
``SIMJOIN_WAREHOUSE=/tmp/sp ace/wh`` every command that started Spark exited with "Could not find or
load main class ace.wh..derby": ``-Dderby.system.home=<path>`` went into
``spark.driver.extraJavaOptions`` unquoted, and Spark's launcher splits those options on
whitespace."""

import os
import subprocess
import sys

from simjoin.spark import jvmcache

CODE = """
import os
from simjoin.config import SparkConfig
from simjoin.spark.session import get_spark
wh = os.environ["SIMJOIN_WAREHOUSE"]
spark = get_spark(SparkConfig(master="local[1]", warehouse=wh))
spark.range(3).write.format("delta").save(os.path.join(wh, "t"))
print(spark.read.format("delta").load(os.path.join(wh, "t")).count())
print(spark._jvm.java.lang.System.getProperty("derby.system.home"))
"""


def test_a_warehouse_with_a_space_and_quotes_starts_spark(tmp_path):
    wh = tmp_path / "my wh" / 'it\'s "here"'
    wh.mkdir(parents=True)
    env = {**os.environ, "SIMJOIN_WAREHOUSE": str(wh), "PYSPARK_PYTHON": sys.executable}
    env.pop("SIMJOIN_SPARK_REMOTE", None)
    p = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split("\n")[-3:-1] == ["3", str(wh / ".derby")], p.stdout


def test_java_option_quotes_only_what_needs_it():
    assert jvmcache.java_option("-Dx=/a/b") == "-Dx=/a/b"
    assert jvmcache.java_option("-Dx=/a b") == '"-Dx=/a b"'
    assert jvmcache.java_option('-Dx=/a "b"\\c') == '"-Dx=/a \\"b\\"\\\\c"'
