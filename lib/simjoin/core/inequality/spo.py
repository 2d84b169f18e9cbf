"""SPO-Join's window logic over the PO-Join kernels: who probes whom, in which role, within which
window (Aslam et al., *SPO-Join: Efficient Stream Inequality Join*, Sections 3-4).

Arrival-based semantics (docs/architecture.md): a pair (x in role ``l``, y in role ``r``) is reported iff the
predicates hold and

* time window W: ``0 <= ts_later - ts_earlier < W`` (equal timestamps are inside each other's window);
* count window W: y is among the last W tuples of its stream when x arrived, or x among the last W
  of its stream when y arrived. Each stream's ``seq`` is its arrival order (micro-batch by
  micro-batch, by ``(ts, id)`` inside one); ``cnt`` of a tuple is the number of tuples of the
  *other* stream that arrived before or with it (with it: ``ts`` not later). In a self-join
  ``cnt = seq``: the W tuples before it.

Each pair is found exactly once: when the later of its two tuples arrives, either by probing the
stored tuples of earlier units (:func:`probe_stored`) or inside its own unit (:func:`join_new`).
The slide only decides when state expires (:func:`expired`); the exact window test is part of
every probe, so coarse expiry never adds or loses a pair.

Allowed lateness L (time windows, ``IneqParams.lateness_us``): a tuple may arrive dated up to L
before the largest ``ts`` its stream committed (further behind it is quarantined as late). The
time test is symmetric (``|ts_x - ts_y| < W``), so such a tuple meets every stored tuple of its
window, earlier or later in ``ts``, as if it had arrived in order; state is kept until the other
stream's committed max ``ts`` is W + L past it. A count window is arrival-ordered: no tuple is late.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from simjoin.core.exact import as_float, float_columns
from simjoin.core.inequality.mutable import MutablePart
from simjoin.core.inequality.orient import orient
from simjoin.core.inequality.pojoin import POBatch
from simjoin.core.inequality.query import Query, parse_query
from simjoin.core.unique import unique

__all__ = ["Tuples", "Window", "Role", "IneqParams", "stored_index", "stored_mutable", "probe_stored", "join_new",
           "expired", "with_sequence", "count_before", "new_tuples", "probe_row", "merge_state", "read_mutable",
           "BATCH", "MUTABLE", "NEW"]

BATCH, MUTABLE, NEW = "batch", "mutable", "new"

Role = Literal["l", "r"]


@dataclass
class Tuples:
    """Tuples of one stream as columns: ``id``, ``ts`` (microseconds), ``seq``, ``cnt`` and the
    predicate columns in their own type (int64 for integer columns, compared exactly; float64)."""

    id: np.ndarray
    ts: np.ndarray
    seq: np.ndarray
    cnt: np.ndarray
    cols: dict[str, np.ndarray] = field(default_factory=dict)
    #: probe arrays prepared once for every batch these tuples probe (``probe_stored``)
    prepared: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return int(self.id.shape[0])

    @classmethod
    def empty(cls, columns: tuple[str, ...] = ()) -> Tuples:
        z = np.zeros(0, np.int64)
        return cls(z, z.copy(), z.copy(), z.copy(), {c: np.zeros(0) for c in columns})

    def take(self, idx: np.ndarray) -> Tuples:
        return Tuples(self.id[idx], self.ts[idx], self.seq[idx], self.cnt[idx],
                      {k: v[idx] for k, v in self.cols.items()})


@dataclass(frozen=True)
class Window:
    """A time window (microseconds) or a count window (tuples)."""

    time_us: int | None = None
    count: int | None = None

    def __post_init__(self) -> None:
        if (self.time_us is None) == (self.count is None):
            raise ValueError(f"invalid window {self}: allowed exactly one of a time (us) and a count")
        w = self.time_us if self.time_us is not None else self.count
        if w is None or w < 1:
            raise ValueError(f"invalid window {w}: allowed >= 1")


def with_sequence(new: Tuples, seq_base: int) -> Tuples:
    """``new`` ordered by (ts, id) with ``seq = seq_base + rank``."""
    order = np.lexsort((new.id, new.ts))
    t = new.take(order)
    t.seq = seq_base + np.arange(len(t), dtype=np.int64)
    return t


def count_before(probes_ts: np.ndarray, other_ts_sorted: np.ndarray, other_base: int) -> np.ndarray:
    """``cnt`` of new tuples: the other stream's tuples of earlier units plus its new tuples not later."""
    return other_base + np.searchsorted(other_ts_sorted, probes_ts, side="right").astype(np.int64)


