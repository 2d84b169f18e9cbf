"""A long stage logs its progress: time so far and the tasks done in each active Spark stage."""

from __future__ import annotations

import logging
import time

from simjoin.pipeline.runner import heartbeat


def test_heartbeat_logs_tasks_done(spark, caplog):
    def slow(it):
        time.sleep(0.6)
        yield sum(1 for _ in it)

    with caplog.at_level(logging.INFO, logger="simjoin.pipeline"), heartbeat(spark, "ssj join", every=0.25):
        assert sum(spark.sparkContext.parallelize(range(100), 4).mapPartitions(slow).collect()) == 100
    lines = [r.getMessage() for r in caplog.records if "running for" in r.getMessage()]
    assert lines and all(m.startswith("stage ssj join: running for") for m in lines)
    assert any("/4 tasks done" in m for m in lines), lines
    n = len(lines)
    time.sleep(0.6)
    assert len([r for r in caplog.records if "running for" in r.getMessage()]) == n  # stopped with the block
