"""Shared numba pieces of the SPO-Join probes: operator codes, exact range searches, bit words, candidate checks.

Aslam et al., *SPO-Join* (Section 2.1, IE-Join; Sections 3.2 and 3.4): every probe turns a predicate
``stored OP probe`` into a contiguous range of a sorted array (a binary search, "offset" in the paper's words) and
the AND of predicates into a bit array. Ties are handled exactly for every operator on ascending ``a``:

* ``<``  → ``[lo, lower_bound(x))``     ``<=`` → ``[lo, upper_bound(x))``
* ``>``  → ``[upper_bound(x), hi)``     ``>=`` → ``[lower_bound(x), hi)``

Values are int64 keys (``simjoin.core.exact``): an integer column is compared as int64, exactly, a float column
by its order-preserving key (the order of float64); NaN never reaches these kernels (the caller quarantines it).
Bit arrays are int64 words (two's complement, so ``w & -w`` isolates the lowest bit on every word); the index of
an isolated bit comes from a de Bruijn multiplication.

The probe kernels collect candidate pairs (``reserve`` makes room per probe); ``settle`` is the exact residual
check of them, one pass per batch of candidates: the time bounds ``ts_lo < ts < ts_hi``, the count bounds
``seq_lo <= seq < seq_hi``, the inequalities not used by the index, exact key equality (hash-collision safe) and
the ``!=`` residuals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
from numba import njit

from simjoin.core.exact import as_keys

__all__ = [
    "LT",
    "LE",
    "GT",
    "GE",
    "OP_CODES",
    "OP_NAMES",
    "op_codes",
    "key_codes",
    "compare",
    "lower_bound",
    "upper_bound",
    "op_range",
    "sorted_ranges",
    "settle",
    "SETTLE_EVERY",
    "grow",
    "reserve",
    "check_sets",
    "make_ctx",
    "lowest_bit",
    "ProbeArgs",
    "probe_args",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.int64]  # value keys (``exact.as_keys``)

LT, LE, GT, GE = 0, 1, 2, 3
OP_CODES: Mapping[str, int] = {"<": LT, "<=": LE, ">": GT, ">=": GE}
OP_NAMES: tuple[str, ...] = ("<", "<=", ">", ">=")

_DEBRUIJN = 0x03F79D71B4CB0A89
_DEBRUIJN_TABLE = np.zeros(64, dtype=np.int64)
for _i in range(64):
    _DEBRUIJN_TABLE[(((1 << _i) * _DEBRUIJN) & 0xFFFFFFFFFFFFFFFF) >> 58] = _i
_DB = np.int64(_DEBRUIJN)


def op_codes(ops: Sequence[str]) -> IntArray:
    """Kernel codes of inequality operators; raises ``ValueError`` for anything but < <= > >=."""
    out = np.empty(len(ops), dtype=np.int64)
    for j, op in enumerate(ops):
        if op not in OP_CODES:
            raise ValueError(f"operator {op!r} is not an inequality; allowed: {', '.join(OP_NAMES)}")
        out[j] = OP_CODES[op]
    return out


def key_codes(key_values: npt.ArrayLike) -> IntArray:
    """int64 hash codes of the rows of ``key_values`` ([n, e] keys, or floats keyed by ``exact.as_keys``); equal
    rows get equal codes.

    ``-0.0`` and ``0.0`` hash alike (they compare equal). Codes only partition the tuples; the kernels verify key
    equality on the values, so collisions cost time, never correctness.
    """
    kv = as_keys(key_values)
    if kv.ndim == 1:
        kv = kv[:, None]
    bits = np.ascontiguousarray(kv).view(np.uint64)
    h = np.full(kv.shape[0], 0x9E3779B97F4A7C15, dtype=np.uint64)
    for c in range(kv.shape[1]):
        # splitmix64 finaliser over (h xor column)
        z = h ^ bits[:, c]
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        h = z ^ (z >> np.uint64(31))
    return h.view(np.int64)


@njit(cache=True, nogil=True, inline="always")
def compare(op: int, s: int, p: int) -> bool:
    """``s OP p`` for an operator code."""
    if op == LT:
        return s < p
    if op == LE:
        return s <= p
    if op == GT:
        return s > p
    return s >= p


@njit(cache=True, nogil=True, inline="always")
def lower_bound(a, lo, hi, x):  # type: ignore[no-untyped-def]
    """First index in ``[lo, hi)`` with ``a[idx] >= x`` (``a`` ascending)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True, inline="always")
