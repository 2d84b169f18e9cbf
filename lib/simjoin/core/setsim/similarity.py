"""Set-similarity functions and the integer bounds the filters derive from them.

Fier & Freytag, *Scaling Up Set Similarity Joins Using a Cost-Based
Distributed-Parallel Framework*, Sec. 2.1 and Table 1: the length interval
of a similar partner, the prefix length P(l) and the required overlap. The
paper states them for Jaccard; cosine and Dice follow the usual
filter-and-verification literature (Mann et al., PVLDB 2016).

Every bound is an integer. It is computed in float64 and then rounded toward
the permissive side with an epsilon of 1e-8 (as in the authors' C++ code), so
that e.g. ``0.7 * 10 == 7.000000000000001`` gives ``ceil -> 7``, not 8. The
consequence is that pairs whose similarity is *exactly* θ (θ read as its
shortest decimal, 0.8 means 4/5) are always included.

All vectorized ``*_array`` functions accept integer arrays of lengths; the
scalar functions are thin wrappers returning Python ``int``/``float``.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "EPS",
    "SIMILARITIES",
    "check_similarity",
    "check_threshold",
    "index_prefix",
    "index_prefix_array",
    "max_length",
    "max_length_array",
    "min_length",
    "min_length_array",
    "min_overlap",
    "min_overlap_array",
    "probe_prefix",
    "probe_prefix_array",
    "similarity",
]

SIMILARITIES: tuple[str, ...] = ("jaccard", "cosine", "dice")

# Tolerance of the float bounds; 1e-8 as in dist-ssj (Fier & Freytag) and the
# Mann et al. reference implementations.
EPS: float = 1e-8

IntArray = npt.NDArray[np.int64]


def check_threshold(threshold: Any) -> float:
    """Return ``threshold`` as a float, or raise ValueError if not in (0, 1]."""
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
        raise ValueError(
            f"similarity threshold must be a number, got {threshold!r}; allowed: 0 < threshold <= 1"
        )
    value = float(threshold)
    if not 0.0 < value <= 1.0:  # also rejects NaN
        raise ValueError(f"similarity threshold {threshold!r} is out of range; allowed: 0 < threshold <= 1")
    return value


def check_similarity(name: Any) -> str:
    """Return ``name`` if it is one of SIMILARITIES, else raise ValueError."""
    if not isinstance(name, str) or name not in SIMILARITIES:
        raise ValueError(f"unknown similarity function {name!r}; allowed: {', '.join(SIMILARITIES)}")
    return name


def _ceil(values: npt.NDArray[np.float64]) -> IntArray:
    return np.ceil(values - EPS).astype(np.int64)


def _floor(values: npt.NDArray[np.float64]) -> IntArray:
    return np.floor(values + EPS).astype(np.int64)


def _as_float(lengths: npt.ArrayLike) -> npt.NDArray[np.float64]:
    return np.asarray(lengths, dtype=np.int64).astype(np.float64)


def min_overlap_array(sim: str, theta: float, len_x: npt.ArrayLike, len_y: npt.ArrayLike) -> IntArray:
    """Overlap α that |x ∩ y| must reach for sim(x, y) >= θ (the position filter's α).

    jaccard ceil(θ(|x|+|y|)/(1+θ)), cosine ceil(θ·sqrt(|x||y|)),
    dice ceil(θ(|x|+|y|)/2). The float expressions are the same, operation
    for operation, as in the numba kernel of ``ppjoin``.
    """
    lx, ly = _as_float(len_x), _as_float(len_y)
    if sim == "jaccard":
        return _ceil(theta * (lx + ly) / (1.0 + theta))
    if sim == "cosine":
        return _ceil(theta * np.sqrt(lx * ly))
    if sim == "dice":
        return _ceil(theta * (lx + ly) / 2.0)
    raise ValueError(check_similarity(sim))


def min_length_array(sim: str, theta: float, lengths: npt.ArrayLike) -> IntArray:
    """Smallest length of a possible partner (the lower end of the length filter)."""
    ls = _as_float(lengths)
    if sim == "jaccard":
        return _ceil(theta * ls)
    if sim == "cosine":
        return _ceil(theta * theta * ls)
    if sim == "dice":
        return _ceil(theta * ls / (2.0 - theta))
    raise ValueError(check_similarity(sim))


def max_length_array(sim: str, theta: float, lengths: npt.ArrayLike) -> IntArray:
    """Largest length of a possible partner; for Jaccard the paper's floor(l/θ)."""
    ls = _as_float(lengths)
    if sim == "jaccard":
        return _floor(ls / theta)
    if sim == "cosine":
        return _floor(ls / (theta * theta))
    if sim == "dice":
        return _floor((2.0 - theta) * ls / theta)
    raise ValueError(check_similarity(sim))


def probe_prefix_array(sim: str, theta: float, lengths: npt.ArrayLike) -> IntArray:
    """The paper's P(l) = l - minlen(l) + 1, clipped to [0, l]."""
    ls = np.asarray(lengths, dtype=np.int64)
    out: IntArray = np.clip(ls - min_length_array(sim, theta, ls) + 1, 0, ls)
    return out


def index_prefix_array(sim: str, theta: float, lengths: npt.ArrayLike) -> IntArray:
    """The shorter prefix an *index* record needs when every probe partner is
    at least as long (records are processed in length order): l - α(l, l) + 1.

    jaccard l - ceil(2θl/(1+θ)) + 1; cosine and dice l - ceil(θl) + 1.
    """
    ls = np.asarray(lengths, dtype=np.int64)
    out: IntArray = np.clip(ls - min_overlap_array(sim, theta, ls, ls) + 1, 0, ls)
    return out


def min_overlap(sim: str, theta: float, len_x: int, len_y: int) -> int:
    """Scalar :func:`min_overlap_array`."""
    return int(min_overlap_array(sim, theta, len_x, len_y))


def min_length(sim: str, theta: float, l: int) -> int:
    """Scalar :func:`min_length_array`."""
    return int(min_length_array(sim, theta, l))


def max_length(sim: str, theta: float, l: int) -> int:
    """Scalar :func:`max_length_array`."""
    return int(max_length_array(sim, theta, l))


def probe_prefix(sim: str, theta: float, l: int) -> int:
    """Scalar :func:`probe_prefix_array` (the paper's P(l))."""
    return int(probe_prefix_array(sim, theta, l))


def index_prefix(sim: str, theta: float, l: int) -> int:
    """Scalar :func:`index_prefix_array`."""
    return int(index_prefix_array(sim, theta, l))


def similarity(sim: str, overlap: int, len_x: int, len_y: int) -> float:
    """Similarity of two sets from their overlap and lengths (0.0 if one is empty)."""
    if len_x <= 0 or len_y <= 0:
        return 0.0
    if sim == "jaccard":
        return overlap / (len_x + len_y - overlap)
    if sim == "cosine":
        return overlap / math.sqrt(float(len_x) * float(len_y))
    if sim == "dice":
        return 2.0 * overlap / (len_x + len_y)
    raise ValueError(check_similarity(sim))
