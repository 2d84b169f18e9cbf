"""Heavy-hitter tracking for Streaming HyperCube (Qiu et al., Section 3.2; Cormode & Hadjieleftheriou [9]).

A Misra-Gries summary over the items (side, key) - side 0 is R (left), 1 is S (right) - as a
*mergeable* summary (Agarwal et al., "Mergeable summaries"): a micro-batch's exact item counts are
merged in by adding the counters and subtracting the (c+1)-th largest one, c the number of counters.
With c counters every estimate is an underestimate by at most n / (c+1), n the items summarised,
whatever the merge order. So

* ``counters_for(eps)`` = ceil(2 / eps) counters bound each side's error by eps*N/2 and the error of
  N(b) = |R(b)| + |S(b)| by eps*N, the paper's requirement (eps <= 1/(2p));
* a sliding window's summary is the merge of the per-micro-batch summaries of the live micro-batches.

Pure numpy; a summary is three arrays (side, key, count) and n.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from simjoin.core.unique import unique

__all__ = ["Summary", "counters_for", "exact_counts", "merge_all"]


def counters_for(eps: float) -> int:
    """Counters giving a per-side error <= eps*N/2, hence <= eps*N on N(b)."""
    if not 0 < eps < 1:
        raise ValueError(f"invalid epsilon {eps}: allowed 0 < epsilon < 1")
    return max(1, math.ceil(2.0 / eps))


def _items(side: np.ndarray, key: np.ndarray) -> np.ndarray:
    return np.rec.fromarrays([np.asarray(side, np.int64), np.asarray(key, np.int64)],  # type: ignore[call-overload]
                             names="side,key")


def exact_counts(side: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(side, key, count) of every distinct item, sorted by (side, key)."""
    if len(side) == 0:
        return np.zeros(0, np.int8), np.zeros(0, np.int64), np.zeros(0, np.int64)
    u, c = np.unique(_items(side, key), return_counts=True)
    return u["side"].astype(np.int8), u["key"].astype(np.int64), c.astype(np.int64)


@dataclass(frozen=True)
class Summary:
    """A Misra-Gries summary of ``n`` items with at most ``capacity`` counters."""

    capacity: int
    side: np.ndarray  # int8
    key: np.ndarray  # int64
    count: np.ndarray  # int64, > 0
    n: int = 0

    @classmethod
    def empty(cls, capacity: int) -> Summary:
        return cls(int(capacity), np.zeros(0, np.int8), np.zeros(0, np.int64), np.zeros(0, np.int64), 0)

    @classmethod
    def of(cls, capacity: int, side: np.ndarray, key: np.ndarray, count: np.ndarray | None = None,
           n: int | None = None) -> Summary:
        """A summary of items given as (side, key) rows, or as exact (side, key, count) - a
        micro-batch's counts need not be complete: an item left out must have a count no larger
        than the (capacity+1)-th largest one given (a top-k query gives exactly that)."""
        side, key = np.asarray(side, np.int8), np.asarray(key, np.int64)
        if count is None:
            side, key, count = exact_counts(side, key)
        count = np.asarray(count, np.int64)
        total = int(count.sum()) if n is None else int(n)
        return cls.empty(capacity).merge(cls(int(capacity), side, key, count, 0), total)

    def merge(self, other: Summary, other_n: int | None = None) -> Summary:
        """This summary and ``other`` (or a micro-batch's exact counts) merged: add the counters of
        equal items, subtract the (capacity+1)-th largest, keep the positive ones."""
        side = np.concatenate([self.side, other.side]).astype(np.int8)
        key = np.concatenate([self.key, other.key])
        count = np.concatenate([self.count, other.count])
        n = self.n + (other.n if other_n is None else int(other_n))
        if count.size:
            u, inv = np.unique(_items(side, key), return_inverse=True)
            summed = np.bincount(inv.ravel(), weights=count, minlength=len(u)).astype(np.int64)
            side, key, count = u["side"].astype(np.int8), u["key"].astype(np.int64), summed
            if count.size > self.capacity:
                cut = np.partition(count, count.size - self.capacity - 1)[count.size - self.capacity - 1]
                count = count - cut
                keep = count > 0
                side, key, count = side[keep], key[keep], count[keep]
        return Summary(self.capacity, side, key, count, n)

    @property
    def error(self) -> float:
        """The largest underestimate of any item's count: n / (capacity + 1)."""
        return self.n / (self.capacity + 1)

    def estimate(self, side: int, keys: np.ndarray) -> np.ndarray:
        """Estimated counts of ``keys`` on ``side`` (0 for an item without a counter): each in
        [f - error, f], f the true count."""
        keys = np.asarray(keys, np.int64)
        mine = self.side == side
        ks, cs = self.key[mine], self.count[mine]
        order = np.argsort(ks, kind="stable")
        ks, cs = ks[order], cs[order]
        i = np.clip(np.searchsorted(ks, keys), 0, max(len(ks) - 1, 0))
        hit = (len(ks) > 0) & (ks[i] == keys) if len(ks) else np.zeros(keys.shape, bool)
        return np.where(hit, cs[i] if len(cs) else 0, 0).astype(np.int64)

    def keys(self) -> np.ndarray:
        return unique(self.key)


def merge_all(capacity: int, summaries: Iterable[Summary]) -> Summary:
    out = Summary.empty(capacity)
    for s in summaries:
        out = out.merge(s)
    return out
