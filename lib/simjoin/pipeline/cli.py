"""One CLI registrar: a pipeline spec -> its ``simjoin <name>`` command (click).

Every config field becomes an option (``--threshold``, ``--id-col``...; a field's ``flag``
renames it): its type, choices and help come from the field, and its default stays None so that
``conf/<section>.yaml`` and ``SIMJOIN_<SECTION>_<KEY>`` apply. The values are validated by the
same ``load_config`` as the DAG's. A field whose ``flag`` is ``""`` selects a sub-command
(``simjoin generate vectors``). Batch pipelines get ``--run-id``, stream pipelines ``--reset`` and
``--follow [--trigger 5s]`` (:func:`simjoin.pipeline.runner.follow_pipeline`).

Every error - a bad flag, a bad input, an error raised inside Spark or a streaming micro-batch -
reaches the user as one line ``error: ...`` on stderr and exit code 2 (user error) or 1.
"""

from __future__ import annotations

import inspect
import sys
import time
from typing import Any

import click

from simjoin.pipeline.spec import PipelineSpec, resolve

__all__ = ["commands", "MASTER_HELP"]

MASTER_HELP = "Spark master (overrides SIMJOIN_SPARK_MASTER and conf/spark.yaml)."


def flag_of(f: Any) -> str:
    """The command-line flag of a config field: its ``flag``, else ``--`` and its name."""
    return str(f.metadata.get("flag") or "--" + f.name.replace("_", "-"))


def flags(spec: PipelineSpec) -> dict[str, str]:
    """Every config field's flag (a sub-command's selector has none): what errors name."""
    return {f.name: flag_of(f) for f in spec.fields() if f.metadata.get("flag") != ""}


def _essential_first(spec: PipelineSpec, fs: list[Any]) -> list[Any]:
    """The fields in the order a newcomer reads them: the tables and the required values, then
    the pipeline's own settings, then what it inherits (the stream timing options)."""
    own = set(inspect.get_annotations(spec.config))
    return sorted(fs, key=lambda f: 0 if f.metadata.get("io") or f.metadata.get("required") else
                  1 if f.name in own else 2)


def _options(spec: PipelineSpec, skip: str | None = None, choice: str | None = None) -> list[click.Parameter]:
    """The options of ``simjoin <name>`` (or of its sub-command ``choice``: only the fields that
    apply to it, with its own help and choices)."""
    opts: list[click.Parameter] = []
    for f in _essential_first(spec, spec.fields()):
        m = f.metadata
        if f.name == skip or m.get("flag") == "":
            continue
        by = (m.get("by_choice") or {}) if choice is not None else {}
        if by and choice not in by:
            continue
        mine = by.get(choice) or {}
        tp, _ = spec.field_type(f.name)
        flag = flag_of(f)
        default = f.default
        help_ = (mine.get("help") or m.get("help") or "") + (
            "" if m.get("required") or default is None else f" [default: {default}]")
        if tp is bool:
            opts.append(click.Option([f"{flag}/--no-{flag[2:]}", f.name], default=None, help=help_))
            continue
        choices = mine.get("choices") or m.get("choices")
        ctype: Any = click.Choice([str(c) for c in choices]) if choices else {
            int: click.INT, float: click.FLOAT, str: click.STRING}[tp]
        if m.get("multiple"):
            opts.append(click.Option([flag, f.name], type=ctype, multiple=True, help=help_ + " (repeatable)"))
            continue
        opts.append(click.Option([flag, f.name], type=ctype, default=None, required=bool(m.get("required")),
                                 help=help_))
    opts.append(click.Option(["--master"], default=None, help=MASTER_HELP))
    opts.append(click.Option(["--config", "config_file"], type=click.Path(dir_okay=False), default=None,
                             help=f"A YAML file like conf/{spec.config_section}.yaml: its values replace the defaults "
                                  "(flags still win)."))
    if spec.run_type == "batch":
        opts.append(click.Option(["--run-id", "run_id"], default="cli",
                                 help="Partition of every output table this run replaces."))
    if spec.run_type == "stream":
        opts.append(click.Option(["--reset"], is_flag=True, default=False,
                                 help="First remove the output with its state, work, stats, quarantine and "
                                      "checkpoint, then join every input again."))
        opts.append(click.Option(["--follow"], is_flag=True, default=False,
                                 help="Keep running: one streaming query joins and publishes each micro-batch as it "
                                      "arrives, on a warm JVM (Ctrl-C or SIGTERM stops it; a restart resumes)."))
        opts.append(click.Option(["--trigger"], default="5s", show_default=True,
                                 help="With --follow: how often the query looks for new rows (e.g. 1s, 500ms)."))
        opts.append(click.Option(["--maintain-every", "maintain_every"], type=click.INT, default=None,
                                 help="Compact, vacuum and clean up the output's tables after every N units "
                                      "(default: SIMJOIN_MAINTAIN_EVERY or 100; 0: never; see simjoin maintain)."))
    return opts


def _fail(msg: str, code: int = 2) -> None:
    click.echo(f"error: {msg}", err=True)
    raise SystemExit(code)


