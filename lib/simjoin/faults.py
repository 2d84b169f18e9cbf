"""Fault injection for the reliability tests (a leaf module every layer may import).

``SIMJOIN_FAULTS="s3j.gate,s3j.publish.mid"`` names fault points; :func:`maybe_fail` raises
:class:`InjectedFault` at a listed point. Stage points (``<pipeline>.<stage>``) fire right after
the stage's body ran; ``<pipeline>.publish.mid`` fires inside the engine's publish, after the
pieces were appended and before the unit is committed.
"""

from __future__ import annotations

import os

__all__ = ["InjectedFault", "maybe_fail"]


class InjectedFault(RuntimeError):
    """Raised at a fault point listed in ``SIMJOIN_FAULTS``."""


def maybe_fail(point: str) -> None:
    if point in {f.strip() for f in os.environ.get("SIMJOIN_FAULTS", "").split(",") if f.strip()}:
        raise InjectedFault(f"injected fault at {point} (SIMJOIN_FAULTS)")