def _parts(q: Query, t: Tuples, stored_role: Role) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    o = orient(q, stored_role)
    return o.stored_values(t.cols, len(t)), o.stored_key_values(t.cols, len(t)), o.stored_residual(t.cols, len(t))


def _probe_parts(q: Query, t: Tuples, stored_role: Role) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    o = orient(q, stored_role)
    return o.probe_values(t.cols, len(t)), o.probe_key_values(t.cols, len(t)), o.probe_residual(t.cols, len(t))


def stored_index(q: Query, t: Tuples, role: Role) -> POBatch:
    """An immutable PO-Join batch of ``t`` in ``role``."""
    vals, keys, res = _parts(q, t, role)
    return POBatch.build(t.id, t.ts, t.seq, vals, orient(q, role).ops, key_values=keys, residual=res)


def stored_mutable(q: Query, t: Tuples, role: Role, part: MutablePart | None = None) -> MutablePart:
    """``t`` inserted into the mutable part of ``role`` (a new one when ``part`` is None)."""
    o = orient(q, role)
    if part is None:
        part = MutablePart(o.ops, n_key_cols=len(o.key_stored.cols), n_residual=len(o.residual_stored.cols))
    vals, keys, res = _parts(q, t, role)
    if len(t):
        part.insert(t.id, t.ts, t.seq, vals, key_values=keys, residual=res)
    return part


def _bounds(probes: Tuples, window: Window) -> dict[str, np.ndarray]:
    if window.time_us is not None:
        w = np.int64(window.time_us)
        return {"ts_lo": probes.ts - w, "ts_hi": probes.ts + w}
    w = np.int64(window.count or 0)
    return {"seq_lo": probes.cnt - w, "seq_hi": probes.cnt}


def probe_stored(q: Query, index: POBatch | MutablePart, stored_role: Role, probes: Tuples,
                 window: Window) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """New tuples ``probes`` (the other role) against tuples stored by earlier units.
    Returns ``(left_id, right_id, ts)`` with ``ts`` the later tuple's timestamp."""
    if len(probes) == 0 or index.n == 0:
        z = np.zeros(0, np.int64)
        return z, z.copy(), z.copy()
    if isinstance(index, POBatch):  # every batch of one orientation takes the same prepared probes
        key = (q, stored_role, window, index.k, index.keys is not None, index.key_values.shape[1],
               index.residual.shape[1])
        if (args := probes.prepared.get(key)) is None:
            vals, keys, res = _probe_parts(q, probes, stored_role)
            args = probes.prepared[key] = index.prepare(vals, key_values=keys, residual=res, **_bounds(probes, window))
        pi, si = index.probe_prepared(args)
    else:
        vals, keys, res = _probe_parts(q, probes, stored_role)
        pi, si = index.probe(vals, key_values=keys, residual=res, **_bounds(probes, window))
    sid, sts = index.ids[si], index.ts[si]
    pid, pts = probes.id[pi], probes.ts[pi]
    ts = np.maximum(sts, pts)
    return (pid, sid, ts) if stored_role == "r" else (sid, pid, ts)


#: a unit's own tuples are joined chunk by chunk once they span this many time windows
CHUNK_WINDOWS = 4
#: the chunks of a time-window join of a unit's own tuples hold about this many tuples (at least a window)
CHUNK_TUPLES = 256


