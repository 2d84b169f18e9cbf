"""Fault injection for the reliability tests (a leaf module every layer may import).

``SIMJOIN_FAULTS`` is a comma-separated list of fault points; unset (the default), nothing here
costs more than reading one environment variable per Delta write.

- ``<pipeline>.<stage>``: the stage raises :class:`InjectedFault` right after its body ran (its
  writes done). Other named points: ``<pipeline>.publish.mid`` inside the engine's publish, after
  the pieces (pairs, stats, state) were appended and before the unit is committed;
  ``<pipeline>.ingest.batch`` when a micro-batch is staged; ``<pipeline>.ingest.landed``;
  ``<pipeline>.ingest.planned`` after a direct ingest wrote a micro-batch's offsets, before staging it;
  ``<pipeline>.ingest.staged`` after it staged the batch, before committing it.
- ``<pipeline>.<stage>.write@N``: the stage raises right after its N-th Delta commit (counted by
  :mod:`simjoin.spark.delta`: overwrites, appends, MERGEs, DELETEs), so a stage with several
  writes leaves some committed and the rest not.
- ``<pipeline>.<stage>.rows@N``: the stage's next Delta write fails inside the Spark job, in a
  task, after that task passed N rows to the writer (the DataFrame is wrapped in a
  ``mapInArrow`` that passes batches through); a write none of whose tasks reaches N+1 rows
  commits, and the next one is wrapped. The commit never happens: readers must not see any of it.

The runner names the stage that runs (:func:`current_stage`); writes made in threads the stage
started without copying its context (a thread pool, a streaming ``foreachBatch`` callback) are
counted against the one active stage that has a mid-write fault set.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = ["InjectedFault", "maybe_fail", "current_stage", "stage_name", "after_commit", "wrap_rows", "check_rows",
           "is_injected", "ENV"]

ENV = "SIMJOIN_FAULTS"
_MARK = "injected fault at "


class InjectedFault(RuntimeError):
    """Raised at a fault point listed in ``SIMJOIN_FAULTS``."""


def _points() -> set[str]:
    return {f.strip() for f in os.environ.get(ENV, "").split(",") if f.strip()}


def maybe_fail(point: str) -> None:
    if point in _points():
        raise InjectedFault(f"{_MARK}{point} ({ENV})")


# ---------------------------------------------------------------- mid-write faults


@dataclass
class _Stage:
    point: str  # "<pipeline>.<stage>"
    commits: int = 0


_current: contextvars.ContextVar[_Stage | None] = contextvars.ContextVar("simjoin_stage", default=None)
_active: list[_Stage] = []
_lock = threading.Lock()


@contextmanager
def current_stage(point: str) -> Iterator[None]:
    """Inside this block, Delta writes of this thread (and of threads that copy its context)
    belong to the stage ``point`` (``<pipeline>.<stage>``)."""
    st = _Stage(point)
    token = _current.set(st)
    with _lock:
        _active.append(st)
    try:
        yield
    finally:
        with _lock:
            _active.remove(st)
        _current.reset(token)


def stage_name() -> str | None:
    """The stage this thread writes for, or None."""
    st = _current.get()
    return st.point if st is not None else None


def writing_pipeline() -> str | None:
    """The pipeline (``<pipeline>`` of ``<pipeline>.<stage>``) this thread writes for: its stage's,
    else, in a thread without the stage's context, the one pipeline of every active stage; None
    when there is none (a test, a tool) or several."""
    st = _current.get()
    if st is not None:
        return st.point.split(".", 1)[0]
    with _lock:
        names = {s.point.split(".", 1)[0] for s in _active}
    return names.pop() if len(names) == 1 else None


def _mid_write() -> dict[str, dict[str, int]]:
    """``{"<pipeline>.<stage>": {"write": N, "rows": N}}`` from ``SIMJOIN_FAULTS``."""
    raw = os.environ.get(ENV, "")
    if "@" not in raw:
        return {}
    out: dict[str, dict[str, int]] = {}
    for f in raw.split(","):
        point, at, n = f.strip().partition("@")
        stage, dot, kind = point.rpartition(".")
        if not (at and dot and kind in ("write", "rows") and n.strip().isdigit()):
            continue
        out.setdefault(stage, {})[kind] = int(n)
    return out


def _stage_for(faults: dict[str, dict[str, int]]) -> _Stage | None:
    st = _current.get()
    if st is not None:
        return st if st.point in faults else None
    with _lock:  # a thread without the stage's context: the active stage a fault names, if one
        hit = [s for s in _active if s.point in faults]
    return hit[-1] if len(hit) == 1 else None


def _pending(kind: str) -> tuple[_Stage, int] | None:
    """The current stage and its N, when ``SIMJOIN_FAULTS`` sets ``<stage>.<kind>@N`` for it."""
    faults = _mid_write()
    if not faults:
        return None
    st = _stage_for(faults)
    if st is None or kind not in faults[st.point]:
        return None
    return st, faults[st.point][kind]


def after_commit(table: str) -> None:
    """Called after each Delta commit to ``table``: counts it against the current stage and
    raises at that stage's ``write@N``."""
    if (due := _pending("write")) is None:
        return
    st, at = due
    with _lock:
        st.commits += 1
        n = st.commits
    if n == at:
        raise InjectedFault(f"{_MARK}{st.point}.write@{n}: after commit {n} of the stage, to {table} ({ENV})")


def wrap_rows(df: Any) -> Any:
    """``df``, or - when the current stage has a ``rows@N`` fault - ``df`` passed through a
    ``mapInArrow`` whose tasks raise once they handed N rows to the writer."""
    if (due := _pending("rows")) is None:
        return df
    limit, point = due[1], due[0].point

    def pass_through(batches: Iterator[Any]) -> Iterator[Any]:
        seen = 0
        for b in batches:
            if seen + b.num_rows > limit:
                if limit > seen:
                    yield b.slice(0, limit - seen)
                raise InjectedFault(f"{_MARK}{point}.rows@{limit}: a task failed after writing {limit} rows "
                                    f"({ENV})")
            seen += b.num_rows
            yield b

    return df.mapInArrow(pass_through, df.schema)


def check_rows(n: int) -> None:
    """A write of ``n`` driver-side rows made without Spark (``delta.overwrite_rows``): raise, before
    its commit, when the current stage has a ``rows@N`` fault with N < n, as a Spark task would."""
    if (due := _pending("rows")) is None:
        return
    st, limit = due
    if n > limit:
        raise InjectedFault(f"{_MARK}{st.point}.rows@{limit}: a write failed after {limit} of its {n} rows ({ENV})")


def is_injected(e: BaseException) -> bool:
    """Whether ``e`` (e.g. a Spark job failure) was caused by an injected fault."""
    return isinstance(e, InjectedFault) or (_MARK in str(e) and ENV in str(e))


def reraise_injected(e: BaseException) -> None:
    """Raise an :class:`InjectedFault` for a Spark error an injected fault caused (one line)."""
    if is_injected(e) and not isinstance(e, InjectedFault):
        line = next((ln.strip() for ln in str(e).splitlines() if _MARK in ln), _MARK.strip())
        raise InjectedFault(line[line.index(_MARK):] if _MARK in line else line) from e
