"""The S2J join kernel (Section 4, "Enhancing Join Processing Efficiency"): a tuple block of one
stream, indexed per column, probed by tuples of the other role for every join task at once.

* **Tuple block** (:class:`Block`): ``ς`` tuples of one stream (``spo.Tuples``: id, ts in
  microseconds, the projected columns), immutable once written, with one stable sort order per
  column that leads a task (the "BST index" as sorted arrays). The state is a set of blocks; a
  block is the unit of storage, of expiry and of transfer between workers.
* **Index per task**: an equality leads through a hash index (open addressing over the block's
  distinct keys, built in numba); an inequality, band or gap through the sorted order; a task of
  ``!=`` filters only scans. The index returns exactly the tuples the main predicate accepts: a
  comparison is a binary search on the (offset-folded) keys, a band ``|fl(l - r)| < eps`` the
  intersection and a gap the union of two monotone ranges found by binary searches that evaluate
  the literal expression.
* **Piggybacked filters**: every candidate is checked against the task's other predicates, the
  lifespan ``|ts_l - ts_r| < W`` and, in a self-join of the new tuples, ``x != y``. All in one
  numba loop per (task, block); pairs leave as arrays.
* **Exact values** (``simjoin.core.exact``): a predicate between two integer columns runs on int64
  keys and compares on the integers - an offset is folded in with its overflow refused (one line),
  a band's ``l - r`` never wraps (``_sub_cmp``), a fractional eps becomes the integer bound it
  means. Other predicates run in float64, literally, as before.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from simjoin.core.exact import INT64_MAX, INT64_MIN, as_float, int_offset, is_int, shift_int
from simjoin.core.inequality.kernels import GE, GT, LE, LT, OP_CODES, grow, lower_bound, upper_bound
from simjoin.core.inequality.spo import Tuples
from simjoin.core.s2j.task import JoinTask, Theta

__all__ = ["Block", "ProbeResult", "probe", "CODES", "flip_code"]

EQ, NE = 4, 5
CODES = {**OP_CODES, "=": EQ, "!=": NE}
_FLIP = {LT: GT, LE: GE, GT: LT, GE: LE, EQ: EQ, NE: NE}
MODE_HASH, MODE_CMP, MODE_ABS, MODE_SCAN = 0, 1, 2, 3
KIND_CMP, KIND_ABS = 0, 1


def flip_code(code: int) -> int:
    return _FLIP[code]


@njit(cache=True, nogil=True, inline="always")
def _cmp(op, a, b):  # type: ignore[no-untyped-def]
    if op == LT:
        return a < b
    if op == LE:
        return a <= b
    if op == GT:
        return a > b
    if op == GE:
        return a >= b
    if op == EQ:
        return a == b
    return a != b


_MAX = np.int64(INT64_MAX)
_MIN = np.int64(INT64_MIN)


@njit(cache=True, nogil=True, inline="always")
def _sub_cmp(op, a, b, t, exact):  # type: ignore[no-untyped-def]
    """``(a - b) OP t``; with ``exact`` (int64 operands and ``t``) on the integers: a difference
    outside int64 is beyond every ``t``, never wrapped."""
    if exact:
        if b < 0 and a > _MAX + b:  # a - b > int64 max >= t
            return op in (GT, GE, NE)
        if b > 0 and a < _MIN + b:  # a - b < int64 min <= t
            return op in (LT, LE, NE)
    return _cmp(op, a - b, t)


@njit(cache=True, nogil=True, inline="always")
def _abs_cmp(op, a, b, c, exact):  # type: ignore[no-untyped-def]
    """``|a - b| OP c`` (``c >= 0``): ``|fl(a - b)| OP c``, or on the integers with ``exact``."""
    if not exact:
        return _cmp(op, abs(a - b), c)
    if op == LT:
        return _sub_cmp(LT, a, b, c, True) and _sub_cmp(GT, a, b, -c, True)
    if op == LE:
        return _sub_cmp(LE, a, b, c, True) and _sub_cmp(GE, a, b, -c, True)
    if op == GT:
        return _sub_cmp(GT, a, b, c, True) or _sub_cmp(LT, a, b, -c, True)
    return _sub_cmp(GE, a, b, c, True) or _sub_cmp(LE, a, b, -c, True)


@njit(cache=True, nogil=True, inline="always")
def _elem(kind, op, c, lv, rv, exact):  # type: ignore[no-untyped-def]
    """One predicate, literally: ``fl(lv + c) OP rv`` or ``|fl(lv - rv)| OP c`` (``exact``: integer
    keys, the offset already folded into ``lv``, ``c`` 0)."""
    if kind == KIND_CMP:
        return _cmp(op, lv + c, rv)
    return _abs_cmp(op, lv, rv, c, exact)


@njit(cache=True, nogil=True, inline="always")
def _diff(stored_l, x, v, op, t, exact):  # type: ignore[no-untyped-def]
    """``fl(l - r) OP t`` with the stored value ``v`` in role l (else r) and the probe's ``x``."""
    if stored_l:
        return _sub_cmp(op, v, x, t, exact)
    return _sub_cmp(op, x, v, t, exact)


