"""The pipeline spec: one declarative object per pipeline (docs/architecture.md, "A pipeline is declared once").

A :class:`PipelineSpec` names the pipeline, its config dataclass (every parameter with its
default, bounds and cross-field rules, written once with :func:`simjoin.config.param`), its
run type and its ordered :class:`Stage` s. From it alone come the Airflow DAG
(:mod:`simjoin.pipeline.dags`), the CLI command (:mod:`simjoin.pipeline.cli`), the one task
entry and the in-process runner (:mod:`simjoin.pipeline.runner`).

Stage functions are named by dotted path (``"jobs.s3j.join:run"``) so that reading a spec -
which the CLI and the DAG processor do - imports neither Spark nor the stages.
"""

from __future__ import annotations

import importlib
import os
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from simjoin.config import ConfigError, field_type, fingerprint, load_config

__all__ = ["Stage", "PipelineSpec", "Run", "RunType", "resolve", "NothingNew", "TRIGGERS", "check_warehouse_only",
           "warehouse_only_enabled", "warehouse_root", "WAREHOUSE_ONLY_ENV"]

#: How a run was started: the CLI, or an Airflow DAG run's ``run_type``.
TRIGGERS = ("cli", "manual", "scheduled", "backfill", "asset_triggered")


class NothingNew(Exception):
    """Raised by a first stage when a scheduled run has no new input: the run is skipped."""

RunType = Literal["batch", "stream", "tool"]


def resolve(ref: str) -> Any:
    """``"package.module:attr"`` -> the object."""
    mod, _, attr = ref.partition(":")
    obj = importlib.import_module(mod)
    return getattr(obj, attr or "run")


@dataclass(frozen=True)
class Stage:
    """One retryable step: ``fn(ctx) -> dict`` (``ctx``: ``simjoin.pipeline.context.StageContext``)
    reads its inputs, calls the operators, writes its tables.

    ``reads``/``writes`` name the run's tables (keys of ``Run.tables``), ``outlets`` the tables
    announced as Airflow Assets when the stage succeeds. A ``gate`` checks data and writes
    nothing; a ``background`` gate may run beside the following stages in one process, but must
    pass before any ``publishes`` stage runs. ``per_unit``: a stream stage that works on the
    engine's open unit (all but ingest).
    """

    name: str
    fn: str
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    outlets: tuple[str, ...] = ()
    gate: bool = False
    background: bool = False
    publishes: bool = False
    doc: str = ""

    def function(self) -> Callable[[Any], dict[str, Any]]:
        return resolve(self.fn)  # type: ignore[no-any-return]


