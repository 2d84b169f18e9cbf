"""The ``simjoin`` command. Every command prints a one-line summary as its last line.

The CLI is an entry point like the DAGs: it parses flags into typed configs and calls the
stages in ``jobs/``.
"""

from __future__ import annotations

import sys
import time
from enum import Enum
from typing import Any

import typer

from simjoin.config import ConfigError, GenerateConfig, SparkConfig, load_config
from simjoin.log import get_logger

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Exact similarity, inequality and skew-resilient joins on Spark + Delta Lake.")
gen_app = typer.Typer(no_args_is_help=True, help="Write synthetic input tables to Delta.")
app.add_typer(gen_app, name="generate")

log = get_logger("simjoin.cli")


class VecDist(str, Enum):
    uniform = "uniform"
    gaussian = "gaussian"
    skewed = "skewed"
    pareto = "pareto"
    clustered = "clustered"


class IneqDist(str, Enum):
    uniform = "uniform"
    pareto = "pareto"


def _spark(master: str | None = None, warehouse: str | None = None) -> Any:
    from simjoin.spark.session import get_spark

    return get_spark(load_config(SparkConfig, "spark", {"master": master, "warehouse": warehouse}))


def _summary(text: str) -> None:
    sys.stderr.flush()
    typer.echo(text)
    sys.stdout.flush()


def _fail(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


MASTER = typer.Option(None, "--master", help="Spark master (overrides SIMJOIN_SPARK_MASTER and conf/spark.yaml).")


def _generate(kind: str, out: str, overrides: dict[str, Any], master: str | None) -> None:
    from jobs import generate

    t0 = time.perf_counter()
    try:
        cfg = load_config(GenerateConfig, "generate", overrides)
    except ConfigError as e:
        _fail(str(e))
    res = generate.run(_spark(master), kind, out, cfg)  # type: ignore[possibly-undefined]
    _summary(f"generate {kind}: wrote {res.rows} rows to {res.path} (Delta version {res.version}) "
             f"in {time.perf_counter() - t0:.1f}s")


@gen_app.command("sets")
def generate_sets(
    out: str = typer.Option(..., "--out", help="Delta table path to (over)write."),
    rows: int = typer.Option(10000, "--rows", min=0, help="Number of records."),
    seed: int = typer.Option(42, "--seed", help="Random seed (same seed, same table)."),
    master: str | None = MASTER,
) -> None:
    """Token sets `id long, text string`: Zipf tokens with planted near-duplicate clusters."""
    _generate("sets", out, {"rows": rows, "seed": seed}, master)


@gen_app.command("vectors")
def generate_vectors(
    out: str = typer.Option(..., "--out"),
    rows: int = typer.Option(10000, "--rows", min=0),
    dim: int = typer.Option(8, "--dim", min=1, help="Vector dimension."),
    dist: VecDist = typer.Option(VecDist.uniform, "--dist"),
    rate: float = typer.Option(100.0, "--rate", min=1e-9, help="Rows per second of `ts`."),
    seed: int = typer.Option(42, "--seed"),
    master: str | None = MASTER,
) -> None:
    """Vectors `id long, ts timestamp, vector array<double>`; `ts` advances at RATE rows/s."""
    _generate("vectors", out, {"rows": rows, "dim": dim, "dist": dist.value, "rate": rate, "seed": seed}, master)


@gen_app.command("ineq")
def generate_ineq(
    out: str = typer.Option(..., "--out"),
    rows: int = typer.Option(10000, "--rows", min=0),
    dist: IneqDist = typer.Option(IneqDist.uniform, "--dist"),
    rate: float = typer.Option(100.0, "--rate", min=1e-9),
    seed: int = typer.Option(42, "--seed"),
    master: str | None = MASTER,
) -> None:
    """Inequality-join input `id long, ts timestamp, a double, b double`."""
    _generate("ineq", out, {"rows": rows, "dist": dist.value, "rate": rate, "seed": seed}, master)


@gen_app.command("keys")
def generate_keys(
    out: str = typer.Option(..., "--out"),
    rows: int = typer.Option(10000, "--rows", min=0),
    alpha: float = typer.Option(1.2, "--alpha", min=1e-9, help="Zipf exponent of the key distribution."),
    domain: int = typer.Option(1000, "--domain", min=1, help="Number of distinct keys K."),
    rate: float = typer.Option(100.0, "--rate", min=1e-9),
    seed: int = typer.Option(42, "--seed"),
    master: str | None = MASTER,
) -> None:
    """Equi-join input `id long, ts timestamp, k long, payload string` with Zipf(alpha) keys."""
    _generate("keys", out, {"rows": rows, "alpha": alpha, "domain": domain, "rate": rate, "seed": seed}, master)


@app.command("show")
def show(
    path: str = typer.Argument(..., help="Delta table path or name."),
    limit: int = typer.Option(20, "--limit", min=0),
    version: int | None = typer.Option(None, "--version", min=0, help="Time travel to this version."),
    master: str | None = MASTER,
) -> None:
    """Print the first rows of a Delta table (optionally at a version)."""
    from simjoin.spark import delta

    spark = _spark(master)
    try:
        df = delta.read_table(spark, path, version=version)
    except FileNotFoundError as e:
        _fail(str(e))
    n = df.count()  # type: ignore[possibly-undefined]
    df.show(limit, truncate=80)  # type: ignore[possibly-undefined]
    v = version if version is not None else delta.latest_version(spark, path)
    _summary(f"show {path}: {n} rows at version {v}, columns {', '.join(df.columns)}")  # type: ignore


@app.command("history")
def history(path: str = typer.Argument(...), master: str | None = MASTER) -> None:
    """Print a Delta table's commit history."""
    from simjoin.spark import delta

    spark = _spark(master)
    try:
        h = delta.history(spark, path).select("version", "timestamp", "operation", "operationParameters")
    except FileNotFoundError as e:
        _fail(str(e))
    rows = h.orderBy("version").collect()  # type: ignore[possibly-undefined]
    for r in rows:
        typer.echo(f"v{r['version']:<4} {r['timestamp']}  {r['operation']:<12} {dict(r['operationParameters'] or {})}")
    _summary(f"history {path}: {len(rows)} versions, latest {rows[-1]['version'] if rows else '-'}")


def _register_pipelines() -> None:
    # Pipelines register their commands from their own modules to keep this file small.
    from simjoin import cli_pipelines  # noqa: F401


def main() -> None:
    _register_pipelines()
    code: Any = 0
    try:
        app()
    except ConfigError as e:
        typer.echo(f"error: {e}", err=True)
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

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
