"""``simjoin.core.unique.unique``: ``np.unique``'s values by a sort (numpy 2.3+'s hashing path is
6-70x slower on integer arrays), and no ``np.unique(a)`` for plain distinct values left in lib/ or jobs/."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from simjoin.core.unique import unique

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("a", [
    np.array([], np.int64), np.array([3, 1, 3, 2, 1], np.int64), np.array([True, False, True]),
    np.array([0.5, -0.0, 0.0, 2.0, 0.5]), np.array([np.nan, 1.0, np.nan]), np.array([7], np.uint8),
    np.random.default_rng(3).integers(-5, 5, 1000).astype(np.int32), np.array(["b", "a", "b"]),
    np.array([[2, 1], [1, 2]]), [4, 4, 1],
])
def test_unique_equals_numpy(a):
    got, want = unique(a), np.unique(a)
    assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=want.dtype.kind == "f")


def _plain_calls(path: Path) -> list[int]:
    """Lines of ``np.unique(...)`` calls that ask for the values alone."""
    return [n.lineno for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and n.func.attr == "unique"
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "np"
            and not any(k.arg and (k.arg.startswith("return_") or k.arg == "axis") for k in n.keywords)]


def test_no_plain_np_unique_left():
    hits = [f"{p.relative_to(ROOT)}:{i}" for d in ("lib", "jobs") for p in (ROOT / d).rglob("*.py")
            if p != ROOT / "lib/simjoin/core/unique.py" for i in _plain_calls(p)]
    assert not hits, f"np.unique(a) hashes (slow on numpy 2.4): use simjoin.core.unique.unique at {hits}"
