"""The one SparkSession simjoin uses: Delta Lake from delta-spark, configured from conf/spark.yaml.

Delta's jars come from Maven Central through ``spark.jars.packages``
(``configure_spark_with_delta_pip``) and are cached by Ivy. Where Ivy cannot resolve,
point ``SIMJOIN_JARS_DIR`` at a folder with the same jars (e.g. from ``mvn dependency:copy``);
they are then passed as ``spark.jars``.
"""

from __future__ import annotations

import glob
import os
import sys
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from simjoin.config import SparkConfig, load_config
from simjoin.log import get_logger
from simjoin.spark import jvmcache

__all__ = ["get_spark", "stop_spark", "small_frame"]

log = get_logger("simjoin.spark")
# Jobs here are short: the C1 JIT alone warms up much faster, and the hot loops run in numba anyway.
JVM_FLAGS = os.environ.get("SIMJOIN_JVM_FLAGS", "-XX:TieredStopAtLevel=1 -XX:+UseParallelGC")


def _builder(cfg: SparkConfig, extra: dict[str, Any] | None, record_to: str | None = None) -> SparkSession.Builder:
    # Spark's Python workers must run this interpreter, the one with simjoin installed.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    warehouse = os.path.abspath(cfg.warehouse)
    b = (
        SparkSession.builder.master(cfg.master)
        .appName(cfg.app_name)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.warehouse.dir", warehouse)
        .config("spark.sql.shuffle.partitions", str(cfg.shuffle_partitions))
        .config("spark.default.parallelism", str(max(2, cfg.shuffle_partitions)))
        .config("spark.driver.memory", cfg.driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.databricks.delta.schema.autoMerge.enabled", "false")
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .config("spark.driver.extraJavaOptions", _java_options(warehouse, record_to))
    )
    for k, v in (extra or {}).items():
        b = b.config(k, v)
    jars_dir = os.environ.get("SIMJOIN_JARS_DIR")
    if jars_dir:
        jars = sorted(glob.glob(os.path.join(jars_dir, "*.jar")))
        return b.config("spark.jars", ",".join(jars))
    packages = delta_packages()
    cached = jvmcache.cached_jars(packages) if jvmcache.enabled() else None
    if cached:  # Ivy resolved these before and they are all still there: skip resolution
        return b.config("spark.jars", ",".join(cached))
    return b.config("spark.jars.packages", packages)


def delta_packages() -> str:
    """The ``spark.jars.packages`` delta-spark's ``configure_spark_with_delta_pip`` asks for."""
    from delta import configure_spark_with_delta_pip

    return configure_spark_with_delta_pip(SparkSession.Builder())._options["spark.jars.packages"]


def _java_options(warehouse: str, record_to: str | None) -> str:
    flags = [f"-Dderby.system.home={os.path.join(warehouse, '.derby')}", JVM_FLAGS]
    if record_to:
        flags.append(record_to)
    elif not os.environ.get("SIMJOIN_JARS_DIR"):
        flags.append(jvmcache.archive_flags(delta_packages()))
    return " ".join(f for f in flags if f)


def get_spark(cfg: SparkConfig | None = None, extra: dict[str, Any] | None = None,
              record_to: str | None = None) -> SparkSession:
    """Return the active session or build it (idempotent within a process).

    ``record_to`` (JVM options from ``jvmcache.recording_flags``) makes the driver JVM record
    a class-data archive when it exits."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    cfg = cfg or load_config(SparkConfig, "spark")
    log.info("starting Spark: master=%s warehouse=%s", cfg.master, cfg.warehouse)
    spark = _builder(cfg, extra, record_to).getOrCreate()
    spark.sparkContext.setLogLevel(cfg.log_level)
    conf = spark.sparkContext.getConf()
    packages = conf.get("spark.jars.packages", None)
    if jvmcache.enabled() and packages:
        jvmcache.remember_jars(packages, conf.get("spark.jars", "") or "")
    return spark


def stop_spark(wait_for_jvm: bool = False) -> None:
    """Stop the session; with ``wait_for_jvm`` also shut the driver JVM down and wait until it
    has exited (it writes a class-data archive on exit when recording)."""
    active = SparkSession.getActiveSession()
    if active is None:
        return
    sc = active.sparkContext
    gateway = sc._gateway
    active.stop()
    if wait_for_jvm and gateway is not None:
        from pyspark import SparkContext

        proc = getattr(gateway, "proc", None)
        gateway.shutdown()
        SparkContext._gateway = None
        SparkContext._jvm = None
        if proc is not None:
            if proc.stdin:
                proc.stdin.close()  # the gateway server exits when its stdin closes
            proc.wait(timeout=300)


def small_frame(spark: SparkSession, rows: list, schema: Any) -> DataFrame:
    """A DataFrame of a few driver-side rows in one partition: one task and one file per write,
    not one per default-parallelism slice."""
    return spark.createDataFrame(rows, schema).coalesce(1)
