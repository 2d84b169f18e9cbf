"""The ``simjoin`` command. Every command prints a one-line summary as its last line.

The pipeline commands (``simjoin ssj``, ``simjoin s3j``, ``simjoin generate <kind>``...) are
built from the pipeline specs by :mod:`simjoin.pipeline.cli`; this module adds the tools
(``show``, ``history``, ``report``, ``cache-jvm``) and maps every error to one line.
``python -m simjoin`` is the same command.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

import click

from simjoin.config import ConfigError, SparkConfig, load_config
from simjoin.log import get_logger
from simjoin.pipeline.cli import MASTER_HELP

log = get_logger("simjoin.cli")


class OneLineErrors(click.Group):
    """The ``simjoin`` group: every error of every command - a bad flag (click's usage errors), a bad
    config value, a bad input - reaches the user as one line ``error: ...`` on stderr, exit code 2."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except click.exceptions.NoArgsIsHelpError as e:  # a bare group: its help
            e.show()
            raise SystemExit(e.exit_code) from None
        except click.ClickException as e:
            ctx = getattr(e, "ctx", None)
            hint = f" (try '{ctx.command_path} -h')" if ctx is not None else ""
            msg = " ".join(e.format_message().split())
            click.echo(f"error: {msg}{hint}", err=True)
            raise SystemExit(e.exit_code if e.exit_code else 2) from None
        except ConfigError as e:
            click.echo(f"error: {e}", err=True)
            raise SystemExit(2) from None
        except click.Abort:
            click.echo("error: aborted", err=True)
            raise SystemExit(1) from None
        raise SystemExit(rv if isinstance(rv, int) else 0)


@click.group(cls=OneLineErrors, no_args_is_help=True, context_settings={"help_option_names": ["-h", "--help"]})
def app() -> None:
    """Exact similarity, inequality and skew-resilient joins on Spark + Delta Lake."""


def _spark(master: str | None = None, warehouse: str | None = None) -> Any:
    from simjoin.spark.session import get_spark

    try:
        return get_spark(load_config(SparkConfig, "spark", {"master": master, "warehouse": warehouse}))
    except ValueError as e:  # e.g. the warm Spark refused this process
        _fail(str(e))


def _summary(text: str) -> None:
    sys.stderr.flush()
    click.echo(text)
    sys.stdout.flush()


def _fail(msg: str) -> NoReturn:
    click.echo(f"error: {msg}", err=True)
    raise SystemExit(2)


def master_option(f: Any) -> Any:
    return click.option("--master", default=None, help=MASTER_HELP)(f)


@app.command("show")
@click.argument("path")
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True)
@click.option("--version", type=click.IntRange(min=0), default=None, help="Time travel to this version.")
@master_option
def show(path: str, limit: int, version: int | None, master: str | None) -> None:
    """Print the first rows of a Delta table PATH (optionally at a version). A local table is read
    without Spark (deltalake); Spark reads a remote one, or one deltalake cannot read."""
    from simjoin import inspect_table

    load_config(SparkConfig, "spark", {"master": master})  # a bad --master is refused, read or not
    try:
        text, n, v, cols = inspect_table.show(path, limit, version)
    except inspect_table.Unreadable as e:
        log.info("show: deltalake cannot read %s (%s); Spark reads it", path, e)
    except (FileNotFoundError, ValueError) as e:
        _fail(str(e))
    else:
        click.echo(text)
        _summary(f"show {path}: {n} rows at version {v}, columns {', '.join(cols)}{_owned_by(path)}")
        return
    from simjoin.spark import delta

    spark = _spark(master)
    try:
        latest = delta.latest_version(spark, path)
        if version is not None and version > latest:
            _fail(f"invalid --version {version}: allowed 0..{latest} (the versions of {path})")
        df = delta.read_table(spark, path, version=version)
        n = df.count()
    except FileNotFoundError as e:
        _fail(str(e))
    except Exception as e:  # e.g. a version whose files a VACUUM removed
        from simjoin.pipeline.runner import one_line

        _fail(f"cannot read {path}" + (f" at version {version}" if version is not None else "") + f": {one_line(e)}")
    df.show(limit, truncate=80)  # type: ignore[possibly-undefined]
    v = version if version is not None else latest  # type: ignore[possibly-undefined]
    _summary(f"show {path}: {n} rows at version {v}, columns {', '.join(df.columns)}{_owned_by(path)}")  # type: ignore


@app.command("history")
@click.argument("path")
@master_option
def history(path: str, master: str | None) -> None:
    """Print a Delta table's commit history, each commit with its userMetadata (S2J's snapshot, a
    stream's unit). A local table is read without Spark (deltalake)."""
    from simjoin import inspect_table

    load_config(SparkConfig, "spark", {"master": master})  # a bad --master is refused, read or not
    try:
        rows = inspect_table.history(path)
    except inspect_table.Unreadable as e:
        log.info("history: deltalake cannot read %s (%s); Spark reads it", path, e)
        rows = _spark_history(path, master)
    except FileNotFoundError as e:
        _fail(str(e))
    for r in rows:
        meta = f"  userMetadata={r['userMetadata']}" if r["userMetadata"] else ""
        click.echo(f"v{r['version']:<4} {r['timestamp']}  {r['operation']:<12} {r['operationParameters']}{meta}")
    _summary(f"history {path}: {len(rows)} versions, latest {rows[-1]['version'] if rows else '-'}{_owned_by(path)}")


