"""The Python daemon of Spark's executors (``spark.python.daemon.module``): PySpark's own daemon,
which forks a worker per concurrent task, after importing what simjoin's tasks run (numpy,
pyarrow, the operators) and loading ssj's numba kernels (``setsim_steps.warm_up``).

Spark keeps an idle worker for one minute only, so a run that comes later than that starts new
workers; forked from this daemon, they find everything loaded instead of paying 1-2 s of imports
and kernel loading each (on 2 cores, several seconds of a warm Spark's ssj run). Nothing here
starts a thread before the fork. A failed warm-up is no failure: a task loads what it needs."""

from __future__ import annotations


def preload() -> None:
    try:
        import numpy  # noqa: F401
        import pyarrow  # noqa: F401

        import simjoin.operators.hypercube
        import simjoin.operators.inequality
        import simjoin.operators.metric
        import simjoin.operators.s2j
        import simjoin.spark.executor  # noqa: F401
        from simjoin.operators.setsim_steps import warm_up

        warm_up()
    except Exception:  # only a warm-up
        pass


if __name__ == "__main__":
    preload()
    from pyspark import daemon

    daemon.manager()
