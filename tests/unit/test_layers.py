"""The layers of docs/architecture.md, on the real import graph (grimp, as ``make lint``'s
lint-imports builds it): following a parameter from the command line to its kernel walks down the
layers and never climbs back (issue 58). Here: ``--window`` of ineq."""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _layers() -> list[str]:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return next(c for c in conf if c["id"] == "one-way")["layers"]


def _layer(module: str, layers: list[str]) -> int:
    for i, name in enumerate(layers):
        if module == name or module.startswith(name + "."):
            return i
    raise AssertionError(f"{module} is in no layer of pyproject.toml's contract: {layers}")


@pytest.fixture(scope="module")
def graph():  # type: ignore[no-untyped-def]
    return grimp.build_graph("simjoin", "jobs", cache_dir=None)


# Where ineq's window goes: the flag's config field, the run's parameters (``Window``), the stages
# that probe, merge and expire by it, the operator's task function, the kernels.
WINDOW_WALK = ["jobs.ineq.config", "jobs.ineq.common", "jobs.ineq.probe", "jobs.ineq.merge", "jobs.ineq.publish",
               "simjoin.operators.inequality", "simjoin.core.inequality.spo", "simjoin.core.inequality.kernels"]


def test_following_the_window_of_ineq_climbs_no_layer_back(graph):  # type: ignore[no-untyped-def]
    layers = _layers()
    for importer in WINDOW_WALK:
        for imported in WINDOW_WALK:
            if importer == imported:
                continue
            chain = graph.find_shortest_chain(importer=importer, imported=imported)
            if chain is None:
                continue
            ranks = [_layer(m, layers) for m in chain]
            assert ranks == sorted(ranks), f"{' -> '.join(chain)} climbs back up a layer: {ranks}"
    # and the walk reaches the kernel from the stage that probes, through the operator
    assert graph.direct_import_exists(importer="jobs.ineq.probe", imported="simjoin.operators.inequality")
    assert graph.find_shortest_chain(importer="simjoin.operators.inequality",
                                     imported="simjoin.core.inequality.kernels") is not None


def test_only_the_spark_package_imports_pyspark(graph):  # type: ignore[no-untyped-def]
    """The same rule as lint-imports' contract, listed: no module outside ``simjoin.spark`` imports
    pyspark itself (``jobs`` and the other layers reach Spark through the Spark executor)."""
    g = grimp.build_graph("simjoin", "jobs", include_external_packages=True, cache_dir=None)
    outside = sorted(m for m in g.find_modules_that_directly_import("pyspark") if not m.startswith("simjoin.spark"))
    assert outside == [], outside


STREAMS = ("ineq", "s3j", "hypercube", "s2j")


def test_stream_stages_are_called_with_a_context_and_never_reach_spark_or_the_engine(graph):  # type: ignore[no-untyped-def]
    """The runtime calls the operator (issue 58, point 2): every stage of every pipeline is
    ``run(ctx)``; no module of a stream pipeline imports ``simjoin.spark`` (directly or not, except
    through the runtime's context, which the stage only receives), opens a unit, names the engine
    or writes its work tables (it returns them)."""
    import inspect
    import re

    from simjoin.pipeline import get_spec

    for name in (*STREAMS, "ssj", "generate"):
        for st in get_spec(name).stages:
            params = list(inspect.signature(st.function()).parameters)
            assert params == ["ctx"], f"{name}.{st.name}: {st.fn} takes {params}, expected (ctx)"
    for name in STREAMS:
        for path in sorted((ROOT / "jobs" / name).glob("*.py")):
            module = f"jobs.{name}" if path.stem == "__init__" else f"jobs.{name}.{path.stem}"
            direct = {m for m in graph.find_modules_directly_imported_by(module) if m.startswith("simjoin.spark")}
            assert not direct, f"{module} imports {sorted(direct)}"
            code = re.sub(r'"""[\s\S]*?"""', "", path.read_text())  # docstrings may name them
            # a stage returns the tables it hands on (``work``); the runtime writes them
            for word in ("open_unit(", "u.engine", ".engine(", "(spark", "write_work("):
                assert word not in code, f"{path.relative_to(ROOT)} uses {word!r}"
