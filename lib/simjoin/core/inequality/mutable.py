"""The mutable part of SPO-Join: the most recent sub-window, insert-efficient.

Aslam et al., *SPO-Join: Efficient Stream Inequality Join*:

* Section 3.2 (Figure 4): the mutable component keeps one sorted index per predicate attribute (a B⁺-tree
  there, whose leaves are sorted runs) and gives every tuple a *temporary id*, its insertion counter since the
  last merge. A probe turns each predicate into a range of that attribute's index, i.e. a set of tmp ids, and
  ANDs the predicates.
* Section 3.3: every δ tuples the mutable part is merged into an immutable PO-Join batch (``to_batch`` /
  ``take``); the sorted leaves make that merge cheap.

Here the per-attribute index is a sorted array of (equality-key code, value) with the tmp ids alongside;
``insert`` sorts only the new tuples and merges the two sorted runs in O(n + m) (``_merge_runs``), instead of
re-sorting. With ``=`` predicates the key code is the leading sort key, so a probe first narrows every index to
its key group (the same positions in every index).

The AND of Section 3.2 is done on one node without materialising a bit array per predicate: the probe takes
the narrowest predicate range and checks the other predicates on the candidates' values by tmp id — the same
set as ANDing the per-predicate tmp-id sets, at the cost of the smallest range instead of the sum of all.
Predicates whose values are non-decreasing along an earlier index (the other half of a band, ...) share that
index and their ranges intersect (``_classes``). Key equality (exact, hash-collision safe), ``!=`` residuals
and the window bounds are checked like in ``pojoin`` (``kernels.settle``). Results are ``(probe_index, tmp_id)``.

When the candidate count of a probe call would exceed about the cost of sorting the mutable part (a large
micro-batch against a large sub-window, Q2-like two-sided predicates), the probe is answered by a PO-Join
snapshot (``to_batch``, stored index = tmp id) kept until the next insert.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
from numba import njit

from .kernels import (
    OP_NAMES,
    SETTLE_EVERY,
    lower_bound,
    make_ctx,
    op_codes,
    op_range,
    probe_args,
    reserve,
    settle,
    upper_bound,
)
from .pojoin import POBatch, stored_columns

__all__ = ["MutablePart", "SNAPSHOT_COST_PER_TUPLE", "SNAPSHOT_MIN_TUPLES"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.int64]  # value keys (``exact.as_keys``)

# 2: values are int64 keys (integers exact, floats by their order-preserving key); 1 held float64 values
_MUTABLE_FORMAT = 2
# A probe whose range scans would check more than SNAPSHOT_COST_PER_TUPLE candidates per stored tuple (about the
# cost of sorting them) is answered by a PO-Join snapshot of the mutable part instead, kept until the next insert.
SNAPSHOT_COST_PER_TUPLE = 20
SNAPSHOT_MIN_TUPLES = 4096
# The scan cost is estimated (O(probes log n)) once the part holds this many tuples: a micro-batch of 50,000
# probes against 2,400 stored tuples under Q1 checks 60 million candidates (2.5 s) where a snapshot takes 0.05 s.
SNAPSHOT_MIN_STORED = 256


@njit(cache=True, nogil=True)
def _merge_runs(
    keys_a: IntArray, vals_a: FloatArray, tids_a: IntArray, keys_b: IntArray, vals_b: FloatArray, tids_b: IntArray
) -> tuple[IntArray, FloatArray, IntArray]:
    """Merge two runs sorted by (key, value, tmp id); on equal (key, value) run a (older tmp ids) goes first."""
    na = keys_a.shape[0]
    nb = keys_b.shape[0]
    keys = np.empty(na + nb, dtype=np.int64)
    vals = np.empty(na + nb, dtype=np.int64)
    tids = np.empty(na + nb, dtype=np.int64)
    i = 0
    j = 0
    for o in range(na + nb):
        if j >= nb:
            take_a = True
        elif i >= na:
            take_a = False
        else:
            take_a = keys_a[i] < keys_b[j] or (keys_a[i] == keys_b[j] and vals_a[i] <= vals_b[j])
        if take_a:
            keys[o] = keys_a[i]
            vals[o] = vals_a[i]
            tids[o] = tids_a[i]
            i += 1
        else:
            keys[o] = keys_b[j]
            vals[o] = vals_b[j]
            tids[o] = tids_b[j]
            j += 1
    return keys, vals, tids


@njit(cache=True, nogil=True)
def _narrowest(
    sorted_keys: IntArray,
    sorted_values: FloatArray,
    leader: IntArray,
    has_keys: bool,
    pkeys: IntArray,
    pvalues: FloatArray,
    ops: IntArray,
    i: int,
) -> tuple[int, int, int]:
    """Probe ``i``'s narrowest class range ``(class, lo, hi)`` (``lo >= hi`` when some class range is empty)."""
    n = sorted_keys.shape[0]
    k = ops.shape[0]
    gs = 0
    ge = n
    if has_keys:
        gs = lower_bound(sorted_keys, 0, n, pkeys[i])
        ge = upper_bound(sorted_keys, gs, n, pkeys[i])
        if gs >= ge:
            return 0, 0, 0
    best = 0
    best_lo = 0
    best_hi = 0
    first = True
    for c in range(k):
        if leader[c] != c:
            continue
        lo = gs
        hi = ge
        for j in range(c, k):
            if leader[j] == c:
                a, b = op_range(sorted_values[j], gs, ge, ops[j], pvalues[i, j])
                lo = max(lo, a)
                hi = min(hi, b)
        if first or hi - lo < best_hi - best_lo:
            first = False
            best = c
            best_lo = lo
            best_hi = hi
        if lo >= hi:
            break
    return best, best_lo, best_hi


