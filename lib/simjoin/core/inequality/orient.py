"""Orienting a query for one stored role: every predicate as ``stored_value  OP  probe_value``.

Aslam et al., *SPO-Join* (Section 3.1): a new tuple of one stream is inserted into its own window and probes the
opposite stream's window, so each predicate ``l.x + off OP r.y`` is evaluated from either side:

* stored role ``r`` (probes are ``l`` tuples): stored ``r.y``, operator ``flip(OP)``, probe ``l.x + off``
  (``l.x + off < r.y`` ⇔ ``r.y > l.x + off``);
* stored role ``l`` (probes are ``r`` tuples): stored ``l.x + off``, operator ``OP``, probe ``r.y``.

The offset always stays on the ``l`` value, so both orientations evaluate exactly ``fl(l.x + off) OP r.y`` — the
float64 expression of ``Predicate.holds`` and of the brute force — and never ``l.x OP fl(r.y - off)``, which can
differ by one rounding. Integer columns are not rounded at all: ``l.x + off`` is computed in int64 (a sum outside
int64 is refused, ``simjoin.core.exact``). Every matrix holds int64 *keys* (``exact.key_of``): an integer is its
own key, a float its order-preserving key, so the kernels compare int64 for every column type.
The same holds for ``=`` predicates (exact key values) and ``!=`` residuals; ``=`` and
``!=`` are symmetric, so their operator needs no flip.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from simjoin.core.exact import key_of

from .query import Predicate, Query, flip_op

__all__ = ["Orientation", "SideColumns", "orient"]

FloatArray = npt.NDArray[np.int64]  # int64 keys (``exact.key_of``)


@dataclass(frozen=True)
class SideColumns:
    """Columns of one role and the offsets added to them, one per predicate."""

    cols: tuple[str, ...]
    offsets: tuple[float | int, ...]

    def matrix(self, columns: Mapping[str, npt.ArrayLike], n: int | None = None) -> FloatArray:
        """int64 keys ``[n, len(cols)]`` of column ``c`` plus its offset (``exact.key_of``: exact for integer
        columns, ``fl(c + off)`` for floats; ``n`` is needed when there are no columns)."""
        if not self.cols:
            size = n if n is not None else (len(np.asarray(next(iter(columns.values())))) if columns else 0)
            return np.empty((size, 0), dtype=np.int64)
        out = np.column_stack([key_of(columns[c], o, f"column {c}") for c, o in zip(self.cols, self.offsets)])
        return np.ascontiguousarray(out, dtype=np.int64)


@dataclass(frozen=True)
class Orientation:
    """A query seen from ``stored_role``: predicate ``k`` reads ``stored[:, k]  ops[k]  probe[:, k]``."""

    stored_role: str
    ops: tuple[str, ...]  # inequality operators, stored on the left
    stored: SideColumns  # inequality columns of the stored role
    probe: SideColumns  # inequality columns of the probe role
    key_stored: SideColumns  # = predicates
    key_probe: SideColumns
    residual_stored: SideColumns  # != predicates
    residual_probe: SideColumns

    @property
    def probe_role(self) -> str:
        return "l" if self.stored_role == "r" else "r"

    @property
    def stored_cols(self) -> tuple[str, ...]:
        return self.stored.cols

    @property
    def probe_cols(self) -> tuple[str, ...]:
        return self.probe.cols

    def stored_values(self, columns: Mapping[str, npt.ArrayLike], n: int | None = None) -> FloatArray:
        return self.stored.matrix(columns, n)

    def probe_values(self, columns: Mapping[str, npt.ArrayLike], n: int | None = None) -> FloatArray:
        return self.probe.matrix(columns, n)

    def stored_key_values(self, columns: Mapping[str, npt.ArrayLike], n: int | None = None) -> FloatArray | None:
        return self.key_stored.matrix(columns, n) if self.key_stored.cols else None

    def probe_key_values(self, columns: Mapping[str, npt.ArrayLike], n: int | None = None) -> FloatArray | None:
        return self.key_probe.matrix(columns, n) if self.key_probe.cols else None

    def stored_residual(self, columns: Mapping[str, npt.ArrayLike], n: int | None = None) -> FloatArray | None:
        return self.residual_stored.matrix(columns, n) if self.residual_stored.cols else None

    def probe_residual(self, columns: Mapping[str, npt.ArrayLike], n: int | None = None) -> FloatArray | None:
        return self.residual_probe.matrix(columns, n) if self.residual_probe.cols else None


def _split(preds: tuple[Predicate, ...], stored_role: str) -> tuple[SideColumns, SideColumns]:
    if stored_role == "r":
        return (
            SideColumns(tuple(p.right for p in preds), tuple(0 for _ in preds)),
            SideColumns(tuple(p.left for p in preds), tuple(p.offset for p in preds)),
        )
    return (
        SideColumns(tuple(p.left for p in preds), tuple(p.offset for p in preds)),
        SideColumns(tuple(p.right for p in preds), tuple(0 for _ in preds)),
    )


def orient(query: Query, stored_role: str) -> Orientation:
    """The query as ``stored OP probe`` for tuples of ``stored_role`` ('l' or 'r') probed by the other role."""
    if stored_role not in ("l", "r"):
        raise ValueError(f"stored_role must be 'l' or 'r', got {stored_role!r}")
    ineq = query.inequalities
    ops = tuple(flip_op(p.op) if stored_role == "r" else p.op for p in ineq)
    stored, probe = _split(ineq, stored_role)
    key_stored, key_probe = _split(query.equalities, stored_role)
    res_stored, res_probe = _split(query.residuals, stored_role)
    return Orientation(stored_role, ops, stored, probe, key_stored, key_probe, res_stored, res_probe)