@njit(cache=True, nogil=True)
def _mono_range(a, lo, hi, stored_l, x, op, t, exact):  # type: ignore[no-untyped-def]
    """The positions of ``[lo, hi)`` where ``fl(l - r) OP t`` holds. ``fl(l - r)`` is monotone in
    the stored value (rounding is monotone), so they form a prefix or a suffix of the sorted run;
    its end is found by binary search on the literal expression."""
    if lo >= hi:
        return lo, lo
    first = _diff(stored_l, x, a[lo], op, t, exact)
    a_lo, a_hi = lo, hi
    while a_lo < a_hi:  # first position where the truth differs from ``first``
        mid = (a_lo + a_hi) >> 1
        if _diff(stored_l, x, a[mid], op, t, exact) == first:
            a_lo = mid + 1
        else:
            a_hi = mid
    if first:
        return lo, a_lo
    return a_lo, hi


@njit(cache=True, nogil=True, inline="always")
def _mix(z):  # type: ignore[no-untyped-def]
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True)
def _build_hash(gbits):  # type: ignore[no-untyped-def]
    """Open-addressing table over distinct keys (their float64 bits): slot -> group, -1 empty."""
    size = 4
    while size < 2 * gbits.shape[0]:
        size *= 2
    table = np.full(size, -1, np.int64)
    mask = np.uint64(size - 1)
    for g in range(gbits.shape[0]):
        s = np.int64(_mix(gbits[g]) & mask)
        while table[s] != -1:
            s = (s + 1) & (size - 1)
        table[s] = g
    return table


@njit(cache=True, nogil=True, inline="always")
def _lookup(table, gbits, bits):  # type: ignore[no-untyped-def]
    size = table.shape[0]
    s = np.int64(_mix(bits) & np.uint64(size - 1))
    while table[s] != -1:
        if gbits[table[s]] == bits:
            return table[s]
        s = (s + 1) & (size - 1)
    return -1