@njit(cache=True, nogil=True)
def _scan_cost(
    sorted_keys: IntArray,
    sorted_values: FloatArray,
    leader: IntArray,
    has_keys: bool,
    pkeys: IntArray,
    pvalues: FloatArray,
    ops: IntArray,
) -> int:
    """Candidates a probe of the mutable indexes would check (the sum of the narrowest ranges)."""
    total = 0
    for i in range(pvalues.shape[0]):
        _, lo, hi = _narrowest(sorted_keys, sorted_values, leader, has_keys, pkeys, pvalues, ops, i)
        total += max(0, hi - lo)
    return total


@njit(cache=True, nogil=True)
def _probe_mutable(
    sorted_keys: IntArray,
    sorted_values: FloatArray,
    sorted_tids: IntArray,
    leader: IntArray,
    checks: IntArray,
    n_checks: IntArray,
    has_keys: bool,
    pkeys: IntArray,
    ctx,  # type: ignore[no-untyped-def]
):  # type: ignore[no-untyped-def]
    """Per probe: one range per index class, scan the narrowest, check the rest exactly (check set ``best``)."""
    pvalues = ctx[1]
    ops = ctx[2]
    cand = np.empty((3, 1024), dtype=np.int64)
    cnt = 0
    done = 0
    for i in range(pvalues.shape[0]):
        best, lo, hi = _narrowest(sorted_keys, sorted_values, leader, has_keys, pkeys, pvalues, ops, i)
        cand = reserve(cand, cnt, cnt + hi - lo)
        for pos in range(lo, hi):
            cand[0, cnt] = i
            cand[1, cnt] = sorted_tids[best, pos]
            cand[2, cnt] = best
            cnt += 1
        if cnt - done >= SETTLE_EVERY:
            cnt = settle(cand, done, cnt, checks, n_checks, ctx)
            done = cnt
    cnt = settle(cand, done, cnt, checks, n_checks, ctx)
    return cand[0, :cnt].copy(), cand[1, :cnt].copy()


