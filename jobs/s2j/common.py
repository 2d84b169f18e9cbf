"""What every S2J stage needs: the run (streams, output directory, join tasks, window, adaptation
settings) and the state it keeps.

Tables under the output directory ``DIR``: one pair table per task at ``DIR/<task>``, ``_stats``,
``_shed`` (every shed tuple with its micro-batch, τ and shed ratio), ``_quarantine``,
``_checkpoint``, ``_work``, and under ``_state``: ``progress`` (the engine's; its meta carries the
workers, the scaling streaks, the next block id and the snapshot count), ``blocks`` (the window's
tuple blocks, ``simjoin.operators.s2j``) and ``buffer`` (pairs found since the last snapshot, when
snapshots are rarer than micro-batches). State rows carry the ``unit`` that wrote them and a unit
reads only state of earlier units, so a replay sees what the first attempt saw.
"""

from __future__ import annotations

from typing import Any, ClassVar

from simjoin.config import parse_duration
from simjoin.pipeline.stream import StreamRun

__all__ = ["S2JRun", "PAIR_COLUMNS"]

PAIR_COLUMNS = ("left_id", "right_id", "ts")


class S2JRun(StreamRun):
    STATE: ClassVar[dict[str, str]] = {"blocks": "blocks", "buffer": "buffer"}
    #: the shed tuples' record (``DIR/_shed``) keeps the last ``SIMJOIN_HISTORY_UNITS`` units
    STATE_RETENTION: ClassVar[dict[str, str]] = {"_shed": "history"}
    #: a unit of at most ``SIMJOIN_LOCAL_UNIT_ROWS`` records runs on the in-process executor
    IN_PROCESS: ClassVar[bool] = True

    def expiry(self) -> dict[str, Any]:
        """The blocks whose newest tuple is at or before the event time's expiry bound of its side
        (the other role's stream's mark less W + L: rows further behind are quarantined as late).
        Readers skip them at once; the DELETE (a second or two) runs every :data:`EXPIRE_EVERY` units."""
        from simjoin.runtime.expiry import ByMark

        p = self.params()
        return {self.blocks: ByMark(every=EXPIRE_EVERY, window_us=p.window_us, self_join=p.self_join,
                                    sides=tuple(p.sides))}

    @classmethod
    def tables_at(cls, output: str) -> Any:
        from simjoin.runtime.tables import DirTables

        return DirTables(output)

    @property
    def blocks(self) -> str:
        return self.state("blocks")

    @property
    def buffer(self) -> str:
        return self.state("buffer")

    @property
    def tasks(self) -> Any:
        if "_tasks" not in self.frames:
            self.frames["_tasks"] = self.cfg.task_list
        return self.frames["_tasks"]

    def task_table(self, name: str) -> str:
        return self.tables.task(name)  # type: ignore[no-any-return]

    def table_paths(self) -> dict[str, str]:
        return {**super().table_paths(), **{f"task:{t.name}": self.task_table(t.name) for t in self.tasks}}

    def output_columns(self) -> dict[str, tuple[str, ...]]:
        return {f"task:{t.name}": PAIR_COLUMNS for t in self.tasks}

    def state_fingerprint(self) -> str:
        """The blocks hold the tasks' columns under the window: the tasks (canonical text) are
        part of the state's identity."""
        return self.fingerprint(("self" if self.self_join else "rs") + "|tasks="
                                + "; ".join(str(t) for t in self.tasks))

    @property
    def window_us(self) -> int:
        return round(parse_duration(self.cfg.window) * 1e6)

    @property
    def lateness_us(self) -> int:
        """``--allowed-lateness`` L: a row up to L behind its stream's committed max ts is joined."""
        return round(self.cfg.allowed_lateness_s * 1e6)

    def params(self) -> Any:
        from simjoin.core.s2j.operator import S2JParams

        return S2JParams(tuple(self.tasks), self.window_us, self.self_join, self.lateness_us)

    def thresholds(self) -> Any:
        from simjoin.core.s2j.adapt import Thresholds

        c = self.cfg
        return Thresholds(c.tau0, c.tau1, c.tau2, c.beta, c.shed_base, c.shed_model, c.sustain, c.min_workers,
                          c.max_workers)

    def initial_workers(self) -> int:
        """``--workers``, else m = ⌈E(ϖ)·φ / (W·τ*)⌉ with ``--rate`` and ``--capacity``, else 2."""
        from simjoin.core.s2j.adapt import initial_workers

        c = self.cfg
        if c.workers is not None:
            return int(c.workers)
        if c.rate is not None and c.capacity is not None:
            return initial_workers(float(c.rate), parse_duration(c.window), float(c.capacity), self.thresholds())
        return max(c.min_workers, min(c.max_workers, 2))


#: Dead blocks are physically deleted every this many units (readers skip them before that).
EXPIRE_EVERY = 4


def dead_mask(p: Any, time: Any, t: Any) -> Any:
    """The blocks no tuple can reach any more (the rule ``S2JRun.expiry`` declares), on a pyarrow
    Table of blocks (``side``, ``ts_max``): a boolean numpy mask."""
    import numpy as np

    side = np.asarray(t.column("side").to_numpy(zero_copy_only=False), np.int64)
    ts_max = np.asarray(t.column("ts_max").to_numpy(zero_copy_only=False), np.int64)
    dead = np.zeros(t.num_rows, bool)
    for s, b in time.expiry_bounds_us(p.window_us, p.self_join, p.sides).items():
        dead |= (side == s) & (ts_max <= b)
    return dead
