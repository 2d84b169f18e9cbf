"""The S2J operator's steps on one stream pair (Section 3), composed by the Spark stages and, in
one process, by :class:`S2JStream` (the tests' and the benchmark's reference).

* **Input adapter** (:meth:`S2JParams.columns`, :meth:`S2JParams.admit`): only the columns some
  task reads are kept (pre-projection), and a tuple enters the join only if it passes the
  one-role selections of at least one task (pre-selection).
* **Source sharing** (:func:`join_stored`, :func:`join_new`): one read of a micro-batch's tuples
  and of each stored block serves every task; each task probes through its own index.
* **Lifespan**: a tuple lives for the join window W; a pair is reported iff its task's predicates
  hold and ``0 <= ts_later - ts_earlier < W``, exactly once - in the micro-batch where the later
  of its two tuples (by arrival) comes. Blocks no future tuple can reach are dropped
  (:func:`expired`): a stream's tuples arrive dated at most the allowed lateness L before what
  it already committed (rows further behind are quarantined as late), so a block is kept until it
  is W + L behind the other role's stream. A tuple older than stored ones joins them as if it had
  arrived in order: every lifespan test is symmetric in the two timestamps.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from simjoin.core.inequality.spo import Tuples
from simjoin.core.s2j.adapt import Decision, Thresholds, assign_blocks, decide, shed_mask, window_load
from simjoin.core.s2j.join import Block, index_columns, probe
from simjoin.core.s2j.task import JoinTask

__all__ = ["S2JParams", "TaskPairs", "join_stored", "join_new", "cut_blocks", "expired", "S2JStream",
           "make_tuples", "concat"]


def make_tuples(ids: np.ndarray, ts: np.ndarray, cols: Mapping[str, np.ndarray]) -> Tuples:
    ids = np.ascontiguousarray(ids, np.int64)
    z = np.zeros(ids.shape[0], np.int64)
    return Tuples(ids, np.ascontiguousarray(ts, np.int64), z, z.copy(),
                  {k: np.ascontiguousarray(v, np.int64 if np.asarray(v).dtype.kind in "iu" else np.float64)
                   for k, v in cols.items()})  # integers stay int64: compared exactly (simjoin.core.exact)


def concat(parts: Sequence[Tuples], columns: Sequence[str]) -> Tuples:
    if not parts:
        return Tuples.empty(tuple(columns))
    return make_tuples(np.concatenate([p.id for p in parts]), np.concatenate([p.ts for p in parts]),
                       {c: np.concatenate([p.cols[c] for p in parts if len(p)] or [parts[0].cols[c]])
                        for c in columns})  # an empty part never widens int64 to float64


@dataclass(frozen=True)
class S2JParams:
    """The tasks on one stream pair (``self_join``: one stream in both roles), the window and the
    allowed lateness (``--allowed-lateness``)."""

    tasks: tuple[JoinTask, ...]
    window_us: int
    self_join: bool
    lateness_us: int = 0

    @property
    def sides(self) -> tuple[int, ...]:
        return (0,) if self.self_join else (0, 1)

    def roles(self, side: int) -> tuple[str, ...]:
        return ("l", "r") if self.self_join else ("l",) if side == 0 else ("r",)

    def columns(self, side: int) -> tuple[str, ...]:
        """Pre-projection: the columns some task reads from this side."""
        return tuple(sorted({c for t in self.tasks for role in self.roles(side) for c in t.columns(role)}))

    def admit(self, side: int, t: Tuples) -> np.ndarray:
        """Pre-selection: tuples that pass every selection of at least one task in one of their roles."""
        keep = np.zeros(len(t), dtype=bool)
        for task in self.tasks:
            for role in self.roles(side):
                keep |= task.select(role, t.cols, len(t))
        return keep

    def index_columns(self, side: int) -> tuple[str, ...]:
        return tuple(sorted({c for role in self.roles(side) for c in index_columns(self.tasks, role)}))


@dataclass
class TaskPairs:
    """Pairs one task found in one probe: ids in roles l and r, the later timestamp, and the
    candidates its index returned."""

    task: int
    left_id: np.ndarray
    right_id: np.ndarray
    ts: np.ndarray
    candidates: int


def _probing(p: S2JParams, side: int, role: str, new: Mapping[int, Tuples]) -> Tuples | None:
    """The new tuples that probe a block of ``side`` stored in ``role``: the other role's side."""
    other = 0 if p.self_join else 1 - side
    return new.get(other)


def _task_probe(task_i: int, task: JoinTask, block: Block, role: str, probes: Tuples, window_us: int,
                exclude_self: bool) -> TaskPairs:
    other = "r" if role == "l" else "l"
    pmask = task.select(other, probes.cols, len(probes))
    smask = task.select(role, block.tuples.cols, len(block))
    pr = probes if pmask.all() else probes.take(np.flatnonzero(pmask))
    res = probe(task, block, pr, role, window_us, exclude_self)
    pi, si = res.probe_idx, res.stored_idx
    if not smask.all():
        keep = smask[si]
        pi, si = pi[keep], si[keep]
    st = block.tuples
    pid, sid = pr.id[pi], st.id[si]
    ts = np.maximum(pr.ts[pi], st.ts[si])
    lid, rid = (sid, pid) if role == "l" else (pid, sid)
    return TaskPairs(task_i, lid, rid, ts, res.candidates)


def _live(block: Block, probes: Tuples, window_us: int) -> bool:
    """Whether any probe is within the window of the block (block-level lifespan pruning)."""
    if not len(probes) or not len(block):
        return False
    return bool(block.ts_max > int(probes.ts.min()) - window_us and block.ts_min < int(probes.ts.max()) + window_us)


