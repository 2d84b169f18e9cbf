"""Progress logging per stage, to stderr; the one-line summary goes to stdout."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

_FMT = "%(asctime)s simjoin %(levelname)s %(message)s"


def get_logger(name: str = "simjoin") -> logging.Logger:
    root = logging.getLogger("simjoin")
    if not root.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter(_FMT, "%H:%M:%S"))
        root.addHandler(h)
        # SIMJOIN_LOG_LEVEL=DEBUG also prints the traceback behind a one-line error
        root.setLevel(os.environ.get("SIMJOIN_LOG_LEVEL", "INFO").upper())
        root.propagate = False
    return logging.getLogger(name)


@contextmanager
def stage(name: str, log: logging.Logger | None = None) -> Iterator[dict[str, float]]:
    """Log the start and end (with seconds) of a pipeline stage: ``done in``, or ``failed after``
    when it raised (the error itself is the caller's one line)."""
    log = log or get_logger()
    info: dict[str, float] = {}
    t0 = time.perf_counter()
    log.info("stage %s: start", name)
    try:
        yield info
    except BaseException:
        info["seconds"] = time.perf_counter() - t0
        log.info("stage %s: failed after %s", name, seconds(info["seconds"]))
        raise
    info["seconds"] = time.perf_counter() - t0
    log.info("stage %s: done in %s", name, seconds(info["seconds"]))


def seconds(s: float) -> str:
    """A duration as the logs print it: hundredths under 10 s (a unit's stages take milliseconds,
    and ``0.0s`` hid where a follower's time went), tenths above."""
    return f"{s:.2f}s" if s < 10 else f"{s:.1f}s"
