"""A Spark action stopped at a cap: the anchors that may run for minutes (Spark's own plans)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


def capped(spark: Any, action: Callable[[], Any], cap: float, group: str) -> dict[str, Any]:
    """Run ``action()`` (a Spark action) in a thread for at most ``cap`` seconds; past it, cancel its
    jobs and wait for them to stop. Returns ``wall``, ``timed_out`` and ``value`` (None when cancelled).

    The job group is per Python thread (PySpark's pinned threads): it is set in the thread the
    action runs in, or ``cancelJobGroup`` reaches nothing and the job runs on beside the next
    timing."""
    res: dict[str, Any] = {}

    def go() -> None:
        spark.sparkContext.setJobGroup(group, f"bench {group}", interruptOnCancel=True)
        try:
            res["value"] = action()
        except Exception as e:  # cancelled at the cap
            res["error"] = str(e).splitlines()[0][:200]

    t0 = time.perf_counter()
    th = threading.Thread(target=go, daemon=True)
    th.start()
    th.join(cap)
    timed_out = th.is_alive()
    if timed_out:
        spark.sparkContext.cancelJobGroup(group)
        th.join(60)
    wall = time.perf_counter() - t0
    if th.is_alive():
        raise RuntimeError(f"the Spark job {group} did not stop when cancelled: later timings would share the cores")
    if "error" in res and not timed_out:
        raise RuntimeError(f"the Spark job {group} failed: {res['error']}")
    return {"wall": wall, "timed_out": timed_out, "value": res.get("value")}