@njit(cache=True, nogil=True)
def _probe(mode, op, c, exact, stored_l, skey, perm, gstart, gbits, table, pkey, pbits,  # type: ignore[no-untyped-def]
           a_kind, a_op, a_val, s_aux, p_aux, i_kind, i_op, i_val, s_iaux, p_iaux, sts, pts, window, sid, pid,
           exclude_self):
    n = skey.shape[0]
    m = pkey.shape[0]
    out_p = np.empty(max(16, m), np.int64)
    out_s = np.empty(max(16, m), np.int64)
    k = 0
    cand = 0
    n_aux = a_kind.shape[0]
    for i in range(m):
        x = pkey[i]
        r0, r1, r2, r3 = 0, 0, 0, 0  # up to two ranges of sorted positions
        if mode == MODE_HASH:
            g = _lookup(table, gbits, pbits[i])
            if g >= 0:
                r0, r1 = gstart[g], gstart[g + 1]
        elif mode == MODE_CMP:  # skey OP x, skey ascending
            if op == LT:
                r0, r1 = 0, lower_bound(skey, 0, n, x)
            elif op == LE:
                r0, r1 = 0, upper_bound(skey, 0, n, x)
            elif op == GT:
                r0, r1 = upper_bound(skey, 0, n, x), n
            else:
                r0, r1 = lower_bound(skey, 0, n, x), n
        elif mode == MODE_ABS:
            if op in (LT, LE):  # band: d OP eps and d OP' -eps
                a0, a1 = _mono_range(skey, 0, n, stored_l, x, op, c, exact)
                b0, b1 = _mono_range(skey, 0, n, stored_l, x, GT if op == LT else GE, -c, exact)
                r0, r1 = max(a0, b0), min(a1, b1)
            else:  # gap: d OP eps or d OP'' -eps (disjoint unless they touch)
                r0, r1 = _mono_range(skey, 0, n, stored_l, x, op, c, exact)
                r2, r3 = _mono_range(skey, 0, n, stored_l, x, LT if op == GT else LE, -c, exact)
                if r1 > r0 and r3 > r2 and r2 <= r1 and r0 <= r3:
                    r0, r1, r2, r3 = min(r0, r2), max(r1, r3), 0, 0
        else:
            r0, r1 = 0, n
        need = k + max(0, r1 - r0) + max(0, r3 - r2)  # room for every candidate, reserved per probe (kernels.reserve)
        out_p = grow(out_p, k, need)
        out_s = grow(out_s, k, need)
        for part in range(2):
            lo, hi = (r0, r1) if part == 0 else (r2, r3)
            for pos in range(lo, hi):
                row = perm[pos]
                cand += 1
                d = pts[i] - sts[row]
                if d >= window or -d >= window:
                    continue
                if exclude_self and pid[i] == sid[row]:
                    continue
                ok = True
                for j in range(n_aux):
                    if stored_l:
                        ok = _elem(a_kind[j], a_op[j], a_val[j], s_aux[j, row], p_aux[j, i], False)
                    else:
                        ok = _elem(a_kind[j], a_op[j], a_val[j], p_aux[j, i], s_aux[j, row], False)
                    if not ok:
                        break
                if not ok:
                    continue
                for j in range(i_kind.shape[0]):  # the integer predicates, on the integers
                    if stored_l:
                        ok = _elem(i_kind[j], i_op[j], i_val[j], s_iaux[j, row], p_iaux[j, i], True)
                    else:
                        ok = _elem(i_kind[j], i_op[j], i_val[j], p_iaux[j, i], s_iaux[j, row], True)
                    if not ok:
                        break
                if not ok:
                    continue
                out_p[k] = i
                out_s[k] = row
                k += 1
    return out_p[:k], out_s[:k], cand


@dataclass
class Block:
    """One tuple block of a stream: its tuples and, per column, a stable sort order (built once;
    blocks are immutable)."""

    tuples: Tuples
    orders: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.tuples)

    def order(self, col: str) -> np.ndarray:
        if col not in self.orders:
            self.orders[col] = np.argsort(self.tuples.cols[col], kind="stable").astype(np.int64)
        return self.orders[col]

    def index(self, columns: Sequence[str]) -> Block:
        """Build the sort orders of ``columns`` now (before the block is stored)."""
        for c in columns:
            self.order(c)
        return self

    def to_bytes(self) -> bytes:
        """The block's arrays (ids, ts, columns, sort orders) as one npz blob."""
        buf = io.BytesIO()
        t = self.tuples
        arrays: dict[str, np.ndarray] = {"id": t.id, "ts": t.ts, **{f"col_{k}": v for k, v in t.cols.items()},
                                         **{f"ord_{k}": v for k, v in self.orders.items()}}
        np.savez(buf, **arrays)  # type: ignore[arg-type]
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, b: bytes) -> Block:
        with np.load(io.BytesIO(b)) as z:
            ids = z["id"]
            zeros = np.zeros(ids.shape[0], np.int64)
            t = Tuples(ids, z["ts"], zeros, zeros, {k[4:]: z[k] for k in z.files if k.startswith("col_")})
            return cls(t, {k[4:]: z[k] for k in z.files if k.startswith("ord_")})

    @property
    def ts_min(self) -> int:
        return int(self.tuples.ts.min()) if len(self) else 0

    @property
    def ts_max(self) -> int:
        return int(self.tuples.ts.max()) if len(self) else 0


