"""Pipelines declared once: the spec, and what is built from it (DAG factory, CLI registrar,
task entry, in-process runner). See ``simjoin.pipeline.spec``."""

from simjoin.pipeline.registry import get_spec, specs
from simjoin.pipeline.spec import PipelineSpec, Run, Stage

__all__ = ["PipelineSpec", "Stage", "Run", "get_spec", "specs"]