def upper_bound(a, lo, hi, x):  # type: ignore[no-untyped-def]
    """First index in ``[lo, hi)`` with ``a[idx] > x`` (``a`` ascending)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True, inline="always")
def op_range(a: FloatArray, lo: int, hi: int, op: int, x: float) -> tuple[int, int]:
    """The positions ``[start, end)`` of ``[lo, hi)`` where ``a[pos] OP x`` holds (``a`` ascending there)."""
    if op == LT:
        return lo, lower_bound(a, lo, hi, x)
    if op == LE:
        return lo, upper_bound(a, lo, hi, x)
    if op == GT:
        return upper_bound(a, lo, hi, x), hi
    return lower_bound(a, lo, hi, x), hi


@njit(cache=True, nogil=True)
def sorted_ranges(sorted_c, group_offsets, pgroup, pvalues, order, op):  # type: ignore[no-untyped-def]
    """``op_range`` of every probe within its key group, in one galloping pass (Section 3.4's offset arrays).

    ``order`` visits the probes by (group, value) ascending (``ProbeArgs.order``), so each bound lies at or after
    the previous one of the same group: an exponential search from there costs O(log gap) instead of a binary
    search over the whole group, O(m + n) in all when probes are dense and O(m log(n / m)) when they are few.
    Probes without a group (``pgroup < 0``) get the empty range ``[0, 0)``.
    """
    m = order.shape[0]
    start = np.zeros(m, dtype=np.int64)
    end = np.zeros(m, dtype=np.int64)
    upper = op in (LE, GT)
    g = -1
    cur = 0
    gs = 0
    ge = 0
    for t in range(m):
        i = order[t]
        gi = pgroup[i]
        if gi < 0:
            continue
        if gi != g:
            g = gi
            gs = group_offsets[g]
            ge = group_offsets[g + 1]
            cur = gs
        x = pvalues[i]
        # gallop from cur: the first position in [cur, ge) with a > x (upper) or a >= x (lower)
        if cur < ge and (sorted_c[cur] <= x if upper else sorted_c[cur] < x):
            prev = cur
            step = 1
            while cur + step < ge and (sorted_c[cur + step] <= x if upper else sorted_c[cur + step] < x):
                prev = cur + step
                step <<= 1
            hi = min(cur + step, ge)
            cur = upper_bound(sorted_c, prev + 1, hi, x) if upper else lower_bound(sorted_c, prev + 1, hi, x)
        if op in (LT, LE):
            start[i] = gs
            end[i] = cur
        else:
            start[i] = cur
            end[i] = ge
    return start, end


@njit(cache=True, nogil=True, inline="always")
def lowest_bit(t: int) -> int:
    """Index of the single set bit of ``t`` (``t = w & -w``, ``w != 0``)."""
    return _DEBRUIJN_TABLE[((t * _DB) >> 58) & 63]


# Candidates collected before ``settle`` checks them (bounds a probe call's memory, not its result)
SETTLE_EVERY = 1 << 20


@njit(cache=True, nogil=True)
def settle(cand: IntArray, done: int, cnt: int, checks: IntArray, n_checks: IntArray, ctx) -> int:  # type: ignore[no-untyped-def]
    """Check candidates ``cand[:, done:cnt]`` exactly and move the pairs that hold to ``cand[:, done:]``, in order;
    returns the new count (the kept pairs end at it).

    Each candidate is its probe ``i``, stored tuple ``s`` and check set ``c`` (``checks[c, :n_checks[c]]``: the
    inequalities the index did not decide). A pair holds iff the time bounds ``ts_lo < ts < ts_hi``, the count
    bounds ``seq_lo <= seq < seq_hi``, those inequalities, exact key equality (hash-collision safe) and the ``!=``
    residuals hold. The probe kernels collect candidates and settle them every ``SETTLE_EVERY`` and at
    the end: ``ctx`` is unpacked once per pass, where passing its arrays to a call per candidate cost more than the
    check itself.
    """
    (values, pvalues, ops, key_values, pkey_values, residual, presidual,
     ts, ts_lo, ts_hi, has_ts, seq, seq_lo, seq_hi, has_seq) = ctx  # fmt: skip
    kept = done
    for k in range(done, cnt):
        i = cand[0, k]
        s = cand[1, k]
        ok = True
        if has_ts:
            t = ts[s]
            ok = ts_lo[i] < t and t < ts_hi[i]
        if ok and has_seq:
            q = seq[s]
            ok = seq_lo[i] <= q and q < seq_hi[i]
        if ok:
            c = cand[2, k]
            for x in range(n_checks[c]):
                j = checks[c, x]
                if not compare(ops[j], values[s, j], pvalues[i, j]):
                    ok = False
                    break
        if ok:
            for x in range(key_values.shape[1]):
                if key_values[s, x] != pkey_values[i, x]:
                    ok = False
                    break
        if ok:
            for x in range(residual.shape[1]):
                if residual[s, x] == presidual[i, x]:
                    ok = False
                    break
        if ok:
            cand[0, kept] = i
            cand[1, kept] = s
            kept += 1
    return kept


@njit(cache=True, nogil=True)
def grow(a: IntArray, size: int, need: int) -> IntArray:
    """``a`` with room for ``need`` entries (at least double), its first ``size`` kept; ``a`` when it has room
    (``reserve`` for one dimension)."""
    if need <= a.shape[0]:
        return a
    b = np.empty(max(2 * a.shape[0], need, 1024), dtype=np.int64)
    b[:size] = a[:size]
    return b


@njit(cache=True, nogil=True)
def reserve(cand: IntArray, cnt: int, need: int) -> IntArray:
    """``cand`` ([3, capacity]) with room for ``need`` candidates (at least double), its first ``cnt`` kept.

    Kernels reserve a probe's largest possible candidate count before its scan, never per candidate: an array
    reassigned inside the innermost loop costs numba reference counting on every iteration (4x the scan).
    """
    if need <= cand.shape[1]:
        return cand
    bigger = np.empty((3, max(2 * cand.shape[1], need, 1024)), dtype=np.int64)
    bigger[:, :cnt] = cand[:, :cnt]
    return bigger


def check_sets(*sets: IntArray) -> tuple[IntArray, IntArray]:
    """``settle``'s ``checks`` and ``n_checks`` for check sets given as arrays (set ``c`` is ``sets[c]``)."""
    width = max([1, *(len(x) for x in sets)])
    checks = np.zeros((len(sets), width), dtype=np.int64)
    for c, x in enumerate(sets):
        checks[c, : len(x)] = x
    return checks, np.asarray([len(x) for x in sets], dtype=np.int64)


def make_ctx(
    values: FloatArray,
    ops: IntArray,
    key_values: FloatArray,
    residual: FloatArray,
    ts: IntArray,
    seq: IntArray,
    args: ProbeArgs,
) -> tuple:  # type: ignore[type-arg]
    """The ``ctx`` tuple of ``settle`` for a stored side and validated probe arguments."""
    return (
        values,
        args.values,
        ops,
        key_values,
        args.key_values,
        residual,
        args.residual,
        ts,
        args.ts_lo,
        args.ts_hi,
        args.has_ts,
        seq,
        args.seq_lo,
        args.seq_hi,
        args.has_seq,
    )


class ProbeArgs:
    """Validated probe-side arrays in the form the kernels take (absent parts as empty arrays + flags)."""

    __slots__ = (
        "has_seq",
        "has_ts",
        "key_values",
        "keys",
        "m",
        "orders",
        "residual",
        "seq_hi",
        "seq_lo",
        "ts_hi",
        "ts_lo",
        "values",
    )

    def __init__(
        self,
        m: int,
        values: FloatArray,
        ts_lo: IntArray,
        ts_hi: IntArray,
        has_ts: bool,
        seq_lo: IntArray,
        seq_hi: IntArray,
        has_seq: bool,
        keys: IntArray | None,
        key_values: FloatArray,
        residual: FloatArray,
    ) -> None:
        self.m = m
        self.values = values
        self.ts_lo = ts_lo
        self.ts_hi = ts_hi
        self.has_ts = has_ts
        self.seq_lo = seq_lo
        self.seq_hi = seq_hi
        self.has_seq = has_seq
        self.keys = keys
        self.key_values = key_values
        self.residual = residual
        self.orders: dict[int, IntArray] = {}

    def order(self, j: int) -> IntArray:
        """The probes by (key code, value of predicate ``j``) ascending: ``sorted_ranges``' visiting order, the
        same for every batch of one orientation (group indices ascend with the key codes), computed once."""
        if j not in self.orders:
            v = self.values[:, j]
            self.orders[j] = (np.argsort(v, kind="stable") if self.keys is None
                              else np.lexsort((v, self.keys))).astype(np.int64)
        return self.orders[j]


def _ints(name: str, a: npt.ArrayLike | None, m: int) -> IntArray:
    arr = np.ascontiguousarray(a, dtype=np.int64)
    if arr.shape != (m,):
        raise ValueError(f"{name} must have shape ({m},), got {arr.shape}")
    return arr


def _floats2(name: str, a: npt.ArrayLike | None, m: int, width: int) -> FloatArray:
    if a is None:
        if width:
            raise ValueError(f"{name} is required: the stored side has {width} column(s)")
        return np.empty((m, 0), dtype=np.int64)
    arr = as_keys(a)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.shape != (m, width):
        raise ValueError(f"{name} must have shape ({m}, {width}), got {arr.shape}")
    return np.ascontiguousarray(arr)


def probe_args(
    k: int,
    has_keys: bool,
    n_key_cols: int,
    n_residual: int,
    values: npt.ArrayLike,
    ts_lo: npt.ArrayLike | None,
    ts_hi: npt.ArrayLike | None,
    seq_lo: npt.ArrayLike | None,
    seq_hi: npt.ArrayLike | None,
    keys: npt.ArrayLike | None,
    key_values: npt.ArrayLike | None,
    residual: npt.ArrayLike | None,
) -> ProbeArgs:
    """Check the probe side against the stored side's shape and normalise it for the kernels."""
    v = as_keys(values)
    if v.ndim == 1:
        v = v[:, None]
    if v.ndim != 2 or v.shape[1] != k:
        raise ValueError(f"probe values must have shape (m, {k}), got {v.shape}")
    v = np.ascontiguousarray(v)
    m = v.shape[0]
    if (ts_lo is None) != (ts_hi is None):
        raise ValueError("ts_lo and ts_hi must be given together")
    if (seq_lo is None) != (seq_hi is None):
        raise ValueError("seq_lo and seq_hi must be given together")
    empty = np.empty(0, dtype=np.int64)
    has_ts = ts_lo is not None
    has_seq = seq_lo is not None
    tlo = _ints("ts_lo", ts_lo, m) if has_ts else empty
    thi = _ints("ts_hi", ts_hi, m) if has_ts else empty
    slo = _ints("seq_lo", seq_lo, m) if has_seq else empty
    shi = _ints("seq_hi", seq_hi, m) if has_seq else empty
    kv = _floats2("key_values", key_values, m, n_key_cols)
    codes: IntArray | None = None
    if has_keys:
        if keys is not None:
            codes = _ints("keys", keys, m)
        elif n_key_cols:
            codes = key_codes(kv)
        else:
            raise ValueError("keys are required: the stored side is partitioned by equality keys")
    elif keys is not None:
        raise ValueError("keys given, but the stored side has no equality keys")
    res = _floats2("residual", residual, m, n_residual)
    return ProbeArgs(m, v, tlo, thi, has_ts, slo, shi, has_seq, codes, kv, res)
