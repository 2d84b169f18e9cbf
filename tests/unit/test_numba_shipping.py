"""No function that Spark ships to its Python workers names a numba kernel directly.

Spark pickles a UDF with cloudpickle. A nested function (a closure passed to ``mapInArrow`` or
``applyInArrow``) travels by value, with the globals it names; a numba dispatcher among them is
rebuilt on the worker without its on-disk cache, so every worker compiles it again. That cost
ssj's encode 3 s per Python worker. A module-level function travels by reference and finds the
cached kernel. So a closure must call kernels through module-level functions.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil

from pyspark import cloudpickle

import jobs
import simjoin


def _modules() -> list[str]:
    names = []
    for pkg in (simjoin, jobs):
        for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if not m.name.endswith("__main__"):
                names.append(m.name)
    return names


def _kernels_named_in_closures(mod) -> list[str]:  # type: ignore[no-untyped-def]
    from numba.core.dispatcher import Dispatcher

    found = []

    def visit(node: ast.AST, depth: int) -> None:
        for ch in ast.iter_child_nodes(node):
            if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                if depth >= 1:
                    for n in ast.walk(ch):
                        if (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                                and isinstance(getattr(mod, n.id, None), Dispatcher)):
                            found.append(f"{mod.__name__} line {n.lineno}: {n.id}")
                visit(ch, depth + 1)
            else:
                visit(ch, depth)

    with open(mod.__file__) as f:
        visit(ast.parse(f.read()), 0)
    return found


def test_no_closure_names_a_numba_kernel():
    found = []
    for name in _modules():
        mod = importlib.import_module(name)
        if getattr(mod, "__file__", "").endswith(".py"):
            found += _kernels_named_in_closures(mod)
    assert not found, f"closures that would ship numba kernels by value (uncached): {found}"


def test_the_ssj_encode_task_ships_no_kernel():
    """What the rule prevents, seen by pickling the real task function: no dispatcher is pickled."""
    import functools

    import pyarrow as pa
    from numba.core import dispatcher

    from simjoin.operators import setsim_steps as steps

    fn = functools.partial(steps._encode_part, drops=None,
                           dictionary=pa.array([], pa.string()), rid_base={})
    shipped: list[str] = []
    orig = dispatcher.Dispatcher._reduce_states

    def spy(self):  # type: ignore[no-untyped-def]
        shipped.append(self.py_func.__qualname__)
        return orig(self)

    dispatcher.Dispatcher._reduce_states = spy
    try:
        cloudpickle.dumps(fn)
    finally:
        dispatcher.Dispatcher._reduce_states = orig
    assert shipped == []