def index_columns(tasks: Sequence[JoinTask], role: str) -> tuple[str, ...]:
    """The columns a block stored in ``role`` is sorted by: each sorted-index task's main column."""
    out = set()
    for t in tasks:
        m = t.main_theta
        if m is not None and m.index == "sorted":
            out.add(m.left if role == "l" else m.right)
    return tuple(sorted(out))


@dataclass
class ProbeResult:
    """Pairs of one (task, block) probe as row indices into the probes and the block, plus the
    candidates the index returned (for the stats)."""

    probe_idx: np.ndarray
    stored_idx: np.ndarray
    candidates: int


def _bits(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":  # an integer key is its own bits
        return np.ascontiguousarray(a, np.int64).view(np.uint64)
    return np.ascontiguousarray(a + 0.0).view(np.uint64)  # -0.0 and 0.0 compare equal: hash alike


def _int_band(op: str, eps: float | int, what: str) -> tuple[int, int]:
    """``|d| OP eps`` for an integer ``d`` as ``|d| OP' c`` with an integer ``c``: a fractional eps means its
    floor (``<``, ``<=`` become ``<=``) or its ceiling (``>``, ``>=`` become ``>=``)."""
    f = eps if isinstance(eps, (int, np.integer)) else float(eps)
    if isinstance(f, float) and not f.is_integer():
        if op in ("<", "<="):
            return CODES["<="], int_offset(np.floor(f), what)
        return CODES[">="], int_offset(np.ceil(f), what)
    return CODES[op], int_offset(f, what)


def probe(task: JoinTask, block: Block, probes: Tuples, stored_role: str, window_us: int,
          exclude_self: bool = False) -> ProbeResult:
    """Pairs of ``task`` between the tuples of ``block`` (in ``stored_role``) and ``probes`` (in
    the other role) whose predicates hold and whose timestamps are less than ``window_us`` apart.
    Selections are applied by the caller (pre-selection)."""
    st, n, m = block.tuples, len(block), len(probes)
    empty = np.zeros(0, np.int64)
    if n == 0 or m == 0:
        return ProbeResult(empty, empty, 0)
    stored_l = stored_role == "l"

    def scol(t: Theta) -> np.ndarray:
        return st.cols[t.left if stored_l else t.right]

    def pcol(t: Theta) -> np.ndarray:
        return probes.cols[t.right if stored_l else t.left]

    def exact(t: Theta) -> bool:  # two integer columns: compared on the integers
        return is_int(scol(t)) and is_int(pcol(t))

    def fold(t: Theta, sv: np.ndarray, pv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``l + value`` exactly in int64 (overflow refused), on the l side of an integer ``cmp`` predicate."""
        if stored_l:
            return shift_int(sv, t.value, f"column {t.left}"), pv.astype(np.int64)
        return sv.astype(np.int64), shift_int(pv, t.value, f"column {t.left}")

    main = task.main_theta
    zi = np.zeros(1, np.int64)
    zb = np.zeros(0, np.uint64)
    gstart, gbits, table, pbits = zi, zb, zi, zb
    op, c = 0, 0.0
    ex = False
    if main is None:
        mode, skey, perm, pkey = MODE_SCAN, np.zeros(n), np.arange(n, dtype=np.int64), np.zeros(m)
    else:
        col = main.left if stored_l else main.right
        perm = block.order(col)
        raw = st.cols[col][perm]
        x = pcol(main)
        ex = exact(main)
        if not ex:  # float64; an integer compared with a float must be below 2^53 (else refused)
            raw, x = as_float(raw, f"column {col}"), as_float(x, f"column {main.right if stored_l else main.left}")
        if main.kind == "abs":
            if ex:
                code, ci = _int_band(main.op, main.value, f"abs(l.{main.left} - r.{main.right})")
                mode, skey, pkey, op, c = MODE_ABS, raw.astype(np.int64), x.astype(np.int64), code, ci
            else:
                mode, skey, pkey, op, c = MODE_ABS, raw, x, CODES[main.op], float(main.value)
        else:
            # l + c OP r: fold c into the stored keys (role l, order-preserving) or the probes
            if ex:
                skey, pkey = fold(main, raw, x)
            else:
                skey, pkey = (raw + main.value, x) if stored_l else (raw, x + main.value)
            code = CODES[main.op]
            op = code if stored_l else flip_code(code)  # as "stored key OP probe key"
            mode = MODE_HASH if main.op == "=" else MODE_CMP
            if mode == MODE_HASH:
                skey = skey if ex else skey + 0.0
                cut = np.flatnonzero(skey[1:] != skey[:-1]) + 1
                gstart = np.concatenate(([0], cut, [n])).astype(np.int64)
                gbits = _bits(skey[gstart[:-1]])
                table = _build_hash(gbits)
                pbits = _bits(pkey)
    aux = [t for t in task.aux if not exact(t)]
    a_kind = np.array([KIND_CMP if t.kind == "cmp" else KIND_ABS for t in aux], np.int64)
    a_op = np.array([CODES[t.op] for t in aux], np.int64)
    a_val = np.array([t.value for t in aux], np.float64)
    s_aux = np.ascontiguousarray(np.array([as_float(scol(t), f"column {t.left if stored_l else t.right}")
                                           for t in aux], np.float64).reshape(len(aux), n))
    p_aux = np.ascontiguousarray(np.array([as_float(pcol(t), f"column {t.right if stored_l else t.left}")
                                           for t in aux], np.float64).reshape(len(aux), m))
    iaux = [t for t in task.aux if exact(t)]  # integer predicates: int64 keys, compared on the integers
    i_kind, i_op, i_val = np.zeros(len(iaux), np.int64), np.zeros(len(iaux), np.int64), np.zeros(len(iaux), np.int64)
    s_iaux, p_iaux = np.zeros((len(iaux), n), np.int64), np.zeros((len(iaux), m), np.int64)
    for j, t in enumerate(iaux):
        if t.kind == "cmp":
            i_kind[j], i_op[j] = KIND_CMP, CODES[t.op]
            s_iaux[j], p_iaux[j] = fold(t, scol(t), pcol(t))
        else:
            i_kind[j] = KIND_ABS
            i_op[j], i_val[j] = _int_band(t.op, t.value, f"abs(l.{t.left} - r.{t.right})")
            s_iaux[j], p_iaux[j] = scol(t), pcol(t)
    kdt = np.int64 if ex else np.float64
    pi, si, cand = _probe(mode, op, c, ex, stored_l, np.ascontiguousarray(skey, kdt), perm, gstart, gbits,
                          table, np.ascontiguousarray(pkey, kdt), pbits, a_kind, a_op, a_val, s_aux, p_aux,
                          i_kind, i_op, i_val, s_iaux, p_iaux, st.ts, probes.ts, np.int64(window_us), st.id,
                          probes.id, exclude_self)
    return ProbeResult(pi, si, int(cand))