def join_new(q: Query, left: Tuples, right: Tuples | None, window: Window) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs whose two tuples both arrived in this unit. ``right`` None: a self-join of ``left``.

    With a time window, a unit spanning many windows (a backlog: a day of flights, a year) is
    joined chunk by chunk: one index over the whole unit would enumerate every pair its
    inequalities allow across the whole span (most of them far outside the window, a quadratic
    amount) before the window test. Chunks are ``ts`` ranges of width c >= W: a pair within the
    window lies in one chunk or two adjacent ones, so step k joins chunks k and k + 1 and keeps the
    pairs with a tuple in chunk k (each pair once, at its earlier chunk)."""
    stored = left if right is None else right
    if len(left) == 0 or len(stored) == 0:
        z = np.zeros(0, np.int64)
        return z, z.copy(), z.copy()
    if window.time_us is not None:
        w = int(window.time_us)
        lo = int(min(left.ts.min(), stored.ts.min()))
        span = int(max(left.ts.max(), stored.ts.max())) - lo
        if span > CHUNK_WINDOWS * w:
            n = len(left) + (0 if right is None else len(right))
            per_window = max(1.0, n * w / max(span, 1))
            c = w * max(1, int(np.ceil(CHUNK_TUPLES / per_window)))
            if span > 2 * c:
                return _join_new_chunked(q, left, right, window, lo, c)
    pi, si = _join_new_idx(q, left, right, window)
    return left.id[pi], stored.id[si], np.maximum(left.ts[pi], stored.ts[si])


def _join_new_chunked(q: Query, left: Tuples, right: Tuples | None, window: Window, lo: int,
                      c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    cl = (left.ts - lo) // c
    cs = cl if right is None else (right.ts - lo) // c
    order_l = np.argsort(cl, kind="stable")
    order_s = order_l if right is None else np.argsort(cs, kind="stable")
    ks = unique(np.concatenate([cl, cs]) if right is not None else cl)
    out_l, out_s, out_t = [], [], []
    for k in ks.tolist():
        a0, a1 = np.searchsorted(cl[order_l], [k, k + 2])
        L = left.take(order_l[a0:a1])
        if right is None:
            S = None
            ck_l = ck_s = cl[order_l[a0:a1]]
        else:
            b0, b1 = np.searchsorted(cs[order_s], [k, k + 2])
            S = right.take(order_s[b0:b1])
            ck_l, ck_s = cl[order_l[a0:a1]], cs[order_s[b0:b1]]
        pi, si = _join_new_idx(q, L, S, window)
        keep = (ck_l[pi] == k) | (ck_s[si] == k)
        pi, si = pi[keep], si[keep]
        T = L if S is None else S
        out_l.append(L.id[pi])
        out_s.append(T.id[si])
        out_t.append(np.maximum(L.ts[pi], T.ts[si]))
    return np.concatenate(out_l), np.concatenate(out_s), np.concatenate(out_t)


def _join_new_idx(q: Query, left: Tuples, right: Tuples | None, window: Window) -> tuple[np.ndarray, np.ndarray]:
    """:func:`join_new`'s pairs as positions into ``left`` and the stored side (``right``, or
    ``left`` itself for a self-join), over the whole of both."""
    stored = left if right is None else right
    if len(left) == 0 or len(stored) == 0:
        z = np.zeros(0, np.int64)
        return z, z.copy()
    index = stored_index(q, stored, "r")
    vals, keys, res = _probe_parts(q, left, "r")
    if right is None and window.count is not None:
        w = np.int64(window.count)
        bounds = {"seq_lo": left.seq - w, "seq_hi": left.seq + w + 1}
    elif window.time_us is not None:
        bounds = _bounds(left, window)
    else:
        bounds = {}
    pi, si = index.probe(vals, key_values=keys, residual=res, **bounds)
    if right is None:
        keep = left.id[pi] != stored.id[si]
        pi, si = pi[keep], si[keep]
    elif window.count is not None:
        w = np.int64(window.count)
        x_cnt, y_seq = left.cnt[pi], stored.seq[si]
        y_cnt, x_seq = stored.cnt[si], left.seq[pi]
        keep = ((x_cnt - w <= y_seq) & (y_seq < x_cnt)) | ((y_cnt - w <= x_seq) & (x_seq < y_cnt))
        pi, si = pi[keep], si[keep]
    return pi, si


def expired(window: Window, ts_max: int, seq_max: int, other_max_ts: int | None, own_count: int,
            lateness_us: int = 0) -> bool:
    """Whether stored tuples with these maxima can still meet a future tuple of the other role.

    Time: a future tuple of the other stream is not dated more than the allowed lateness L before
    that stream's largest committed ``ts`` (further behind it is quarantined as late), so
    ``ts <= other_max_ts - W - L`` is out of reach.
    Count: a future tuple's ``cnt`` is at least ``own_count`` (every stored tuple arrived before
    it), so ``seq < own_count - W`` is out of reach.
    """
    if window.time_us is not None:
        return other_max_ts is not None and ts_max <= other_max_ts - int(window.time_us) - int(lateness_us)
    return seq_max < own_count - int(window.count or 0)


# ----------------------------------------------------------------------------- the pipeline's steps
# One state row (``simjoin.operators.inequality.STATE_ARROW``) is a dict: batch_id, side, kind (BATCH,
# MUTABLE or NEW - the unit's own tuples), worker, n, ts/seq min and max, and the serialized
# index per stored role (blob_l, blob_r) plus, for a mutable part, its tuples (blob_t).

@dataclass(frozen=True)
class IneqParams:
    """What the pipeline steps need: the query text, the streams, the window, the workers and
    the merge granularity (delta tuples, or a time slide)."""

    where: str
    self_join: bool
    window: Window
    workers: int
    delta: int | None  # merge every delta tuples; None: a time window's slide decides
    slide_us: int | None
    #: allowed lateness L (time windows): tuples up to L behind their stream's committed max ts join
    lateness_us: int = 0

    @property
    def query(self) -> Query:
        return parse_query(self.where)

    def columns(self, side: int) -> tuple[str, ...]:
        q = self.query
        if self.self_join:
            return tuple(q.columns)
        return tuple(q.left_columns if side == 0 else q.right_columns)

    def roles(self, side: int) -> tuple[str, ...]:
        """The roles a stored tuple of ``side`` joins in."""
        return ("l", "r") if self.self_join else (("l",) if side == 0 else ("r",))

    @property
    def sides(self) -> tuple[int, ...]:
        return (0,) if self.self_join else (0, 1)




def new_tuples(side: np.ndarray, ids: np.ndarray, ts: np.ndarray, cols: dict[str, np.ndarray], p: IneqParams,
               counts: dict[int, int]) -> dict[int, Tuples]:
    """A unit's new tuples per side, ordered by (ts, id), with ``seq`` after the ``counts`` of
    earlier units and ``cnt`` (the other stream's tuples before or with it; self-join: ``seq``)."""
    out: dict[int, Tuples] = {}
    q = p.query  # an integer column compared with a float one is compared in float64 (simjoin.core.exact)
    floats = float_columns({c: np.asarray(v).dtype.kind in "iu" for c, v in cols.items()},
                           [(pr.left, pr.right) for pr in q.predicates])
    for s in p.sides:
        m = side == s
        k = int(m.sum())
        raw = Tuples(np.asarray(ids, np.int64)[m], np.asarray(ts, np.int64)[m], np.zeros(k, np.int64),
                     np.zeros(k, np.int64), {c: _own_type(cols[c], c, floats)[m] for c in p.columns(s)})
        out[s] = with_sequence(raw, int(counts.get(s, 0)))
    if p.self_join:
        out[0].cnt = out[0].seq.copy()
    else:
        for s in (0, 1):
            out[s].cnt = count_before(out[s].ts, out[1 - s].ts, int(counts.get(1 - s, 0)))
    return out


def load_index(blob: bytes | None, kind: str) -> POBatch | MutablePart | None:
    if blob is None:
        return None
    return MutablePart.from_bytes(blob) if kind == MUTABLE else POBatch.from_bytes(blob)




def probe_row(q: Query, row: dict[str, Any], new: dict[int, Tuples], window: Window,
              self_join: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """One state row probed by the unit's new tuples of the other role (a NEW row: the new tuples
    joined among themselves). Returns (left_id, right_id, ts, tuples probed)."""
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    probed = 0
    if row["kind"] == NEW:
        parts.append(join_new(q, new[0], None if self_join else new[1], window))
        probed = sum(len(t) for t in new.values())
    else:
        side = int(row["side"])
        probes = new[0] if self_join else new[1 - side]
        for role in ("l", "r"):
            index = load_index(row.get(f"blob_{role}"), row["kind"])
            if index is not None:
                parts.append(probe_stored(q, index, role, probes, window))  # type: ignore[arg-type]
                probed += len(probes)
    if not parts:
        z = np.zeros(0, np.int64)
        return z, z.copy(), z.copy(), probed
    return (np.concatenate([x[0] for x in parts]), np.concatenate([x[1] for x in parts]),
            np.concatenate([x[2] for x in parts]), probed)


def state_row(batch_id: int, side: int, kind: str, worker: int, t: Tuples, blobs: dict[str, bytes]) -> dict[str, Any]:
    n = len(t)
    return {"batch_id": batch_id, "side": side, "kind": kind, "worker": worker, "n": n,
            "ts_min": int(t.ts.min()) if n else None, "ts_max": int(t.ts.max()) if n else None,
            "seq_min": int(t.seq.min()) if n else None, "seq_max": int(t.seq.max()) if n else None,
            "blob_l": blobs.get("l"), "blob_r": blobs.get("r"), "blob_t": blobs.get("t")}


def tuples_to_bytes(t: Tuples) -> bytes:
    buf = io.BytesIO()
    arrays: dict[str, np.ndarray] = {"id": t.id, "ts": t.ts, "seq": t.seq, "cnt": t.cnt,
                                     **{f"col_{k}": v for k, v in t.cols.items()}}
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def tuples_from_bytes(b: bytes) -> Tuples:
    with np.load(io.BytesIO(b)) as z:
        return Tuples(z["id"], z["ts"], z["seq"], z["cnt"],
                      {k[4:]: z[k] for k in z.files if k.startswith("col_")})


def read_mutable(rows: list[Any]) -> dict[int, tuple[Tuples, dict[str, MutablePart]]]:
    """Per side, the persisted mutable part (its tuples and its index per role)."""
    out: dict[int, tuple[Tuples, dict[str, MutablePart]]] = {}
    for r in rows:
        parts = {role: MutablePart.from_bytes(r[f"blob_{role}"]) for role in ("l", "r") if r[f"blob_{role}"]}
        out[int(r["side"])] = (tuples_from_bytes(r["blob_t"]), parts)
    return out


def merge_state(prev: dict[int, tuple[Tuples, dict[str, MutablePart]]], new: dict[int, Tuples], p: IneqParams,
                next_batch: int) -> tuple[list[dict[str, Any]], int, dict[str, float]]:
    """The state rows this unit adds: per side, every full delta-tuple run of the mutable part
    (in arrival order; a time window's in (ts, seq) order) cut into an immutable PO-Join batch
    (worker ``batch_id % workers``: round-robin), and the mutable part that remains - the new
    tuples inserted into the old part's sorted arrays when no batch was cut. ``prev``: per side,
    the mutable part's tuples and its index per role. Returns (rows, next batch id, timings)."""
    q = p.query
    rows: list[dict[str, Any]] = []
    t_merge = t_build = 0.0
    for s in p.sides:
        old_t, old_parts = prev.get(s, (Tuples.empty(p.columns(s)), {}))
        add = new[s]
        allt = _concat(old_t, add)
        if p.window.time_us is not None:  # late tuples (within the lateness) take their place by ts
            allt = allt.take(np.lexsort((allt.seq, allt.ts)))
        cut = 0
        while (take := _due(p, allt, cut)) is not None:
            chunk = allt.take(np.arange(cut, cut + take))
            t0 = time.perf_counter()
            blobs = {role: stored_index(q, chunk, role).to_bytes() for role in p.roles(s)}  # type: ignore[arg-type]
            t_build += time.perf_counter() - t0
            rows.append(state_row(next_batch, s, BATCH, next_batch % p.workers, chunk, blobs))
            next_batch += 1
            cut += take
        t0 = time.perf_counter()
        if cut == 0:  # insert the new tuples into the sorted arrays of the old part
            rest = allt
            parts = {role: stored_mutable(q, add, role, old_parts.get(role)) for role in p.roles(s)}  # type: ignore[arg-type]
        else:
            rest = allt.take(np.arange(cut, len(allt)))
            parts = {role: stored_mutable(q, rest, role) for role in p.roles(s)}  # type: ignore[arg-type]
        t_merge += time.perf_counter() - t0
        blobs = {role: part.to_bytes() for role, part in parts.items()}
        blobs["t"] = tuples_to_bytes(rest)
        rows.append(state_row(-1, s, MUTABLE, 0, rest, blobs))
    return rows, next_batch, {"merge_seconds": t_merge, "build_seconds": t_build}



def _own_type(v: Any, name: str = "", floats: set[str] | frozenset[str] = frozenset()) -> np.ndarray:
    """A predicate column in its own type: integers as int64 (compared exactly) unless compared with a float
    column (``floats``: then float64, below 2^53 or refused), anything else float64."""
    a = np.asarray(v)
    if a.dtype.kind in "iu" and name not in floats:
        return a.astype(np.int64, copy=False)
    return as_float(a, f"column {name}")


def _cat(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Two parts of one column (an empty part takes the other's type: int64 never widens to float64)."""
    return y.copy() if len(x) == 0 else x.copy() if len(y) == 0 else np.concatenate([x, y])


def _concat(a: Tuples, b: Tuples) -> Tuples:
    return Tuples(np.concatenate([a.id, b.id]), np.concatenate([a.ts, b.ts]), np.concatenate([a.seq, b.seq]),
                  np.concatenate([a.cnt, b.cnt]), {c: _cat(a.cols[c], b.cols[c]) for c in b.cols})


def _due(p: IneqParams, t: Tuples, cut: int) -> int | None:
    """How many tuples from position ``cut`` (the part's order) form the next batch, if one is due:
    delta of them, or with a time slide and no delta, those of the first slide-long span once the
    part reaches past it (``merge_state`` keeps a time window's mutable part in (ts, seq) order: a
    tuple within the allowed lateness may arrive after later-dated ones)."""
    left = len(t) - cut
    if left <= 0:
        return None
    if p.delta is not None:
        return p.delta if left >= p.delta else None
    if p.slide_us is None:
        return None
    ts = t.ts[cut:]
    end = int(ts[0]) + int(p.slide_us)
    if int(ts[-1]) < end:
        return None
    return max(1, int(np.searchsorted(ts, end, side="left")))


