# One image for every simjoin container (docker-compose.yml): Airflow's api-server, scheduler,
# dag-processor and triggerer, and the Spark master and workers. The same Python, pyspark,
# delta-spark and Airflow everywhere, all from pyproject.toml; Spark is pyspark's own install.
# No secret is built in: they come from .env (`make compose-env`) at run time.
FROM python:3.11-slim-bookworm

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Java 17 for Spark 4; procps (ps) for Spark's scripts; nothing else.
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java

WORKDIR /opt/simjoin
COPY pyproject.toml README.md ./
COPY lib ./lib
COPY jobs ./jobs
# psycopg2-binary: Airflow's metadata database is Postgres here (not a project dependency).
RUN pip install . psycopg2-binary \
 && ln -s "$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" /opt/spark
COPY conf ./conf
COPY dags ./dags

# An unprivileged user (Airflow's usual uid). The warehouse directory is created here, owned by
# it, so that the named volume mounted on it starts out writable by every container.
RUN useradd --create-home --uid 50000 --gid 0 simjoin \
 && mkdir -p /opt/simjoin/warehouse /opt/airflow/logs /opt/spark-work \
 && chown -R simjoin:0 /opt/simjoin/warehouse /opt/airflow /opt/spark-work

ENV JAVA_HOME=/opt/java \
    SPARK_HOME=/opt/spark \
    SPARK_WORKER_DIR=/opt/spark-work \
    PATH=/opt/spark/bin:$PATH \
    AIRFLOW_HOME=/opt/airflow \
    SIMJOIN_CONF_DIR=/opt/simjoin/conf \
    SIMJOIN_WAREHOUSE=/opt/simjoin/warehouse
USER simjoin

# Delta's jars, offline: one local Spark resolves them with Ivy (~/.ivy2.5.2) and simjoin records
# their paths (~/.cache/simjoin), so every later session passes them as spark.jars without Ivy.
# Then the JVM class-data archive (optional: only makes drivers start faster).
RUN SIMJOIN_WAREHOUSE=/tmp/simjoin-build python -c "from simjoin.spark.session import get_spark, stop_spark; \
get_spark().range(1).count(); stop_spark(wait_for_jvm=True)" \
 && python -c "import sys; from simjoin.spark import jvmcache; from simjoin.spark.session import delta_packages; \
sys.exit(0 if jvmcache.cached_jars(delta_packages()) else 'Delta jars were not cached')" \
 && (simjoin cache-jvm || echo "note: no JVM class-data archive; Spark starts a few seconds slower") \
 && rm -rf /tmp/simjoin-build /tmp/spark-* /tmp/blockmgr-*