def _spark_history(path: str, master: str | None) -> list[dict[str, Any]]:
    from simjoin.spark import delta

    spark = _spark(master)
    try:
        h = delta.history(spark, path).select("version", "timestamp", "operation", "operationParameters",
                                              "userMetadata")
    except FileNotFoundError as e:
        _fail(str(e))
    return [{"version": r["version"], "timestamp": r["timestamp"], "operation": r["operation"],
             "operationParameters": dict(r["operationParameters"] or {}), "userMetadata": r["userMetadata"]}
            for r in h.orderBy("version").collect()]


def _owned_by(path: str) -> str:
    """``; the <role> of simjoin <pipeline>'s output <output>``, from the manifest that owns the
    table (``simjoin.runtime.manifest``); empty for a table no output owns."""
    from simjoin.runtime.manifest import find_for

    if "://" in path:
        return ""
    m = find_for(path)
    return "" if m is None else f"; the {m.role(path) or 'output'} table of simjoin {m.pipeline}'s output {m.output}"


@app.command("report")
@click.option("--output", "output", default=None,
              help="A pipeline's output table: one HTML page for one run of it (the latest, or --run-id) with its "
                   "key figures, stage durations, rows in/out/quarantined, load balance and window latency.")
@click.option("--stats", default=None, help="A stats Delta table: <output>_stats of a simjoin pipeline.")
@click.option("--out", default=None,
              help="Folder for the PNG plots and index.html (with --output default: <output>_report/<run>).")
@click.option("--timing", default=None,
              help="The task-timing table (default: <warehouse>/_simjoin/task_timing). With --stats, only its "
                   "pipelines' runs are shown.")
@click.option("--run-id", default=None, help="Only this run's task timing.")
@master_option
def report(output: str | None, stats: str | None, out: str | None, timing: str | None, run_id: str | None,
           master: str | None) -> None:
    """One page per run (--output), or plots of a stats table (slice costs and load per unit for
    ssj; load per worker and window latencies for s3j...) and the task timing of the runs."""
    from simjoin.pipeline.timing import timing_path
    from simjoin.report import render, render_run, render_task_timing

    if output is not None:
        if stats:
            _fail("--output and --stats: allowed one of them")
        try:
            page = render_run(output, out, run_id, timing)
        except (FileNotFoundError, ValueError) as e:
            _fail(str(e))
        _summary(f"report: {page}")  # type: ignore[possibly-undefined]
        return
    if out is None:
        _fail("--out is required with --stats or for task timing: allowed a folder for the plots (or --output)")

    files: list[str] = []
    pipelines = None
    if os.path.exists(out) and not os.path.isdir(out):
        _fail(f"--out {out} is a file: allowed a folder (new or existing) for the plots")
    if stats:
        try:
            pdf = _stats_pandas(stats, master)
            files = render(pdf, out, title=stats)
            if not files:
                _fail(f"--stats {stats} has no rows to plot: allowed the stats table of a run that processed data")
        except (FileNotFoundError, ValueError) as e:
            _fail(str(e))
        pipelines = set(pdf["pipeline"].dropna())  # type: ignore[possibly-undefined,index]
    path = timing or timing_path()
    n_timing = 0
    try:
        from deltalake import DeltaTable

        if DeltaTable.is_deltatable(path):
            tdf = DeltaTable(path).to_pandas()
            if pipelines is not None:
                tdf = tdf[tdf["pipeline"].isin(pipelines)]
            if run_id:
                tdf = tdf[tdf["run_id"] == run_id]
            if len(tdf):
                n_timing = len(render_task_timing(tdf, out, title=f"task timing: {path}", append=bool(stats)))
        elif timing or not stats:
            _fail(f"no task-timing table at {path}: allowed a table written by simjoin runs (or --stats)")
    except ValueError as e:
        _fail(str(e))
    _summary(f"report: {len(files)} stats plots and {n_timing} task-timing plots, index.html in {out}")


def _stats_pandas(stats: str, master: str | None) -> Any:
    """A stats table as pandas: a local one read with deltalake (no JVM), another by Spark."""
    from simjoin.inspect_table import local_table
    from simjoin.report import _delta_pandas

    local = local_table(stats)
    if local is not None:
        load_config(SparkConfig, "spark", {"master": master})  # a bad --master is refused, read or not
        pdf = _delta_pandas(local)
        if pdf is None:
            raise FileNotFoundError(f"no Delta table at {stats!r}")
        return pdf
    from simjoin.spark import delta

    return delta.read_table(_spark(master), stats).toPandas()


