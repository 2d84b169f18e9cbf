"""Exact comparison of predicate values in their own type: integers as int64, floats as float64.

The rule (docs/operations.md, "Exact predicates on every numeric type"):

* an integer column (int8/16/32/64) is compared as int64, exactly: ``l.a + c OP r.b`` is evaluated on the
  mathematical integers. A constant offset ``c`` on an integer column must be an integer; ``a + c`` is
  computed in int64 and a value whose sum leaves int64 is refused with one line (``ExactError``) naming the
  column, the value and the offset - never wrapped;
* a float column is compared as today, ``fl(l.a + c) OP r.b`` in float64;
* an integer column compared with a float column is compared in float64 (the staging step casts it to
  double and quarantines a value above 2^53 in magnitude, where float64 stops holding every integer);
* the indexes order every value by one int64 *key*: an integer is its own key, a float its order-preserving
  key (``ordered``: the IEEE bits with the lower 63 bits of negatives flipped, -0.0 as 0.0), so the sorted
  arrays and bit arrays of the kernels are int64 for every column type.

Pure numpy: no per-row Python (the Python-int path of ``cmp_holds`` runs only for the few values near the
int64 limits, in the oracles).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["ExactError", "INT64_MIN", "INT64_MAX", "is_int", "int_offset", "shift_int", "ordered", "key_of",
           "as_keys", "as_float", "float_columns", "cmp_holds", "absdiff_holds", "op_holds"]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_SAFE = 2**62  # |a| + |b| below 2^63: int64 differences and sums are exact


class ExactError(ValueError):
    """A predicate value that cannot be compared exactly (one line naming the column and value)."""


def is_int(a: npt.ArrayLike) -> bool:
    """Whether ``a`` holds integers (compared as int64)."""
    return np.asarray(a).dtype.kind in "iu"


def int_offset(off: float | int, what: str) -> int:
    """A constant offset on an integer column as a Python int; a fraction or a value past int64 is refused."""
    if isinstance(off, (int, np.integer)):
        v = int(off)
    else:
        f = float(off)
        if not np.isfinite(f) or not f.is_integer():
            raise ExactError(f"{what}: offset {off!r} on an integer column is not an integer; "
                             "allowed: an integer offset on an integer column")
        v = int(f)
    if not INT64_MIN <= v <= INT64_MAX:
        raise ExactError(f"{what}: offset {v} is outside int64; allowed: {INT64_MIN} .. {INT64_MAX}")
    return v


def _ints(a: npt.ArrayLike) -> np.ndarray:
    arr = np.asarray(a)
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > INT64_MAX:
        raise ExactError(f"value {int(arr.max())} is outside int64; allowed: {INT64_MIN} .. {INT64_MAX}")
    return arr.astype(np.int64, copy=False)


def shift_int(a: npt.ArrayLike, off: float | int, what: str) -> np.ndarray:
    """``a + off`` in int64, exactly; a sum outside int64 is refused (``ExactError``, one line)."""
    arr = _ints(a)
    c = int_offset(off, what)
    if c == 0:
        return arr
    bad = arr > INT64_MAX - c if c > 0 else arr < INT64_MIN - c
    if bad.any():
        v = int(arr[np.flatnonzero(bad)[0]])
        raise ExactError(f"{what}: {v} {'+' if c > 0 else '-'} {abs(c)} overflows int64 (the sum is {v + c}); "
                         f"allowed: values whose sum with the offset stays in {INT64_MIN} .. {INT64_MAX}")
    return arr + np.int64(c)


def ordered(f: npt.ArrayLike) -> np.ndarray:
    """Order-preserving int64 keys of float64 values (``x < y`` ⇔ ``key(x) < key(y)``, ``-0.0`` = ``0.0``)."""
    bits = np.ascontiguousarray(np.asarray(f, dtype=np.float64) + 0.0).view(np.int64)
    return bits ^ ((bits >> np.int64(63)) & np.int64(INT64_MAX))


def key_of(a: npt.ArrayLike, off: float | int, what: str) -> np.ndarray:
    """The int64 index key of ``a + off``: exact int64 for integers, ``ordered(fl(a + off))`` for floats."""
    arr = np.asarray(a)
    if is_int(arr):
        return shift_int(arr, off, what)
    return ordered(arr.astype(np.float64, copy=False) + off)


def as_keys(a: npt.ArrayLike) -> np.ndarray:
    """int64 keys of an array that is already offset-folded: integers as they are, floats ``ordered``."""
    arr = np.asarray(a)
    if arr.dtype.kind == "f":
        return ordered(arr)
    return _ints(arr)


def as_float(a: npt.ArrayLike, what: str) -> np.ndarray:
    """float64 of a column compared with a float column: an integer column must stay below 2^53 in magnitude
    (where float64 holds every integer); a larger value is refused (``ExactError``, one line)."""
    arr = np.asarray(a)
    if is_int(arr) and arr.size:
        big = np.abs(arr.astype(np.float64)) >= 2.0**53  # rounding is monotone: >= 2^53 iff the integer is
        if big.any():
            v = int(arr[np.flatnonzero(big)[0]])
            raise ExactError(f"{what}: integer {v} is compared with a float column, exact only below 2^53 in "
                             "magnitude; allowed: integers of magnitude below 2^53, or integer columns on both sides")
    return arr.astype(np.float64, copy=False)


def float_columns(kinds: dict[str, bool], compared: list[tuple[str, str]]) -> set[str]:
    """The columns compared as float64: every float column (``kinds[c]`` False) and, through the predicates
    ``compared`` (pairs of columns), every column compared with one of them."""
    out = {c for c, integer in kinds.items() if not integer}
    changed = True
    while changed:
        changed = False
        for a, b in compared:
            if (a in out) != (b in out):
                out |= {a, b}
                changed = True
    return out


_NP = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "=": np.equal,
       "!=": np.not_equal}


def op_holds(op: str, a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """``a OP b`` (broadcasting) in the arrays' own types."""
    return np.asarray(_NP[op](a, b))