#: The Airflow task that runs every stage after the first, in one process, for a stream unit
#: small enough for the in-process executor (:attr:`PipelineSpec.unit_task`).
UNIT_TASK = "in_process"


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    config: type
    run_type: RunType
    stages: tuple[Stage, ...]
    doc: str
    section: str = ""
    #: The run object stages receive; a subclass of :class:`Run` with the pipeline's helpers.
    run_class: str = "simjoin.pipeline.spec:Run"
    #: ``fn(run, results) -> str``: the CLI's one-line summary.
    summary: str = ""
    #: ``"module:attr"`` -> ``fn(pdf, out, title) -> list[str]``: the pipeline's plots of its stats
    #: rows (PNGs in ``out``), what ``simjoin report`` draws (``jobs/<name>/report.py``); "": none.
    report: str = ""
    #: The same for the stats plots on a run's page (``simjoin report --output``); "": ``report``.
    report_run: str = ""
    #: The stats rows and column whose spread over workers is the pipeline's load balance on a run's
    #: page: (level or None for every row, load column, group column: one balance figure per group).
    balance: tuple[str | None, str, str] | None = None
    #: Tables (``Run.tables`` keys) -> expected column names, checked by the overwrite guard.
    output_columns: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Airflow: retries per task, a schedule (None, a cron string or "asset"), tags.
    retries: int = 2
    #: Airflow: each task's ``execution_timeout`` (a duration, e.g. "4h"); None: the default
    #: (``simjoin.pipeline.dags.TASK_TIMEOUT``). ``SIMJOIN_<NAME>_TASK_TIMEOUT`` overrides both.
    task_timeout: str | None = None
    schedule: str | None = None
    tags: tuple[str, ...] = ()
    #: The config field whose table the DAG's Asset schedule listens to.
    trigger_input: str | None = None
    #: The CLI command path, e.g. ("generate",) for a sub-group; default: the name.
    cli_group: str | None = None
    cli_name: str | None = None
    #: ``"module:attr"`` -> extra click commands beside the run (``simjoin s2j query``); with them
    #: the pipeline's command becomes a group whose ``run`` sub-command runs the pipeline.
    cli_commands: str | None = None
    #: Extra CLI-only flags the runner understands: "reset" for stream pipelines.
    cli_extras: tuple[str, ...] = ()
    max_active_runs: int = 1
    #: ``"module:attr"`` -> ``fn(output, tables) -> dict`` (``tables``: the paths of the output's Delta
    #: tables): drops what the pipeline's retention rule lets go (ssj: the runs beyond the last K; S3J:
    #: unused centroids), called by maintenance before it compacts and vacuums, never while a unit is open
    retain: str = ""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.name):
            raise ValueError(f"invalid pipeline name {self.name!r}: allowed lower-case letters, digits and _")
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names) or not names:
            raise ValueError(f"pipeline {self.name}: stage names must be unique and non-empty, got {names}")
        if UNIT_TASK in names:
            raise ValueError(f"pipeline {self.name}: {UNIT_TASK!r} is the platform task name: not allowed for a stage")
        if self.run_type not in ("batch", "stream", "tool"):
            raise ValueError(f"pipeline {self.name}: invalid run_type {self.run_type!r}: allowed batch, stream, tool")

    @property
    def unit_task(self) -> bool:
        """Whether the DAG has the :data:`UNIT_TASK` branch: a stream pipeline whose units may run
        on the in-process executor (``StreamRun.IN_PROCESS``). Its first task then hands a unit
        small enough for that executor to one task that runs every later stage in its process, as
        the CLI does (one task process instead of one per stage); a larger unit takes the stages."""
        return self.run_type == "stream" and bool(getattr(resolve(self.run_class), "IN_PROCESS", False))

    @property
    def config_section(self) -> str:
        return self.section or self.name

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise ValueError(f"invalid stage {name!r} of pipeline {self.name}: allowed "
                         f"{', '.join(s.name for s in self.stages)}")

    def fields(self) -> list[Any]:
        return [f for f in fields(self.config) if f.metadata]

    def field_type(self, name: str) -> tuple[type, bool]:
        return field_type(self.config, name)  # type: ignore[no-any-return]

    def load(self, values: dict[str, Any] | None = None, config_file: str | None = None) -> Any:
        """The validated config: defaults < conf/<section>.yaml (or ``config_file``) < env <
        ``values`` (Nones ignored). The one validation path of the CLI, the DAG and YAML."""
        known = {f.name for f in fields(self.config)}
        vals = {k: v for k, v in (values or {}).items() if k in known}
        if config_file is not None and not os.path.isfile(config_file):
            raise ConfigError("--config", config_file, "a readable YAML file")
        return load_config(self.config, self.config_section, vals, path=config_file)

    def make_run(self, values: dict[str, Any] | None = None, run_id: str = "cli", config_file: str | None = None,
                 **extra: Any) -> Run:
        cfg = self.load(values, config_file)
        cls = resolve(self.run_class)
        return cls(self, cfg, run_id=sanitize_run_id(run_id), **extra)  # type: ignore[no-any-return]


WAREHOUSE_ONLY_ENV = "SIMJOIN_WAREHOUSE_ONLY"


def warehouse_only_enabled(asked: bool | None = None, default: bool = False) -> bool:
    """Whether a run's tables must stay in the warehouse: ``asked`` if given, else
    ``SIMJOIN_WAREHOUSE_ONLY`` (1/true/yes/on or 0/false/no/off) if set, else ``default`` (on for
    DAG runs, off for the CLI)."""
    if asked is not None:
        return asked
    raw = os.environ.get(WAREHOUSE_ONLY_ENV)
    if raw is None or not raw.strip():
        return default
    v = raw.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise ConfigError(WAREHOUSE_ONLY_ENV, raw, "1 (tables only under SIMJOIN_WAREHOUSE) or 0")


def warehouse_root() -> str:
    """The warehouse folder the confinement checks against: ``SIMJOIN_WAREHOUSE`` or ./warehouse."""
    return os.path.abspath(os.environ.get("SIMJOIN_WAREHOUSE") or "warehouse")


def _real(path: str) -> tuple[str, str]:
    """(scheme, resolved path): symlinks and ``..`` resolved for local paths (``file://`` too)."""
    scheme, sep, rest = path.partition("://")
    if sep and scheme != "file":
        return scheme, posixpath.normpath("/" + rest.lstrip("/"))
    local = rest if sep else path
    return "", os.path.realpath(os.path.normpath(os.path.abspath(os.path.expanduser(local))))


def _inside(path: str, root: str) -> bool:
    (ps, p), (rs, r) = _real(path), _real(root)
    return ps == rs and p != r and p.startswith(r.rstrip("/") + "/")