def _trigger(text: str | None) -> float:
    from simjoin.config import parse_duration

    try:
        secs = parse_duration(text or "5s")
    except ValueError as e:
        raise ValueError(f"--trigger: {e}") from None
    if secs <= 0:
        raise ValueError(f"--trigger {text!r}: allowed a duration > 0, e.g. 5s or 500ms")
    return secs


def execute(spec: PipelineSpec, values: dict[str, Any]) -> None:
    """Validate, run every stage in this process, print the summary line; errors -> one line."""
    from simjoin.config import ConfigError
    from simjoin.pipeline.runner import one_line, run_pipeline

    t0 = time.perf_counter()
    master = values.pop("master", None)
    run_id = values.pop("run_id", "cli")
    reset = bool(values.pop("reset", False))
    follow = bool(values.pop("follow", False))
    maintain_every = values.pop("maintain_every", None)
    trigger = values.pop("trigger", None)
    config_file = values.pop("config_file", None)
    for f in spec.fields():  # a repeatable flag: its values joined; none given: None (YAML/env apply)
        if f.metadata.get("multiple") and f.name in values:
            given = values[f.name]
            values[f.name] = "; ".join(given) if given else None
    try:
        run = spec.make_run(values, run_id=run_id, reset=reset, config_file=config_file)
        trigger_s = _trigger(trigger) if follow else 0.0
        if maintain_every is not None:
            if maintain_every < 0:
                raise ValueError(f"invalid --maintain-every {maintain_every}: allowed an integer >= 0 (0: never)")
            run.maintain_every = int(maintain_every)  # type: ignore[attr-defined]
    except ConfigError as e:
        _fail(e.for_cli(flags(spec)))
    except ValueError as e:
        _fail(str(e))
    try:
        from simjoin.config import SparkConfig, load_config
        from simjoin.spark.session import lazy_spark

        if any(st.gate for st in spec.stages):  # Great Expectations imports (seconds) while the JVM starts
            from simjoin.quality.gates import preload

            # a pipeline whose units may run in process: in a gate process, on the other core
            preload(process=bool(getattr(run, "IN_PROCESS", False)))
        spark = lazy_spark(load_config(SparkConfig, "spark", {"master": master}))
        if follow:
            from simjoin.pipeline.runner import follow_pipeline

            res = follow_pipeline(spark, run, trigger_s)  # type: ignore[possibly-undefined]
            f, first = res["follow"], spec.stages[0].name
            caught = sum(1 for r in res["catch_up"]["rounds"] if (r.get(first) or {}).get("unit") is not None)
            line = (f"{spec.name} follow: units published: {caught} on start, {len(res['units'])} followed "
                    f"({f.get('rows', 0)} rows read, {f.get('quarantined', 0)} quarantined); stopped -> "
                    f"{run.output}")  # type: ignore[possibly-undefined]
        else:
            results = run_pipeline(spark, run)  # type: ignore[possibly-undefined]
            line = resolve(spec.summary)(run, results) if spec.summary else f"{spec.name}: done"  # type: ignore
    except ConfigError as e:
        _fail(e.for_cli(flags(spec)))
    except (ValueError, FileNotFoundError) as e:
        _fail(one_line(e))
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except Exception as e:  # Spark, Delta, a streaming batch: one line, the log above has the rest
        from simjoin.log import get_logger

        get_logger("simjoin.cli").debug("command failed", exc_info=True)
        code = 2 if type(e).__name__ in ("GateFailed", "CheckpointMismatch", "AnalysisException") else 1
        _fail(one_line(e), code)
    sys.stderr.flush()
    click.echo(f"{line} in {time.perf_counter() - t0:.1f}s")  # type: ignore[possibly-undefined]
    sys.stdout.flush()


def commands(spec: PipelineSpec) -> click.Command:
    """The click command (or group of sub-commands) of one pipeline."""
    selector = next((f for f in spec.fields() if f.metadata.get("flag") == ""), None)
    name = spec.cli_name or spec.name
    if selector is None and spec.cli_commands:
        group = click.Group(name, help=spec.doc.split("\n\n")[0], no_args_is_help=True)
        group.add_command(click.Command("run", params=_options(spec), help=spec.doc.split("\n\n")[0],
                                        callback=lambda **kw: execute(spec, kw)))
        for cmd in resolve(spec.cli_commands)():
            group.add_command(cmd)
        return group
    if selector is None:
        return click.Command(name, params=_options(spec), help=spec.doc.split("\n\n")[0],
                             callback=lambda **kw: execute(spec, kw))
    group = click.Group(name, help=spec.doc.split("\n\n")[0], no_args_is_help=True)
    by = selector.metadata.get("by_choice") or {}
    for choice in selector.metadata["choices"]:
        def cb(_choice: str = choice, **kw: Any) -> None:
            execute(spec, {selector.name: _choice, **kw})

        text = (by.get(choice) or {}).get("help") or f"{spec.doc.split(chr(10))[0]} ({selector.name} {choice})."
        group.add_command(click.Command(str(choice), params=_options(spec, skip=selector.name, choice=str(choice)),
                                        help=text, short_help=text.split(":")[0], callback=cb))
    return group