def join_stored(p: S2JParams, block: Block, side: int, new: Mapping[int, Tuples]) -> Iterator[TaskPairs]:
    """Every task's pairs between one stored block of ``side`` and the micro-batch's new tuples
    (both roles of a self-join). One read of the block serves all tasks."""
    for role in p.roles(side):
        probes = _probing(p, side, role, new)
        if probes is None or not _live(block, probes, p.window_us):
            continue
        for i, task in enumerate(p.tasks):
            yield _task_probe(i, task, block, role, probes, p.window_us, False)


def join_new(p: S2JParams, new: Mapping[int, Tuples]) -> Iterator[TaskPairs]:
    """Every task's pairs among the micro-batch's new tuples: left x right, or in a self-join
    every ordered pair x != y."""
    right_side = 0 if p.self_join else 1
    if right_side not in new or 0 not in new:
        return
    block = Block(new[right_side])
    for i, task in enumerate(p.tasks):
        yield _task_probe(i, task, block, "r", new[0], p.window_us, p.self_join)


def cut_blocks(t: Tuples, sigma: int) -> list[Tuples]:
    """The new tuples of one side, in (ts, id) order, cut into blocks of at most ς tuples."""
    order = np.lexsort((t.id, t.ts))
    t = t.take(order)
    sigma = max(1, int(sigma))
    return [t.take(np.arange(i, min(len(t), i + sigma))) for i in range(0, len(t), sigma)]


def expired(block_side: int, ts_max: int, marks: Mapping[int, int], window_us: int, self_join: bool,
            lateness_us: int = 0) -> bool:
    """A block no future tuple can meet: every tuple that can still arrive in the other role is
    dated at or after that stream's committed maximum ``marks`` less the allowed lateness L, at
    least W after the block's newest."""
    other = block_side if self_join else 1 - block_side
    mark = marks.get(other)
    return mark is not None and ts_max <= mark - window_us - lateness_us


@dataclass
class _Stored:
    block_id: int
    side: int
    worker: int
    block: Block


@dataclass
class StepResult:
    pairs: dict[str, list[tuple[int, int]]]  # per task, as found (a pair twice would show)
    shed: dict[int, np.ndarray]
    decision: Decision
    loads: list[int]
    candidates: int


@dataclass
class S2JStream:
    """The whole operator in one process: micro-batch by micro-batch, the same steps the Spark
    stages run (adapt -> join -> blocks -> expire)."""

    p: S2JParams
    workers: int = 2
    capacity: float | None = None
    th: Thresholds = field(default_factory=Thresholds)
    alpha: float = 0.8
    min_block: int = 1
    stored: list[_Stored] = field(default_factory=list)
    marks: dict[int, int] = field(default_factory=dict)
    next_block: int = 0
    high: int = 0
    low: int = 0

    def step(self, new: Mapping[int, Tuples]) -> StepResult:
        p = self.p
        sides = sorted(new)
        incoming = sum(len(new[s]) for s in sides)
        live = sum(len(b.block) for b in self.stored)
        inc_ts = np.concatenate([new[s].ts for s in sides]) if sides else np.zeros(0, np.int64)
        load = window_load(inc_ts, [(b.block.ts_min, b.block.ts_max, len(b.block)) for b in self.stored],
                           p.window_us)
        d = decide(live, incoming, self.workers, self.capacity, self.th, self.alpha, self.high, self.low,
                   self.min_block, load)
        self.workers, self.high, self.low = d.workers, d.high, d.low
        none = np.zeros(0, np.int64)
        all_sides = np.concatenate([np.full(len(new[s]), s, np.int64) for s in sides]) if sides else none
        all_ids = np.concatenate([new[s].id for s in sides]) if sides else none
        mask = shed_mask(all_sides, all_ids, d.shed)
        kept: dict[int, Tuples] = {}
        shed: dict[int, np.ndarray] = {}
        off = 0
        for s in sides:
            m = mask[off:off + len(new[s])]
            off += len(new[s])
            shed[s] = new[s].id[m]
            t = new[s].take(np.flatnonzero(~m))
            kept[s] = t.take(np.flatnonzero(p.admit(s, t)))
        pairs: dict[str, list[tuple[int, int]]] = {t.name: [] for t in p.tasks}
        cand = 0
        for b in self.stored:
            for tp in join_stored(p, b.block, b.side, kept):
                pairs[p.tasks[tp.task].name] += zip(tp.left_id.tolist(), tp.right_id.tolist())
                cand += tp.candidates
        for tp in join_new(p, kept):
            pairs[p.tasks[tp.task].name] += zip(tp.left_id.tolist(), tp.right_id.tolist())
            cand += tp.candidates
        for s in sides:
            for t in cut_blocks(kept[s], d.block_size):
                self.stored.append(_Stored(self.next_block, s, -1, Block(t).index(p.index_columns(s))))
                self.next_block += 1
            if len(new[s]):
                self.marks[s] = max(self.marks.get(s, -(2**62)), int(new[s].ts.max()))
        self.stored = [b for b in self.stored if not expired(b.side, b.block.ts_max, self.marks, p.window_us,
                                                             p.self_join, p.lateness_us)]
        assign = assign_blocks([len(b.block) for b in self.stored], [b.worker for b in self.stored], self.workers,
                               d.block_size)
        loads = [0] * self.workers
        for b, w in zip(self.stored, assign):
            b.worker = w
            loads[w] += len(b.block)
        return StepResult(pairs, shed, d, loads, cand)
