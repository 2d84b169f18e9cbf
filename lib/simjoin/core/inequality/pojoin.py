"""The immutable part of SPO-Join: one PO-Join batch (permutation and offset arrays, IE-Join probe).

Aslam et al., *SPO-Join: Efficient Stream Inequality Join*:

* Section 2.1 (IE-Join, Khayyat et al.): a *permutation array* P gives, for each position of the tuples sorted
  on attribute b, the position of the same tuple in the sort order of attribute a; *offset arrays* are relative
  positions found by binary search in a sorted array.
* Section 3.3: every δ tuples the mutable part is merged into such an immutable batch (``POBatch.build``);
  batches form a list and the oldest is dropped when it leaves the window (coarse-grained expiry, the caller's
  job: ``ts_max`` / ``seq_max`` tell when).
* Section 3.4, Figure 5: a probe binary-searches attribute b and sets the bits ``P[pos..]`` of the qualifying
  tuples in a bit array indexed by a-order, then binary-searches attribute a and scans the bits from there.

Layout. Predicate ``k`` reads ``values[:, k]  ops[k]  probe[:, k]`` (see ``orient``). ``order1`` (a-order) sorts
the batch by (equality key, values[:, 0], values[:, 1], ...). Every predicate whose values are non-decreasing
along ``order1`` within each key group (predicate 0, the other half of a band on the same attribute, ...) belongs
to ``class1``: its qualifying tuples are a contiguous range of ``order1`` and the ranges of ``class1`` intersect
into one range ``[lo, hi)``. The first other predicate defines ``order2`` (b-order; key, its values, the rest);
the predicates compatible with it form ``class2`` with range ``[lo2, hi2)`` of ``order2``. ``permutation[j]`` is
the ``order1`` position of the tuple at ``order2`` position ``j``. Every other predicate, key equality, ``!=``
residuals and the window bounds are checked exactly on each candidate (``kernels.settle``).

Equality keys partition the batch: the tuples of one key code are one contiguous group of both orders
(``group_offsets`` are the offset arrays of the groups) and a probe only sees the group of its own key code, so
``=`` never filters a cross product. Key values are compared exactly on candidates (codes may collide).

Probe. Each probe's ranges come from one galloping pass per predicate over the probes in value order
(``kernels.sorted_ranges``: the offset arrays of the whole micro-batch at once, O(m + n) where a binary search per
probe cost O(m log n) in cache misses), then the cheapest of three exact plans (``_plan``):

* scan ``order1[lo:hi]`` (or ``order2[lo2:hi2]``) and check the other predicates — best when a range is short;
* the IE-Join (``_iejoin``): probes of a group sorted by ``(hi2, lo2)``; the bits ``P[j]`` of ``order2``
  positions entering ``[lo2, hi2)`` are set, and — when ``lo2`` ascends with ``hi2``, as for one-sided
  predicates and bands — the bits leaving it cleared, so the bit array holds exactly the b-qualifying tuples;
  the a-range ``[lo, hi)`` is then scanned, skipping empty words through a summary bit array (one bit per
  64-bit word). When ``lo2`` does not ascend, the bits hold the prefix ``[gs, hi2)`` and ``class2`` is checked.

The IE-Join is chosen unless the shorter range is about as short as its word scan (``(hi - lo) / 128 + 32``):
its cost, ``(hi - lo) / 64`` words plus the intersection of the two ranges, is never much above a scan's and
is far below it for anti-correlated predicates (Q1, Q3), where long ranges intersect in few tuples.
The plans collect candidate pairs; ``kernels.settle`` checks them exactly in one pass (bounds, the remaining
predicates, keys, ``!=``). Results are ``(probe_index, stored_index)`` with ``stored_index`` indexing the arrays
given to ``build``. The probe arrays are prepared (and sorted) once per micro-batch and orientation and reused on
every batch (``ProbeArgs``); the kernels release the GIL, so the probe tasks of one unit run in parallel threads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

from simjoin.core.arrays import pack, unpack
from simjoin.core.exact import as_keys

from .kernels import (
    OP_NAMES,
    SETTLE_EVERY,
    ProbeArgs,
    check_sets,
    key_codes,
    lowest_bit,
    make_ctx,
    op_codes,
    probe_args,
    reserve,
    settle,
    sorted_ranges,
)

__all__ = ["POBatch", "FORMAT_VERSION", "PLANS"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.int64]  # value keys (``exact.as_keys``)

# 2: values are int64 keys (integers exact, floats by their order-preserving key); 1 held float64 values
FORMAT_VERSION = 2
# Probe plans (``POBatch.probe_prepared(args, plan)``): "auto" picks the cheapest per probe; the others force
# one, for tests and benchmarks.
PLANS: dict[str, int] = {"auto": 0, "iejoin": 1, "scan1": 2, "scan2": 3}


@njit(cache=True, nogil=True)
def _plan(
    order1: IntArray,
    order2: IntArray,
    has2: bool,
    ranges: IntArray,
    visit: IntArray,
    plan: int,
    checks: IntArray,
    n_checks: IntArray,
    ctx,  # type: ignore[no-untyped-def]
):  # type: ignore[no-untyped-def]
    """Answers the probes whose plan is a scan (their pairs, settled, then ``cand[:, :cnt]``), returns the IE-Join
    probes.

    ``ranges`` [4, m]: every probe's ``[lo, hi)`` of order1 and ``[lo2, hi2)`` of order2 (``_ranges``), visited in
    the order ``visit`` (by order2's leading value, so the IE-Join probes come out sorted as it needs). ``plan``: 0
    the cheapest per probe, 1 always the IE-Join, 2 always scan order1, 3 always scan order2. Check sets
    (``checks``): 0 after a scan of order1, 1 after a scan of order2, 2 after the IE-Join's window.
    """
    m = ranges.shape[1]
    cand = np.empty((3, 1024), dtype=np.int64)
    cnt = 0
    done = 0
    ie = np.empty((5, m), dtype=np.int64)  # probe, lo, hi, lo2, hi2
    n_ie = 0
    for t in range(m):
        i = visit[t]
        lo = ranges[0, i]
        hi = ranges[1, i]
        if lo >= hi:
            continue
        scan1 = not has2  # scan order1 (the other choices: scan order2, or the IE-Join)
        if has2:
            lo2 = ranges[2, i]
            hi2 = ranges[3, i]
            if lo2 >= hi2:
                continue
            ca = hi - lo
            cb = hi2 - lo2
            # The IE-Join costs at most ca / 64 words + |a-range ∩ b-range| <= ca / 64 + min(ca, cb), and as little
            # as ca / 64 (anti-correlated predicates); a scan costs min(ca, cb). Scan only when that is about the
            # IE-Join's floor, so the IE-Join is never more than ~1.5x a scan and often orders of magnitude less.
            scan = plan >= 2 or (plan == 0 and min(ca, cb) <= ca // 128 + 32)
            if plan == 3 or (plan == 0 and scan and cb <= ca):
                cand = reserve(cand, cnt, cnt + cb)
                for pos in range(lo2, hi2):
                    cand[0, cnt] = i
                    cand[1, cnt] = order2[pos]
                    cand[2, cnt] = 1
                    cnt += 1
            elif not scan:
                ie[0, n_ie] = i
                ie[1, n_ie] = lo
                ie[2, n_ie] = hi
                ie[3, n_ie] = lo2
                ie[4, n_ie] = hi2
                n_ie += 1
                continue
            else:
                scan1 = True
        if scan1:
            cand = reserve(cand, cnt, cnt + hi - lo)
            for pos in range(lo, hi):
                cand[0, cnt] = i
                cand[1, cnt] = order1[pos]
                cand[2, cnt] = 0
                cnt += 1
        if cnt - done >= SETTLE_EVERY:
            cnt = settle(cand, done, cnt, checks, n_checks, ctx)
            done = cnt
    cnt = settle(cand, done, cnt, checks, n_checks, ctx)
    return cand, cnt, ie[:, :n_ie].copy()


@njit(cache=True, nogil=True)
def _iejoin(
    group_offsets: IntArray,
    order1: IntArray,
    perm: IntArray,
    ie_g: IntArray,
    ie: IntArray,
    cand: IntArray,
    cnt: int,
    checks: IntArray,
    n_checks: IntArray,
    ctx,  # type: ignore[no-untyped-def]
):  # type: ignore[no-untyped-def]
    """Section 3.4: bit array over a-order fed through the permutation array, scanned over each a-range. Appends
    its pairs, settled, to ``cand[:, :cnt]``; returns the buffer and the new count."""
    n = order1.shape[0]
    n_ie = ie_g.shape[0]
    done = cnt
    n_words = (n + 63) >> 6
    bits = np.zeros(n_words + 1, dtype=np.int64)
    summary = np.zeros(((n_words + 63) >> 6) + 1, dtype=np.int64)
    t = 0
    while t < n_ie:
        g = ie_g[t]
        gs = group_offsets[g]
        ge = group_offsets[g + 1]
        u = t
        window = True  # lo2 ascends with hi2: the bits can slide
        while u < n_ie and ie_g[u] == g:
            if u > t and ie[3, u] < ie[3, u - 1]:
                window = False
            u += 1
        check = 2 if window else 0
        wl = gs
        wh = gs
        for v in range(t, u):
            i = ie[0, v]
            hi2 = ie[4, v]
            while wh < hi2:
                p = perm[wh]
                bits[p >> 6] |= np.int64(1) << (p & 63)
                summary[p >> 12] |= np.int64(1) << ((p >> 6) & 63)
                wh += 1
            if window:
                lo2 = ie[3, v]
                while wl < lo2:
                    p = perm[wl]
                    w = p >> 6
                    bits[w] &= ~(np.int64(1) << (p & 63))
                    if bits[w] == 0:
                        summary[w >> 6] &= ~(np.int64(1) << (w & 63))
                    wl += 1
            lo = ie[1, v]
            hi = ie[2, v]
            cand = reserve(cand, cnt, cnt + hi - lo)  # the candidates lie in the a-range
            w_lo = lo >> 6
            w_hi = (hi - 1) >> 6
            for sw in range(w_lo >> 6, (w_hi >> 6) + 1):
                sword = summary[sw]
                if sw == (w_lo >> 6):
                    sword &= np.int64(-1) << (w_lo & 63)
                if sw == (w_hi >> 6) and (w_hi & 63) != 63:
                    sword &= (np.int64(1) << ((w_hi & 63) + 1)) - 1
                while sword != 0:
                    low = sword & -sword
                    sword ^= low
                    w = (sw << 6) + lowest_bit(low)
                    word = bits[w]
                    if w == w_lo:
                        word &= np.int64(-1) << (lo & 63)
                    if w == w_hi and ((hi - 1) & 63) != 63:
                        word &= (np.int64(1) << (((hi - 1) & 63) + 1)) - 1
                    while word != 0:
                        lb = word & -word
                        word ^= lb
                        cand[0, cnt] = i
                        cand[1, cnt] = order1[(w << 6) + lowest_bit(lb)]
                        cand[2, cnt] = check
                        cnt += 1
            if cnt - done >= SETTLE_EVERY:
                cnt = settle(cand, done, cnt, checks, n_checks, ctx)
                done = cnt
        for w in range(gs >> 6, ((ge - 1) >> 6) + 1):
            bits[w] = 0
        for w in range(gs >> 12, ((ge - 1) >> 12) + 1):
            summary[w] = 0
        t = u
    cnt = settle(cand, done, cnt, checks, n_checks, ctx)
    return cand, cnt


def _derived(values: FloatArray, order1: IntArray, class1: IntArray, order2: IntArray,
             class2: IntArray) -> dict[str, IntArray]:
    """The arrays a batch derives from its values and sort orders: each class's values along its order
    (``sorted1``, ``sorted2``) and the permutation array (Section 2.1: ``P[j]``, the order1 position of the
    tuple at order2 position ``j``)."""
    n = order1.shape[0]
    permutation = np.empty(0, dtype=np.int64)
    if class2.shape[0]:
        pos1 = np.empty(n, dtype=np.int64)
        pos1[order1] = np.arange(n, dtype=np.int64)
        permutation = pos1[order2]

    def along(order: IntArray, cls: IntArray) -> IntArray:
        out = np.empty((cls.shape[0], order.shape[0]), dtype=np.int64)
        for row, j in enumerate(cls.tolist()):
            np.take(values[:, j], order, out=out[row])
        return out

    return {"sorted1": along(order1, class1), "sorted2": along(order2, class2), "permutation": permutation}


def _ascending(*keys: IntArray) -> bool:
    """Whether the rows are sorted by ``keys`` (the first most significant)."""
    if keys[0].shape[0] < 2:
        return True
    tie = np.ones(keys[0].shape[0] - 1, dtype=bool)
    for k in keys:
        d = np.diff(k)  # int64 positions and group indices: no overflow
        if np.any(tie & (d < 0)):
            return False
        tie &= d == 0
    return True


def _ints(name: str, a: npt.ArrayLike, n: int) -> IntArray:
    arr = np.ascontiguousarray(a, dtype=np.int64)
    if arr.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {arr.shape}")
    return arr


def _floats(name: str, a: npt.ArrayLike | None, n: int) -> FloatArray:
    if a is None:
        return np.empty((n, 0), dtype=np.int64)
    arr = as_keys(a)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[0] != n:
        raise ValueError(f"{name} must have shape ({n}, width), got {arr.shape}")
    return np.ascontiguousarray(arr)


def stored_columns(
    ids: npt.ArrayLike,
    ts: npt.ArrayLike,
    seq: npt.ArrayLike,
    values: npt.ArrayLike,
    ops: Sequence[str],
    keys: npt.ArrayLike | None,
    key_values: npt.ArrayLike | None,
    residual: npt.ArrayLike | None,
) -> tuple[IntArray, IntArray, IntArray, FloatArray, IntArray, IntArray | None, FloatArray, FloatArray]:
    """Validated stored-side arrays; key codes are hashed from ``key_values`` when not given."""
    v = as_keys(values)
    if v.ndim == 1:
        v = v[:, None]
    if v.ndim != 2:
        raise ValueError(f"values must have shape (n, k), got {v.shape}")
    n, k = v.shape
    if k == 0:
        raise ValueError("at least one inequality predicate is required (values has 0 columns)")
    opc = op_codes(ops)
    if opc.shape[0] != k:
        raise ValueError(f"{len(ops)} operators for {k} value columns")
    kv = _floats("key_values", key_values, n)
    codes = None
    if keys is not None:
        codes = _ints("keys", keys, n)
    elif kv.shape[1]:
        codes = key_codes(kv)
    return (
        _ints("ids", ids, n),
        _ints("ts", ts, n),
        _ints("seq", seq, n),
        np.ascontiguousarray(v),
        opc,
        codes,
        kv,
        _floats("residual", residual, n),
    )


def _compatible(sorted_values: FloatArray, change: npt.NDArray[np.bool_]) -> bool:
    """Values non-decreasing along an order within every key group (``change`` marks group boundaries)."""
    v = sorted_values  # int64 keys: compare neighbours, never subtract (a difference can overflow)
    return bool(np.all((v[1:] >= v[:-1]) | change))


@dataclass(eq=False)
class POBatch:
    """One immutable PO-Join batch (Section 3.3) with its IE-Join index (Section 2.1). Build with ``build``."""

    ids: IntArray
    ts: IntArray
    seq: IntArray
    values: FloatArray  # [n, k] stored side of the k inequality predicates
    op_codes: IntArray  # [k] kernel codes of ``ops``
    keys: IntArray | None  # [n] equality-key codes, None without = predicates
    key_values: FloatArray  # [n, e] exact values of the = predicates (e may be 0)
    residual: FloatArray  # [n, q] stored values of the != predicates (q may be 0)
    group_keys: IntArray  # [G] ascending key codes (one group 0 without keys)
    group_offsets: IntArray  # [G + 1] offset array of the key groups in both orders
    order1: IntArray  # [n] stored index at each a-order position
    class1: IntArray  # predicates answered by a range of order1
    sorted1: FloatArray  # [len(class1), n] their values along order1
    order2: IntArray  # [n] stored index at each b-order position (empty when class2 is)
    class2: IntArray  # predicates answered by a range of order2
    sorted2: FloatArray  # [len(class2), n] their values along order2
    permutation: IntArray  # [n] permutation array P: order1 position of order2 position j

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(OP_NAMES[c] for c in self.op_codes)

    @property
    def k(self) -> int:
        return int(self.op_codes.shape[0])

    @property
    def n(self) -> int:
        return int(self.ids.shape[0])

    def __len__(self) -> int:
        return self.n

    @cached_property
    def ts_min(self) -> int:
        """Smallest ts (int64 max for an empty batch)."""
        return int(self.ts.min()) if self.n else int(np.iinfo(np.int64).max)

    @cached_property
    def ts_max(self) -> int:
        """Largest ts (int64 min for an empty batch, so it is always expired)."""
        return int(self.ts.max()) if self.n else int(np.iinfo(np.int64).min)

    @cached_property
    def seq_min(self) -> int:
        return int(self.seq.min()) if self.n else int(np.iinfo(np.int64).max)

    @cached_property
    def seq_max(self) -> int:
        return int(self.seq.max()) if self.n else int(np.iinfo(np.int64).min)

    @cached_property
    def _checks(self) -> tuple[IntArray, IntArray]:
        """``settle``'s check sets: the predicates to verify after a scan of order1 (0), of order2 (1), and after
        the IE-Join window (2)."""
        c1, c2 = set(self.class1.tolist()), set(self.class2.tolist())
        every = range(self.k)
        return check_sets(
            np.asarray([j for j in every if j not in c1], dtype=np.int64),
            np.asarray([j for j in every if j not in c2], dtype=np.int64),
            np.asarray([j for j in every if j not in c1 and j not in c2], dtype=np.int64),
        )

    @classmethod
    def build(
        cls,
        ids: npt.ArrayLike,
        ts: npt.ArrayLike,
        seq: npt.ArrayLike,
        values: npt.ArrayLike,
        ops: Sequence[str],
        keys: npt.ArrayLike | None = None,
        key_values: npt.ArrayLike | None = None,
        residual: npt.ArrayLike | None = None,
    ) -> POBatch:
        """Sort the batch and compute its permutation and offset arrays (Section 3.3, Algorithm 2).

        ``values[:, k]`` is the stored side of predicate ``k`` (``values[:, k] ops[k] probe[:, k]``). ``keys`` are
        int64 codes of the ``=`` columns (hashed from ``key_values`` when omitted); with ``key_values`` the
        equality is also verified exactly, without them the codes are trusted. ``residual`` holds the stored
        side of the ``!=`` predicates.
        """
        ids_, ts_, seq_, v, opc, codes, kv, res = stored_columns(ids, ts, seq, values, ops, keys, key_values, residual)
        n, k = v.shape
        gk = codes if codes is not None else np.zeros(n, dtype=np.int64)
        order1 = np.lexsort((*(v[:, j] for j in range(k - 1, -1, -1)), gk)).astype(np.int64)
        sk = gk[order1]
        change = sk[1:] != sk[:-1]
        starts = np.flatnonzero(np.concatenate(([True], change))) if n else np.empty(0, dtype=np.int64)
        group_keys = np.ascontiguousarray(sk[starts], dtype=np.int64)
        group_offsets = np.concatenate((starts, [n])).astype(np.int64)
        class1 = [j for j in range(k) if j == 0 or _compatible(v[order1, j], change)]
        rest = [j for j in range(k) if j not in class1]
        class2: list[int] = []
        order2 = np.empty(0, dtype=np.int64)
        if rest:
            order2 = np.lexsort((*(v[:, j] for j in reversed(rest)), gk)).astype(np.int64)
            class2 = [j for j in rest if j == rest[0] or _compatible(v[order2, j], change)]
        c1, c2 = np.asarray(class1, dtype=np.int64), np.asarray(class2, dtype=np.int64)
        return cls(
            ids=ids_,
            ts=ts_,
            seq=seq_,
            values=v,
            op_codes=opc,
            keys=codes,
            key_values=kv,
            residual=res,
            group_keys=group_keys,
            group_offsets=group_offsets,
            order1=order1,
            class1=c1,
            order2=order2,
            class2=c2,
            **_derived(v, order1, c1, order2, c2),
        )

    def probe(
        self,
        values: npt.ArrayLike,
        ts_lo: npt.ArrayLike | None = None,
        ts_hi: npt.ArrayLike | None = None,
        seq_lo: npt.ArrayLike | None = None,
        seq_hi: npt.ArrayLike | None = None,
        keys: npt.ArrayLike | None = None,
        key_values: npt.ArrayLike | None = None,
        residual: npt.ArrayLike | None = None,
    ) -> tuple[IntArray, IntArray]:
        """All ``(probe_index, stored_index)`` pairs satisfying every predicate and bound (Section 3.4).

        ``values[:, k]`` is the probe side of predicate ``k``; a stored tuple matches probe ``i`` only if
        ``ts_lo[i] < ts < ts_hi[i]`` and ``seq_lo[i] <= seq < seq_hi[i]`` (each pair of bounds optional). ``keys``
        / ``key_values`` / ``residual`` are the probe side of the ``=`` and ``!=`` predicates. Each pair appears
        once; their order is deterministic but unspecified.
        """
        return self.probe_prepared(self.prepare(values, ts_lo, ts_hi, seq_lo, seq_hi, keys, key_values, residual))

    def prepare(
        self,
        values: npt.ArrayLike,
        ts_lo: npt.ArrayLike | None = None,
        ts_hi: npt.ArrayLike | None = None,
        seq_lo: npt.ArrayLike | None = None,
        seq_hi: npt.ArrayLike | None = None,
        keys: npt.ArrayLike | None = None,
        key_values: npt.ArrayLike | None = None,
        residual: npt.ArrayLike | None = None,
    ) -> ProbeArgs:
        """Validated probe arrays (``probe``'s arguments) for ``probe_prepared``; reusable on every batch of the
        same query orientation."""
        return probe_args(
            self.k,
            self.keys is not None,
            self.key_values.shape[1],
            self.residual.shape[1],
            values,
            ts_lo,
            ts_hi,
            seq_lo,
            seq_hi,
            keys,
            key_values,
            residual,
        )

    def probe_prepared(self, args: ProbeArgs, plan: str = "auto") -> tuple[IntArray, IntArray]:
        """``probe`` with arrays from ``prepare``; ``plan`` (``PLANS``) forces a probe plan (tests, benchmarks)."""
        if plan not in PLANS:
            raise ValueError(f"plan {plan!r} is not one of {', '.join(PLANS)}")
        if self.n == 0 or args.m == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        if args.keys is None:
            pgroup = np.zeros(args.m, dtype=np.int64)
        else:
            idx = np.searchsorted(self.group_keys, args.keys)
            found = self.group_keys[np.minimum(idx, self.group_keys.shape[0] - 1)] == args.keys
            pgroup = np.where(found, idx, -1).astype(np.int64)
        ctx = make_ctx(self.values, self.op_codes, self.key_values, self.residual, self.ts, self.seq, args)
        checks, n_checks = self._checks
        ranges = self._ranges(args, pgroup)
        has2 = self.class2.shape[0] > 0
        visit = args.order(int(self.class2[0])) if has2 else np.arange(args.m, dtype=np.int64)
        cand, cnt, ie = _plan(self.order1, self.order2, has2, ranges, visit, PLANS[plan], checks, n_checks, ctx)
        if ie.shape[1]:  # the IE-Join takes its probes by (group, hi2, lo2)
            ie_g = pgroup[ie[0]]
            if not _ascending(ie_g, ie[4], ie[3]):
                ie = np.ascontiguousarray(ie[:, np.lexsort((ie[3], ie[4], ie_g))])
                ie_g = pgroup[ie[0]]
            ie_g = np.ascontiguousarray(ie_g)
            cand, cnt = _iejoin(self.group_offsets, self.order1, self.permutation, ie_g, ie, cand, cnt, checks,
                                n_checks, ctx)
        return cand[0, :cnt].copy(), cand[1, :cnt].copy()

    def _ranges(self, args: ProbeArgs, pgroup: IntArray) -> IntArray:
        """[4, m]: each probe's ``[lo, hi)`` of order1 (the intersection of its ``class1`` ranges) and ``[lo2, hi2)``
        of order2 (``class2``), every bound found by one galloping pass per predicate (``sorted_ranges``)."""
        m = args.m
        out = np.empty((4, m), dtype=np.int64)
        for row, (cls, sorted_c) in enumerate(((self.class1, self.sorted1), (self.class2, self.sorted2))):
            if cls.shape[0] == 0:
                out[2 * row] = 0
                out[2 * row + 1] = 0
                continue
            for c, j in enumerate(cls.tolist()):
                pv = np.ascontiguousarray(args.values[:, j])
                start, end = sorted_ranges(sorted_c[c], self.group_offsets, pgroup, pv, args.order(j),
                                           int(self.op_codes[j]))
                if c == 0:
                    out[2 * row], out[2 * row + 1] = start, end
                else:
                    np.maximum(out[2 * row], start, out=out[2 * row])
                    np.minimum(out[2 * row + 1], end, out=out[2 * row + 1])
        return out

    _ARRAYS = (
        "ids",
        "ts",
        "seq",
        "values",
        "op_codes",
        "key_values",
        "residual",
        "group_keys",
        "group_offsets",
        "order1",
        "class1",
        "order2",
        "class2",
    )
    #: derived from the arrays above on load (``_derived``), so not stored: half a batch's bytes
    _DERIVED = ("sorted1", "sorted2", "permutation")

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The arrays the batch is rebuilt from without sorting again (``from_arrays``): the sort orders are
        kept; the sorted values and the permutation array, gathers of them, are derived on load."""
        out: dict[str, np.ndarray] = {name: getattr(self, name) for name in self._ARRAYS}
        out["format_version"] = np.asarray(FORMAT_VERSION, dtype=np.int64)
        if self.keys is not None:
            out["keys"] = self.keys
        return out

    @classmethod
    def from_arrays(cls, d: Mapping[str, np.ndarray]) -> POBatch:
        version = int(d.get("format_version", FORMAT_VERSION))
        if version != FORMAT_VERSION:
            raise ValueError(f"POBatch format_version {version} is not supported (expected {FORMAT_VERSION}: "
                             "int64 value keys); rerun the output with --reset")
        fields: dict[str, np.ndarray] = {}
        for name in cls._ARRAYS:
            fields[name] = np.ascontiguousarray(d[name], dtype=np.int64)
        if all(name in d for name in cls._DERIVED):  # written before they were derived
            derived = {name: np.ascontiguousarray(d[name], dtype=np.int64) for name in cls._DERIVED}
        else:
            derived = _derived(fields["values"], fields["order1"], fields["class1"], fields["order2"],
                               fields["class2"])
        keys = d.get("keys")
        return cls(keys=None if keys is None else np.ascontiguousarray(keys, dtype=np.int64), **fields, **derived)

    def to_bytes(self) -> bytes:
        """Every array (``to_arrays``), packed (``simjoin.core.arrays``)."""
        return pack(self.to_arrays())

    @classmethod
    def from_bytes(cls, b: Any) -> POBatch:
        """The batch of ``to_bytes`` (or of the ``np.savez`` bytes written before): read-only views into ``b``
        (``bytes`` or any buffer, e.g. a pyarrow ``Buffer`` of the state table's column), nothing copied."""
        return cls.from_arrays(unpack(b))