class MutablePart:
    """The most recent sub-window: one sorted index per predicate attribute; each tuple has a temporary id
    (insertion counter since the last merge).

    ``ops[k]`` reads ``stored[:, k]  ops[k]  probe[:, k]`` (see ``orient``). ``n_key_cols`` is the number of ``=``
    predicates (their key values are required on insert and probe; key codes are hashed from them unless given),
    ``n_residual`` the number of ``!=`` predicates.
    """

    def __init__(self, ops: Sequence[str], n_key_cols: int = 0, n_residual: int = 0) -> None:
        self.op_codes = op_codes(ops)
        k = self.op_codes.shape[0]
        if k == 0:
            raise ValueError("at least one inequality predicate is required (ops is empty)")
        if n_key_cols < 0 or n_residual < 0:
            raise ValueError(f"n_key_cols and n_residual must be >= 0, got {n_key_cols}, {n_residual}")
        self.n_key_cols = int(n_key_cols)
        self.n_residual = int(n_residual)
        # by tmp id
        self.ids = np.empty(0, dtype=np.int64)
        self.ts = np.empty(0, dtype=np.int64)
        self.seq = np.empty(0, dtype=np.int64)
        self.values = np.empty((0, k), dtype=np.int64)
        self.keys: IntArray | None = np.empty(0, dtype=np.int64) if n_key_cols else None
        self.key_values = np.empty((0, self.n_key_cols), dtype=np.int64)
        self.residual = np.empty((0, self.n_residual), dtype=np.int64)
        # the per-attribute indexes: key codes (identical along every index), values and tmp ids
        self.sorted_keys = np.empty(0, dtype=np.int64)
        self.sorted_values = np.empty((k, 0), dtype=np.int64)
        self.sorted_tids = np.empty((k, 0), dtype=np.int64)
        self._leader: tuple[IntArray, IntArray, IntArray] | None = None
        self._snapshot: POBatch | None = None

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(OP_NAMES[c] for c in self.op_codes)

    @property
    def k(self) -> int:
        return int(self.op_codes.shape[0])

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @property
    def n(self) -> int:
        return len(self)

    @property
    def ts_min(self) -> int:
        return int(self.ts.min()) if len(self) else int(np.iinfo(np.int64).max)

    @property
    def ts_max(self) -> int:
        return int(self.ts.max()) if len(self) else int(np.iinfo(np.int64).min)

    @property
    def seq_min(self) -> int:
        return int(self.seq.min()) if len(self) else int(np.iinfo(np.int64).max)

    @property
    def seq_max(self) -> int:
        return int(self.seq.max()) if len(self) else int(np.iinfo(np.int64).min)

    def insert(
        self,
        ids: npt.ArrayLike,
        ts: npt.ArrayLike,
        seq: npt.ArrayLike,
        values: npt.ArrayLike,
        keys: npt.ArrayLike | None = None,
        key_values: npt.ArrayLike | None = None,
        residual: npt.ArrayLike | None = None,
    ) -> None:
        """Append tuples (tmp ids continue counting) and merge them into every attribute index in O(n + m)."""
        if self.n_key_cols and key_values is None:
            raise ValueError(f"key_values is required: the query has {self.n_key_cols} = predicate(s)")
        if not self.n_key_cols and (keys is not None or key_values is not None):
            raise ValueError("keys given, but the mutable part has no = predicates (n_key_cols=0)")
        ids_, ts_, seq_, v, _, codes, kv, res = stored_columns(
            ids, ts, seq, values, self.ops, keys, key_values, residual
        )
        if kv.shape[1] != self.n_key_cols or res.shape[1] != self.n_residual:
            raise ValueError(
                f"key_values/residual must have {self.n_key_cols}/{self.n_residual} columns, "
                f"got {kv.shape[1]}/{res.shape[1]}"
            )
        m = v.shape[0]
        if m == 0:
            return
        n0 = len(self)
        gk = codes if codes is not None else np.zeros(m, dtype=np.int64)
        tids = np.arange(n0, n0 + m, dtype=np.int64)
        k = self.k
        new_values = np.empty((k, n0 + m), dtype=np.int64)
        new_tids = np.empty((k, n0 + m), dtype=np.int64)
        merged_keys = self.sorted_keys
        for j in range(k):
            run = np.lexsort((v[:, j], gk))
            merged_keys, new_values[j], new_tids[j] = _merge_runs(
                self.sorted_keys, self.sorted_values[j], self.sorted_tids[j], gk[run], v[run, j], tids[run]
            )
        self.sorted_keys = merged_keys
        self._leader = None
        self._snapshot = None
        self.sorted_values = new_values
        self.sorted_tids = new_tids
        self.ids = np.concatenate((self.ids, ids_))
        self.ts = np.concatenate((self.ts, ts_))
        self.seq = np.concatenate((self.seq, seq_))
        self.values = np.concatenate((self.values, v))
        if self.keys is not None and codes is not None:
            self.keys = np.concatenate((self.keys, codes))
        self.key_values = np.concatenate((self.key_values, kv))
        self.residual = np.concatenate((self.residual, res))

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
        """All ``(probe_index, tmp_id)`` pairs satisfying every predicate and bound (same contract as
        ``POBatch.probe``)."""
        args = probe_args(
            self.k,
            self.keys is not None,
            self.n_key_cols,
            self.n_residual,
            values,
            ts_lo,
            ts_hi,
            seq_lo,
            seq_hi,
            keys,
            key_values,
            residual,
        )
        if len(self) == 0 or args.m == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        pkeys = args.keys if args.keys is not None else np.empty(0, dtype=np.int64)
        leader, checks, n_checks = self._classes()
        if self._snapshot is None and len(self) >= SNAPSHOT_MIN_STORED:
            cost = _scan_cost(
                self.sorted_keys, self.sorted_values, leader, self.keys is not None, pkeys, args.values, self.op_codes
            )
            if cost > SNAPSHOT_COST_PER_TUPLE * len(self) + SNAPSHOT_MIN_TUPLES:
                self._snapshot = self.to_batch()
        if self._snapshot is not None:
            return self._snapshot.probe_prepared(args)
        ctx = make_ctx(self.values, self.op_codes, self.key_values, self.residual, self.ts, self.seq, args)
        return _probe_mutable(  # type: ignore[no-any-return]
            self.sorted_keys,
            self.sorted_values,
            self.sorted_tids,
            leader,
            checks,
            n_checks,
            self.keys is not None,
            pkeys,
            ctx,
        )

    def _classes(self) -> tuple[IntArray, IntArray, IntArray]:
        """``leader[j]``: the index whose order answers predicate ``j`` with a range (its own, or an earlier one
        along which its values are non-decreasing, e.g. the other half of a band); ``checks[c, :n_checks[c]]``:
        the predicates to verify after scanning the range of class ``c``. Cached until the next insert."""
        if self._leader is None:
            k, n = self.k, len(self)
            change = self.sorted_keys[1:] != self.sorted_keys[:-1]
            leader = np.arange(k, dtype=np.int64)
            for j in range(1, k):
                for c in range(j):
                    if leader[c] != c:
                        continue
                    v = self.values[self.sorted_tids[c], j]  # int64 keys: compare, never subtract
                    if n == 0 or bool(np.all((v[1:] >= v[:-1]) | change)):
                        leader[j] = c
                        break
            checks = np.zeros((k, k), dtype=np.int64)
            n_checks = np.zeros(k, dtype=np.int64)
            for c in range(k):
                rest = [j for j in range(k) if leader[j] != c]
                checks[c, : len(rest)] = rest
                n_checks[c] = len(rest)
            self._leader = (leader, checks, n_checks)
        return self._leader

    def to_batch(self) -> POBatch:
        """The merge into the immutable part (Section 3.3): all tuples, stored index = tmp id."""
        return POBatch.build(
            self.ids,
            self.ts,
            self.seq,
            self.values,
            self.ops,
            keys=self.keys,
            key_values=self.key_values if self.n_key_cols else None,
            residual=self.residual,
        )

    def take(self, count: int) -> tuple[POBatch, MutablePart]:
        """The first ``count`` tuples by tmp id as a batch (stored index = tmp id), the rest as a new mutable part
        whose tmp ids restart at 0 (old tmp id - ``count``)."""
        count = max(0, min(int(count), len(self)))
        rest = MutablePart(self.ops, self.n_key_cols, self.n_residual)
        keep = self.sorted_tids[0] >= count
        rest.sorted_keys = self.sorted_keys[keep]
        k = self.k
        rest.sorted_values = np.empty((k, len(self) - count), dtype=np.int64)
        rest.sorted_tids = np.empty((k, len(self) - count), dtype=np.int64)
        for j in range(k):
            keep_j = self.sorted_tids[j] >= count
            rest.sorted_values[j] = self.sorted_values[j][keep_j]
            rest.sorted_tids[j] = self.sorted_tids[j][keep_j] - count
        rest.ids = self.ids[count:].copy()
        rest.ts = self.ts[count:].copy()
        rest.seq = self.seq[count:].copy()
        rest.values = self.values[count:].copy()
        rest.keys = None if self.keys is None else self.keys[count:].copy()
        rest.key_values = self.key_values[count:].copy()
        rest.residual = self.residual[count:].copy()
        head_batch = POBatch.build(
            self.ids[:count],
            self.ts[:count],
            self.seq[:count],
            self.values[:count],
            self.ops,
            keys=None if self.keys is None else self.keys[:count],
            key_values=self.key_values[:count] if self.n_key_cols else None,
            residual=self.residual[:count],
        )
        return head_batch, rest

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Every array including the sorted indexes, so ``from_arrays`` does not sort again."""
        out = {
            "format_version": np.asarray(_MUTABLE_FORMAT, dtype=np.int64),
            "op_codes": self.op_codes,
            "ids": self.ids,
            "ts": self.ts,
            "seq": self.seq,
            "values": self.values,
            "key_values": self.key_values,
            "residual": self.residual,
            "sorted_keys": self.sorted_keys,
            "sorted_values": self.sorted_values,
            "sorted_tids": self.sorted_tids,
        }
        if self.keys is not None:
            out["keys"] = self.keys
        return out

    @classmethod
    def from_arrays(cls, d: Mapping[str, np.ndarray]) -> MutablePart:
        version = int(d.get("format_version", _MUTABLE_FORMAT))
        if version != _MUTABLE_FORMAT:
            raise ValueError(f"MutablePart format_version {version} is not supported (expected {_MUTABLE_FORMAT}: "
                             "int64 value keys); rerun the output with --reset")
        ops = tuple(OP_NAMES[int(c)] for c in np.asarray(d["op_codes"]))
        kv = np.ascontiguousarray(d["key_values"], dtype=np.int64)
        res = np.ascontiguousarray(d["residual"], dtype=np.int64)
        part = cls(ops, kv.shape[1], res.shape[1])
        part.ids = np.ascontiguousarray(d["ids"], dtype=np.int64)
        part.ts = np.ascontiguousarray(d["ts"], dtype=np.int64)
        part.seq = np.ascontiguousarray(d["seq"], dtype=np.int64)
        part.values = np.ascontiguousarray(d["values"], dtype=np.int64).reshape(-1, part.k)
        part.keys = np.ascontiguousarray(d["keys"], dtype=np.int64) if "keys" in d else None
        part.key_values = kv
        part.residual = res
        part.sorted_keys = np.ascontiguousarray(d["sorted_keys"], dtype=np.int64)
        part.sorted_values = np.ascontiguousarray(d["sorted_values"], dtype=np.int64)
        part.sorted_tids = np.ascontiguousarray(d["sorted_tids"], dtype=np.int64)
        return part

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        np.savez(buf, **self.to_arrays())  # type: ignore[arg-type]
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, b: bytes) -> MutablePart:
        with np.load(io.BytesIO(b), allow_pickle=False) as z:
            return cls.from_arrays({name: z[name] for name in z.files})
