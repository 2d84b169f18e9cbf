"""Distance kernels and float-safe partition bounds for the S3J metric-space join.

Siachamis et al., *Adaptive Distributed Streaming Similarity Joins* (S3J, DEBS'23):

* Section 3: records match when their distance is within the threshold t
  (``dist = 1 - sim``). The authors' code uses a strict ``dist < t``; this module
  also offers the inclusive ``dist <= t``.
* Section 2 (Criterion 1), Section 7.6: the partition bounds t/2, t and 2t are
  proved with the triangle inequality, so partitioning needs a true metric.

Metrics (``METRICS``):

* ``angular``   ``acos(clip(cos, -1, 1)) / pi`` in [0, 1]  (t must be in (0, 1])
* ``euclidean`` ``||a - b||_2``                             (t > 0)
* ``cosine``    ``1 - clip(cos, -1, 1)`` in [0, 2]          (t must be in (0, 2])

Cosine distance is not a metric. For it the partitioning works in *angular*
space (``1 - cos < t  <=>  angle < acos(1 - t)``) and matches are still decided
in cosine distance. ``partition_metric`` / ``partition_threshold`` give that
mapping.

Exactness. A match is decided on the user-metric distance of the pair computed
by one numba scalar kernel (``_dist``), whatever the caller (brute force,
workset join, ClusterJoin, ``pairwise``, ``paired``): the loop order is fixed,
there is no fast-math, and ``d(a, b)`` and ``d(b, a)`` are bitwise equal, so all
algorithms agree bit for bit. Partition decisions use distances that carry a
rounding error; ``partition_bounds`` widens every bound that must not lose a
pair (Criterion 1, outer sets, Criterion 2) by a rigorous error bound and
narrows the inner-set radius so that the inner x inner pairs emitted *without*
a computation provably pass the strict ``<`` test of the kernel. The slack is
tiny (about 1e-13 relative for euclidean, about 1e-7 absolute for angular, whose
``acos`` is ill-conditioned near 0), so pruning is unaffected in practice.

Public API:

* ``check_metric(metric) -> str``; ``check_threshold(metric, t) -> float``;
  ``check_vectors(X, metric) -> float64 C-contiguous (n, d)``.
* ``row_norms(X) -> (n,)``.
* ``pairwise(metric, A, B) -> (m, n)`` full matrix (memory is the output only;
  use ``pairwise_blocks`` to bound it); ``pairwise_blocks(metric, A, B,
  max_elements) -> iterator of (row_start, block)``.
* ``paired(metric, A, B) -> (n,)`` distances of aligned rows ``A[k], B[k]``.
* ``matches(d, t, inclusive=False) -> bool array``: ``d < t`` or ``d <= t``
  (NaN never matches).
* ``partition_metric(metric)``, ``partition_threshold(metric, t)``,
  ``partition_bounds(metric, t, dim, inclusive=False) -> PartitionBounds``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numba import njit

__all__ = [
    "METRICS",
    "METRIC_CODES",
    "PartitionBounds",
    "check_metric",
    "check_threshold",
    "check_vectors",
    "matches",
    "paired",
    "pairwise",
    "pairwise_blocks",
    "partition_bounds",
    "partition_metric",
    "partition_threshold",
    "row_norms",
]

METRICS: tuple[str, ...] = ("angular", "euclidean", "cosine")
# Codes passed to the numba kernels.
EUCLIDEAN, ANGULAR, COSINE = 0, 1, 2
METRIC_CODES: dict[str, int] = {"euclidean": EUCLIDEAN, "angular": ANGULAR, "cosine": COSINE}
# Largest allowed threshold per metric (the metric's range); euclidean is unbounded.
_MAX_THRESHOLD: dict[str, float] = {"angular": 1.0, "cosine": 2.0, "euclidean": math.inf}
# Unit roundoff of float64.
_U = 2.0**-53
# Default cap on the number of matrix entries materialised at once by block iterators.
DEFAULT_BLOCK_ELEMENTS = 1 << 22

FloatArray = npt.NDArray[np.float64]


def check_metric(metric: str) -> str:
    """Return ``metric`` if it is one of ``METRICS``; raise ``ValueError`` otherwise."""
    if metric not in METRIC_CODES:
        raise ValueError(f"unknown metric {metric!r}; allowed: {', '.join(METRICS)}")
    return metric


def check_threshold(metric: str, t: float) -> float:
    """Validate a distance threshold: ``t > 0`` and within the metric's range.

    angular: 0 < t <= 1; cosine: 0 < t <= 2; euclidean: 0 < t < inf.
    """
    check_metric(metric)
    try:
        tf = float(t)
    except (TypeError, ValueError):
        raise ValueError(f"threshold must be a number, got {t!r}") from None
    hi = _MAX_THRESHOLD[metric]
    if not (tf > 0.0 and math.isfinite(tf) and tf <= hi):
        rng = "0 < t < inf" if math.isinf(hi) else f"0 < t <= {hi:g}"
        raise ValueError(f"threshold t={t!r} is out of range for metric {metric!r}: allowed {rng}")
    return tf


def check_vectors(X: npt.ArrayLike, metric: str, name: str = "X") -> FloatArray:
    """Return ``X`` as a C-contiguous float64 (n, d) array; reject bad input.

    Raises ``ValueError`` for a non 2-D array, d == 0, non-finite values and, for
    angular/cosine, all-zero vectors (their angle is undefined).
    """
    check_metric(metric)
    A = np.ascontiguousarray(np.asarray(X, dtype=np.float64))
    if A.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n, d), got shape {A.shape}")
    if A.shape[1] == 0:
        raise ValueError(f"{name} must have at least one dimension, got shape {A.shape}")
    if A.size and not np.isfinite(A).all():
        bad = int(np.flatnonzero(~np.isfinite(A).all(axis=1))[0])
        raise ValueError(f"{name} row {bad} has a non-finite value: {A[bad].tolist()}")
    if metric != "euclidean" and A.shape[0]:
        zero = ~A.any(axis=1)
        if zero.any():
            raise ValueError(
                f"{name} row {int(np.flatnonzero(zero)[0])} is the zero vector; "
                f"{metric} distance is undefined for it"
            )
    return A


@njit(cache=True, nogil=True)
def _row_norms(X: FloatArray) -> FloatArray:
    n, d = X.shape
    out = np.empty(n)
    for i in range(n):
        s = 0.0
        for k in range(d):
            s += X[i, k] * X[i, k]
        out[i] = math.sqrt(s)
    return out


def row_norms(X: FloatArray) -> FloatArray:
    """Euclidean norm of every row, computed in a fixed order (same kernel everywhere)."""
    return _row_norms(np.ascontiguousarray(X, dtype=np.float64))


@njit(cache=True, nogil=True)
def _dist(code: int, X: FloatArray, i: int, Y: FloatArray, j: int, nx: float, ny: float) -> float:
    """The one scalar distance kernel: d(X[i], Y[j]); nx, ny are the row norms.

    Symmetric bit for bit: products and the sum are taken in the same order for
    (a, b) and (b, a). No fast-math, so no reassociation or contraction.
    """
    d = X.shape[1]
    if code == 0:
        s = 0.0
        for k in range(d):
            diff = X[i, k] - Y[j, k]
            s += diff * diff
        return math.sqrt(s)
    dot = 0.0
    for k in range(d):
        dot += X[i, k] * Y[j, k]
    return _dot_dist(code, dot, nx, ny)


@njit(cache=True, nogil=True)
def _dot_dist(code: int, dot: float, nx: float, ny: float) -> float:
    """Angular (code 1) or cosine (code 2) distance from a dot product and the two norms: the
    rest of ``_dist``, for a kernel that already has the dot product."""
    c = dot / (nx * ny)
    if c > 1.0:
        c = 1.0
    elif c < -1.0:
        c = -1.0
    if code == 1:
        return math.acos(c) / math.pi
    return 1.0 - c


@njit(cache=True, nogil=True)
def _pairwise(code: int, A: FloatArray, na: FloatArray, B: FloatArray, nb: FloatArray) -> FloatArray:
    m = A.shape[0]
    n = B.shape[0]
    out = np.empty((m, n))
    for i in range(m):
        for j in range(n):
            out[i, j] = _dist(code, A, i, B, j, na[i], nb[j])
    return out


@njit(cache=True, nogil=True)
def _paired(code: int, A: FloatArray, na: FloatArray, B: FloatArray, nb: FloatArray) -> FloatArray:
    n = A.shape[0]
    out = np.empty(n)
    for i in range(n):
        out[i] = _dist(code, A, i, B, i, na[i], nb[i])
    return out


def _prep(metric: str, A: npt.ArrayLike, name: str) -> tuple[FloatArray, FloatArray]:
    M = np.ascontiguousarray(np.asarray(A, dtype=np.float64))
    if M.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n, d), got shape {M.shape}")
    norms = _row_norms(M) if metric != "euclidean" else np.zeros(M.shape[0])
    return M, norms


def pairwise(metric: str, A: npt.ArrayLike, B: npt.ArrayLike) -> FloatArray:
    """Full (len(A), len(B)) distance matrix in the user's metric."""
    check_metric(metric)
    Am, na = _prep(metric, A, "A")
    Bm, nb = _prep(metric, B, "B")
    if Am.shape[1] != Bm.shape[1]:
        raise ValueError(f"dimension mismatch: A has d={Am.shape[1]}, B has d={Bm.shape[1]}")
    return _pairwise(METRIC_CODES[metric], Am, na, Bm, nb)