def _small(*arrs: np.ndarray, extra: int = 0) -> bool:
    return all(a.size == 0 or max(abs(int(a.min())), abs(int(a.max()))) < _SAFE - abs(extra) for a in arrs)


def cmp_holds(op: str, a: npt.ArrayLike, b: npt.ArrayLike, off: float | int = 0) -> npt.NDArray[np.bool_]:
    """The exact truth of ``a + off OP b`` (broadcasting): on the integers when both are integer arrays
    (``off`` an integer), else ``fl(a + off) OP b`` in float64."""
    av, bv = np.asarray(a), np.asarray(b)
    if is_int(av) and is_int(bv):
        c = int_offset(off, "offset")
        if abs(c) < _SAFE and _small(av, bv):
            return op_holds(op, av.astype(np.int64) + np.int64(c), bv.astype(np.int64))
        return op_holds(op, av.astype(object) + c, bv.astype(object))  # Python ints: exact at the limits
    return op_holds(op, av.astype(np.float64) + off, bv.astype(np.float64))


def absdiff_holds(op: str, a: npt.ArrayLike, b: npt.ArrayLike, eps: float | int) -> npt.NDArray[np.bool_]:
    """The exact truth of ``|a - b| OP eps`` (integers on the integers, else ``|fl(a - b)| OP eps``)."""
    av, bv = np.asarray(a), np.asarray(b)
    if is_int(av) and is_int(bv):
        if _small(av, bv):
            d = np.abs(av.astype(np.int64) - bv.astype(np.int64))
        else:
            d = np.abs(av.astype(object) - bv.astype(object))
        if isinstance(eps, (int, np.integer)) or float(eps).is_integer():
            return op_holds(op, d, int(eps))
        # |a - b| is an integer: against a fractional eps, compare with its floor / ceiling exactly
        e = float(eps)
        lo, hi = int(np.floor(e)), int(np.ceil(e))
        return op_holds({"<": "<=", "<=": "<=", ">": ">=", ">=": ">="}[op], d, lo if op in ("<", "<=") else hi)
    return op_holds(op, np.abs(av.astype(np.float64) - bv.astype(np.float64)), eps)


#: float64 holds every integer of magnitude below this
WIDE = 2**53


class ExactTypes:
    """``casts``: column -> staged type (``long`` or ``double``); ``wide``: (source index, column) of integer
    columns staged as double (their values must stay below 2^53 in magnitude)."""

    def __init__(self, casts: dict[str, str], wide: list[tuple[int, str]]) -> None:
        self.casts = casts
        self.wide = wide

    def bounds(self) -> list[tuple[int, str, float, str]]:
        """(source index, column, bound, reason) of the integer values a double would round: the
        ``Bounded`` row rules (``simjoin.quality.rows``) of the staged, cast column - a long of
        magnitude 2^53 or more casts to a double of magnitude 2^53 or more, and below it casts exactly."""
        return [(k, c, float(WIDE), f"{c} of magnitude 2^53 or more: an integer compared with a float column is "
                 "exact in double only below 2^53") for k, c in self.wide]
