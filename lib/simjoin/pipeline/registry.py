"""Where pipeline specs are found: every ``jobs/<name>/spec.py`` with a ``SPEC``, plus specs
registered at run time (tests build toy pipelines this way)."""

from __future__ import annotations

import importlib
import pkgutil

from simjoin.pipeline.spec import PipelineSpec

__all__ = ["specs", "get_spec", "register"]

_extra: dict[str, PipelineSpec] = {}
_found: dict[str, PipelineSpec] | None = None


def _discover() -> dict[str, PipelineSpec]:
    global _found
    if _found is None:
        found: dict[str, PipelineSpec] = {}
        import jobs

        for m in sorted(pkgutil.iter_modules(jobs.__path__), key=lambda m: m.name):
            if not m.ispkg:
                continue
            try:
                mod = importlib.import_module(f"jobs.{m.name}.spec")
            except ModuleNotFoundError as e:
                if e.name != f"jobs.{m.name}.spec":
                    raise
                continue
            spec = getattr(mod, "SPEC", None)
            if isinstance(spec, PipelineSpec):
                found[spec.name] = spec
        _found = found
    return _found


def register(spec: PipelineSpec) -> PipelineSpec:
    _extra[spec.name] = spec
    return spec


def specs() -> dict[str, PipelineSpec]:
    return {**_discover(), **_extra}


def get_spec(name: str) -> PipelineSpec:
    all_ = specs()
    if name not in all_:
        raise ValueError(f"unknown pipeline {name!r}: allowed {', '.join(sorted(all_))}")
    return all_[name]