def pairwise_blocks(
    metric: str,
    A: npt.ArrayLike,
    B: npt.ArrayLike,
    max_elements: int = DEFAULT_BLOCK_ELEMENTS,
) -> Iterator[tuple[int, FloatArray]]:
    """Yield ``(row_start, D[row_start:row_start + k])`` blocks of the distance matrix.

    Each block holds at most ``max(max_elements, len(B))`` entries, so memory stays
    bounded however large A is.
    """
    check_metric(metric)
    Am, na = _prep(metric, A, "A")
    Bm, nb = _prep(metric, B, "B")
    if Am.shape[1] != Bm.shape[1]:
        raise ValueError(f"dimension mismatch: A has d={Am.shape[1]}, B has d={Bm.shape[1]}")
    code = METRIC_CODES[metric]
    rows = max(1, int(max_elements) // max(1, Bm.shape[0]))
    for s in range(0, Am.shape[0], rows):
        e = min(Am.shape[0], s + rows)
        yield s, _pairwise(code, Am[s:e], na[s:e], Bm, nb)


def paired(metric: str, A: npt.ArrayLike, B: npt.ArrayLike) -> FloatArray:
    """Distances of aligned rows: ``out[k] = d(A[k], B[k])`` (same kernel as ``pairwise``)."""
    check_metric(metric)
    Am, na = _prep(metric, A, "A")
    Bm, nb = _prep(metric, B, "B")
    if Am.shape != Bm.shape:
        raise ValueError(f"paired needs equal shapes, got {Am.shape} and {Bm.shape}")
    return _paired(METRIC_CODES[metric], Am, na, Bm, nb)


def matches(d: npt.ArrayLike, t: float, inclusive: bool = False) -> npt.NDArray[np.bool_]:
    """Match predicate on computed distances: ``d < t`` (default) or ``d <= t``. NaN is False."""
    arr = np.asarray(d, dtype=np.float64)
    return arr <= t if inclusive else arr < t


def partition_metric(metric: str) -> str:
    """The true metric the partitioning works in: angular for cosine, else the metric itself."""
    check_metric(metric)
    return "angular" if metric == "cosine" else metric


def partition_threshold(metric: str, t: float) -> float:
    """Threshold in partition space: ``acos(1 - t) / pi`` for cosine, ``t`` otherwise."""
    t = check_threshold(metric, t)
    if metric == "cosine":
        return math.acos(max(-1.0, 1.0 - t)) / math.pi
    return t


def _error_model(space: str, dim: int) -> tuple[float, float]:
    """(rel, abs): |computed - exact| <= rel * value + abs for a ``_dist`` value in ``space``.

    euclidean: each of the d squared differences and the running sum add at most a
    few ulps (relative), sqrt halves it: (d/2 + 3) u; we take 4 (d + 8) u, plus an
    absolute term covering underflow of tiny squares.
    angular: cos = dot / (|a||b|) is off by at most 2 (d + 8) u; acos is
    1/2-Hoelder near +-1 (acos(1 - e) ~ sqrt(2 e)), hence the sqrt; acos and /pi
    add a few ulps relative.
    """
    if space == "euclidean":
        return 4.0 * (dim + 8) * _U, 1e-150 * (math.sqrt(dim) + 1.0)
    eps_cos = 2.0 * (dim + 8) * _U
    return 8.0 * _U, 2.0 * math.sqrt(2.0 * eps_cos) / math.pi + 16.0 * _U


@dataclass(frozen=True)
class PartitionBounds:
    """Float-safe radii (in partition space) for Criterion 1, worksets and the shortcut.

    All radii compare against distances computed by ``_dist`` in ``space``
    (angular for cosine). ``E(x) = rel * x + abs`` bounds the rounding error of
    such a distance of magnitude x.

    tau: bound on the exact partition-space distance of any pair that the kernel
        declares a match (``t`` plus slack; for cosine ``acos(1 - t)/pi`` plus slack).
    inner_radius: records with computed distance <= this from their workset
        centroid are inner (Definition 8, nominally t/2); it is below t/2 by a
        margin so that two inner records of one workset are *provably* a strict
        match in the kernel (the inner x inner shortcut of Section 7.7).
        -inf disables inner sets (t too small for the float margin).
    new_centroid_radius: Criterion 2 - a new workset opens iff the computed
        distance to every centroid is > this (nominally t).
    outer_radius: outer-set bound of Definition 10 (nominally 2t), widened.
    """

    metric: str
    space: str
    t: float
    inclusive: bool
    dim: int
    rel: float
    abs: float
    tau: float
    inner_radius: float
    new_centroid_radius: float
    outer_radius: float

    def err(self, x: FloatArray | float) -> FloatArray | float:
        """Upper bound on the rounding error of a computed distance of magnitude x."""
        return self.rel * np.abs(x) + self.abs

    def outer_radius_for(self, member_radius: FloatArray | float) -> FloatArray:
        """Outer-set bound of a workset whose members lie within ``member_radius`` (computed).

        A member y with computed d^(y, c) <= m has exact d(y, c) <= m + E(m); a record x
        matching y (exact d(x, y) <= tau) has exact d(x, c) <= tau + m + E(m) = reach, so
        computed d^(x, c) <= reach + E(reach). Same derivation as ``outer_radius`` (which
        is this bound for m = new_centroid_radius), never larger than it; -inf for a
        workset without members (m = -inf).
        """
        m = np.asarray(member_radius, dtype=np.float64)
        reach = self.tau + m + self.err(np.where(np.isfinite(m), m, 0.0))
        r = reach + self.err(np.where(np.isfinite(reach), reach, 0.0)) + self.abs
        return np.minimum(np.where(np.isfinite(m), r, -np.inf), self.outer_radius)

    def criterion1(self, d_i: FloatArray, d_min: FloatArray) -> npt.NDArray[np.bool_]:
        """Criterion 1, ``d_i <= d_min + 2 t``, widened so that rounding never loses a pair.

        Proof sketch (exact d, computed d^): r home i, s home j, d(r, s) <= tau.
        d(s, c_i) <= d(s, r) + d(r, c_i) <= tau + d(r, c_j) + E <= 2 tau + d(s, c_j) + E',
        where d^(r, c_i) <= d^(r, c_j) because i is r's computed nearest centroid.
        """
        slack = 4.0 * self.rel * (np.abs(d_i) + np.abs(d_min) + 2.0 * self.tau) + 8.0 * self.abs
        return np.asarray(d_i <= d_min + 2.0 * self.tau + slack)


def partition_bounds(metric: str, t: float, dim: int, inclusive: bool = False) -> PartitionBounds:
    """Compute the float-safe partition bounds for ``metric``, threshold ``t``, dimension ``dim``."""
    t = check_threshold(metric, t)
    if dim < 1:
        raise ValueError(f"dimension must be >= 1, got {dim}")
    space = partition_metric(metric)
    rel, ab = _error_model(space, dim)

    def err(x: float) -> float:
        return rel * abs(x) + ab

    if metric == "cosine":
        # Error of a computed cosine distance: that of cos plus the subtraction.
        e_cos = 2.0 * (dim + 8) * _U + 4.0 * _U
        tau = math.acos(min(1.0, max(-1.0, 1.0 - t - 2.0 * e_cos))) / math.pi * (1 + 8 * _U) + 8 * _U
        # exact angle <= t_s  =>  exact cosine distance <= t - 2 e_cos  =>  computed < t.
        arg = 1.0 - t + 2.0 * e_cos
        t_short = -math.inf if arg >= 1.0 else math.acos(max(-1.0, arg)) / math.pi * (1 - 8 * _U) - 8 * _U
    else:
        tau = t + 2.0 * err(t)
        # exact d <= t_s  =>  computed d <= t_s + E(t_s) < t.
        t_short = t - 2.0 * err(t)
    if t_short > 0.0:
        # Two inner records: exact d(r, s) <= 2 (R_in + E(R_in)) <= t_short.
        inner = t_short / 2.0 - err(t_short) - ab
        inner_radius = inner if inner > 0.0 else -math.inf
    else:
        inner_radius = -math.inf
    new_radius = tau
    # A workset member (inner or outlier) lies within R_home (exact) of its centroid.
    r_home = new_radius + err(new_radius)
    reach = tau + r_home
    outer_radius = reach + err(reach) + ab
    return PartitionBounds(
        metric=metric,
        space=space,
        t=t,
        inclusive=bool(inclusive),
        dim=int(dim),
        rel=rel,
        abs=ab,
        tau=tau,
        inner_radius=inner_radius,
        new_centroid_radius=new_radius,
        outer_radius=outer_radius,
    )