@app.command("maintain")
@click.option("--output", "output", required=True, help="A pipeline's output: every table it owns beside it.")
@click.option("--retention", default=None,
              help="How long removed files and log entries of the output, stats and quarantine stay for readers of "
                   "older versions and time travel (default: SIMJOIN_RETENTION or 7d; at least 1h).")
@click.option("--timing-retention", default=None,
              help="Task-timing rows older than this are deleted (default: SIMJOIN_TIMING_RETENTION or 30d).")
def maintain(output: str, retention: str | None, timing_retention: str | None) -> None:
    """Compact small files, vacuum, checkpoint and clean up the Delta log of every table a
    pipeline owns for OUTPUT (output, stats, quarantine, state, work, checkpoint), and the
    warehouse's task-timing table. Takes the output's lock: refused while a run writes it (a
    follow run maintains its tables itself, every --maintain-every units)."""
    from simjoin.pipeline.maintain import maintain as run_maintain
    from simjoin.pipeline.runner import one_line
    from simjoin.pipeline.timing import timing_path
    from simjoin.runtime import maintenance

    try:
        res = run_maintain(output, retention)
        timing = maintenance.maintain_timing(timing_path(), timing_retention, retention)
    except (ValueError, FileNotFoundError) as e:
        _fail(one_line(e))
    extra = f"; task timing {timing.files_after} files" if timing is not None else ""  # type: ignore
    _summary(res.summary() + extra)  # type: ignore[possibly-undefined]


@app.command("cache-jvm")
@click.option("--force", is_flag=True, default=False, help="Record again even if an archive exists.")
def cache_jvm(force: bool) -> None:
    """Record the JVM class-data archive that makes every later Spark start faster (once per install)."""
    from jobs.tools import jvm_cache

    try:
        path, recorded = jvm_cache.record(force)
    except RuntimeError as e:
        _fail(str(e))
    size = path.stat().st_size / 2**20  # type: ignore[possibly-undefined]
    _summary(f"cache-jvm: {'recorded' if recorded else 'up to date'}, {size:.0f} MiB archive at {path}")  # type: ignore


@app.command("spark-server")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Clients must present the token, but the channel is not "
                   "encrypted: keep it on loopback or a private network.")
@click.option("--port", type=click.IntRange(1, 65535), default=15002, show_default=True)
@master_option
@click.option("--warehouse", default=None, help="Warehouse folder (default: SIMJOIN_WAREHOUSE or ./warehouse).")
def spark_server(host: str, port: int, master: str | None, warehouse: str | None) -> None:
    """Keep one warm Spark (Delta, this Python) running and serve it over Spark Connect.

    Then ``SIMJOIN_SPARK_REMOTE=sc://HOST:PORT`` makes every simjoin command and Airflow task
    connect to it in well under a second instead of starting its own JVM. ``make airflow``
    starts one. Stops on Ctrl-C or SIGTERM.

    Every client must present a token: SPARK_CONNECT_AUTHENTICATE_TOKEN, in the environment of
    the server and of its clients. If it is unset, the server generates one and writes it to
    SIMJOIN_SPARK_TOKEN_FILE (default ~/.simjoin/spark-connect-PORT.token, mode 0600, removed on
    stop), where simjoin clients of the same user find it. The token (and SIMJOIN_SPARK_AUTH_SECRET,
    Spark's RPC secret) never appears on a command line or in a log."""
    from simjoin.spark.session import serve

    cfg = load_config(SparkConfig, "spark", {"master": master, "warehouse": warehouse})
    try:
        serve(host, port, cfg, ready=lambda url: click.echo(f"ready: SIMJOIN_SPARK_REMOTE={url}", err=True))
    except (ValueError, RuntimeError) as e:
        _fail(str(e))
    _summary(f"spark-server sc://{host}:{port}: stopped")


_registered = False


def cli_group() -> click.Group:
    """The whole ``simjoin`` command: the tools above plus one command per pipeline spec."""
    global _registered
    if not _registered:
        from simjoin.pipeline.cli import commands
        from simjoin.pipeline.registry import specs

        for spec in specs().values():
            app.add_command(commands(spec))
        _registered = True
    return app


def main() -> None:
    code: Any = 0
    try:
        cli_group()(standalone_mode=True)
    except ConfigError as e:
        click.echo(f"error: {e}", err=True)
        code = 2
    except SystemExit as e:
        code = e.code
    _exit_now(0 if code is None else code if isinstance(code, int) else 1)


def _exit_now(code: int) -> None:
    """Exit without stopping Spark from Python: every table is committed by now, and the driver
    JVM shuts itself down cleanly (its own hooks remove its temp files) when our pipe closes.
    This saves the second or so a SparkContext.stop() costs at the end of each command."""
    import logging
    import os

    memory = sys.modules.get("simjoin.memory")
    if memory is not None:  # exit handlers do not run: this process's memory reservations go now
        memory.release_all()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
