"""Brute-force set-similarity join: the exact reference for ``ppjoin``.

Compares every pair of positions (Fier & Freytag, Sec. 1: the quadratic
baseline the filters avoid). The threshold test is done in exact rational
arithmetic, with θ read as its shortest decimal (``0.8`` means 4/5), so
pairs exactly at θ are included — the same convention the epsilon-rounded
bounds of :mod:`similarity` implement. Similarity values use
:func:`similarity.similarity`, i.e. the same float formula as the kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from .similarity import check_similarity, check_threshold, similarity

__all__ = ["brute_force_pairs", "passes_threshold"]


def passes_threshold(sim: str, theta: Fraction, overlap: int, len_x: int, len_y: int) -> bool:
    """Exact sim(x, y) >= θ from the overlap and the lengths."""
    if sim == "jaccard":  # o / (lx + ly - o) >= θ
        return overlap * (1 + theta) >= theta * (len_x + len_y)
    if sim == "cosine":  # o / sqrt(lx·ly) >= θ
        return overlap * overlap >= theta * theta * len_x * len_y
    if sim == "dice":  # 2o / (lx + ly) >= θ
        return 2 * overlap >= theta * (len_x + len_y)
    raise ValueError(check_similarity(sim))


def brute_force_pairs(
    sets: Sequence[Any],
    theta: float,
    sim: str = "jaccard",
    side: Sequence[int] | np.ndarray | None = None,
) -> set[tuple[int, int, float]]:
    """All (i, j, similarity) with i < j positions and sim >= θ.

    Empty sets never match. With ``side`` only pairs whose sides differ.
    """
    theta_f = check_threshold(theta)
    sim = check_similarity(sim)
    exact = Fraction(repr(theta_f))
    as_sets = [frozenset(int(t) for t in s) for s in sets]
    sides = None if side is None else [int(s) for s in side]
    out: set[tuple[int, int, float]] = set()
    for i, x in enumerate(as_sets):
        if not x:
            continue
        for j in range(i + 1, len(as_sets)):
            y = as_sets[j]
            if not y or (sides is not None and sides[i] == sides[j]):
                continue
            o = len(x & y)
            if o and passes_threshold(sim, exact, o, len(x), len(y)):
                out.add((i, j, similarity(sim, o, len(x), len(y))))
    return out