def check_warehouse_only(run: Run) -> None:
    """Refuse (ConfigError naming the field) a table path of ``run`` - an input, the output, or a
    table derived from the output (``<output>_stats``...) - that does not resolve inside the
    warehouse: what ``SIMJOIN_WAREHOUSE_ONLY=1`` (on by default for DAG runs) asks."""
    wh = warehouse_root()
    section = run.spec.config_section
    allowed = f"a path under {wh} (SIMJOIN_WAREHOUSE_ONLY=1)"
    io = [f.name for f in run.spec.fields() if f.metadata.get("io") and getattr(run.cfg, f.name)]
    for name in io:
        path = str(getattr(run.cfg, name))
        if not _inside(path, wh):
            real = _real(path)[1]
            why = "" if real == os.path.normpath(os.path.abspath(path)) else f"; it resolves to {real}"
            raise ConfigError(f"{section}.{name}", path, allowed + why)
    out_field = next((n for n in ("output", "out") if n in io), io[-1] if io else "output")
    for key, path in run.table_paths().items():
        if not _inside(str(path), wh):
            raise ConfigError(f"{section}.{out_field}", getattr(run.cfg, out_field, None),
                              f"{allowed}, with every table of the run: its {key} table {path} is not")


def sanitize_run_id(run_id: str) -> str:
    """An Airflow run id (``manual__2026-01-01T00:00:00+00:00``) as a partition value."""
    return re.sub(r"[^A-Za-z0-9_.:+\-]", "_", str(run_id))


@dataclass
class Run:
    """One run of a pipeline: its spec, validated config and run id, plus the DataFrames stages
    hand each other when they run in one process (``frames``; empty in Airflow tasks, where each
    stage reads its inputs from Delta)."""

    spec: PipelineSpec
    cfg: Any
    run_id: str = "cli"
    reset: bool = False
    frames: dict[str, Any] = field(default_factory=dict)
    #: Every stage of the run runs in this process, in order (the CLI's runner): stages may hand
    #: DataFrames over in memory instead of through work tables (``OpenUnit.write_work``).
    in_process: bool = False
    #: Follow mode (``simjoin.pipeline.runner.Follow``) while a stream's ingest follows its input.
    follow: Any = None
    #: How the run was started (:data:`TRIGGERS`), and for an Airflow run the end of its data
    #: interval: batch inputs are read as of then (``simjoin.spark.pins``).
    trigger: str = "cli"
    as_of: Any = None
    #: Confine every table of the run to the warehouse (:func:`check_warehouse_only`). None: as
    #: ``SIMJOIN_WAREHOUSE_ONLY`` says, else on for a run Airflow started (any trigger but ``cli``).
    warehouse_only: bool | None = None

    def __post_init__(self) -> None:
        for f in self.spec.fields():
            if f.metadata.get("required") and not getattr(self.cfg, f.name):
                what = "a Delta table path" if f.metadata.get("io") else "a value"
                raise ConfigError(f"{self.spec.config_section}.{f.name}", getattr(self.cfg, f.name),
                                  f"{what} (required)")
        if warehouse_only_enabled(self.warehouse_only, default=self.trigger != "cli"):
            check_warehouse_only(self)

    @property
    def pipeline(self) -> str:
        return self.spec.name

    @property
    def output(self) -> str:
        """The output table (pipelines whose config has an ``output`` field)."""
        return str(self.cfg.output)

    @property
    def right(self) -> str | None:
        """The right input of a two-input join, or None (self-join)."""
        return getattr(self.cfg, "right", None)

    def fingerprint(self, extra: str = "") -> str:
        return fingerprint(self.cfg, extra)

    def context(self, spark: Any, stage: Stage) -> Any:
        """What ``stage``'s function is called with (``simjoin.pipeline.context.StageContext``);
        None: it has nothing to work on (a stream's per-unit stage with no unit open)."""
        from simjoin.pipeline.context import StageContext

        return StageContext(self, spark)

    def keep(self, name: str, df: Any) -> Any:
        """Hand a DataFrame to later stages of this process; returns it."""
        self.frames[name] = df
        return df

    def frame(self, name: str, load: Callable[[], Any]) -> Any:
        """The DataFrame an earlier stage of this process kept, else ``load()`` (read from Delta)."""
        if name in self.frames:
            return self.frames[name]
        return load()

    @property
    def tables(self) -> Any:
        """Pipeline subclasses map table keys to paths."""
        return {}

    @classmethod
    def tables_at(cls, output: str) -> Any:
        """The tables a run of this pipeline writing ``output`` names (``stats``, ``quarantine``...),
        from the output path alone (``simjoin report`` knows no more of a run); None: no such layout."""
        return None

    def table_paths(self) -> dict[str, str]:
        t = self.tables
        return dict(t) if isinstance(t, dict) else dict(t.paths())

    def output_columns(self) -> dict[str, tuple[str, ...]]:
        """Tables -> the columns this run writes there (the overwrite guard checks them)."""
        return dict(self.spec.output_columns)

    def inputs(self) -> list[str]:
        """Input table paths (never to be overwritten)."""
        return [getattr(self.cfg, f.name) for f in self.spec.fields()
                if f.metadata.get("io") and getattr(self.cfg, f.name) and f.name not in ("output", "out")]
