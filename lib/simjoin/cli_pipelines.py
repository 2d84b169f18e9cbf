"""`simjoin <pipeline>` commands, registered on the main Typer app."""

from __future__ import annotations

from enum import Enum

import typer

from simjoin.cli import MASTER, _fail, _spark, _summary, app
from simjoin.config import ConfigError, SSJConfig, load_config


class Similarity(str, Enum):
    jaccard = "jaccard"
    cosine = "cosine"
    dice = "dice"


@app.command("ssj")
def ssj(
    input: str = typer.Option(..., "--input", help="Delta table with the records (left side)."),
    output: str = typer.Option(..., "--output", help="Delta table for the pairs; stage tables are written beside it."),
    threshold: float = typer.Option(..., "--threshold", help="Similarity threshold θ, 0 < θ <= 1."),
    right: str | None = typer.Option(None, "--right", help="Second input for an R-S join."),
    id_col: str = typer.Option("id", "--id-col"),
    text_col: str = typer.Option("text", "--text-col"),
    tokenizer: str = typer.Option("word", "--tokenizer", help="word | qgram:N"),
    similarity: Similarity = typer.Option(Similarity.jaccard, "--similarity"),
    workers: int | None = typer.Option(None, "--workers", min=1, help="Nodes n (default: the optimizer's search)."),
    mod: int | None = typer.Option(None, "--mod", min=1, help="Modulo m (default: the optimizer's search)."),
    memory_gb: float | None = typer.Option(None, "--memory-gb", help="RAM limit per unit for the optimizer."),
    total_units: int | None = typer.Option(None, "--units", min=1, help="Seed t of the parameter search."),
    run_id: str = typer.Option("cli", "--run-id", help="Partition of every output table this run replaces."),
    master: str | None = MASTER,
) -> None:
    """Exact set-similarity join (Fier & Freytag): tokenize, optimize, distributed PPJoin."""
    from jobs import ssj as pipeline
    from jobs.ssj_common import SSJRun

    try:
        cfg = load_config(SSJConfig, "ssj", {
            "threshold": threshold, "similarity": similarity.value, "tokenizer": tokenizer, "id_col": id_col,
            "text_col": text_col, "workers": workers, "mod": mod, "memory_gb": memory_gb,
            "total_units": total_units})
        job = SSJRun(input=input, output=output, cfg=cfg, right=right, run_id=run_id)
    except (ConfigError, ValueError) as e:
        _fail(str(e))
    try:
        res = pipeline.run(_spark(master), job)  # type: ignore[possibly-undefined]
    except (ValueError, FileNotFoundError) as e:
        _fail(str(e))
    ratio = res.slowest_unit_s / res.fastest_unit_s if res.fastest_unit_s > 0 else float("nan")  # type: ignore
    _summary(f"ssj: {res.pairs} pairs from {res.records} records ({res.quarantined} quarantined), "  # type: ignore
             f"{res.units} units (n={res.n}, m={res.m}, slowest/fastest {ratio:.1f}) in {res.seconds:.1f}s "  # type: ignore
             f"-> {output}")


@app.command("report")
def report(
    stats: str = typer.Option(..., "--stats", help="A stats Delta table: <output>_stats of simjoin ssj or s3j."),
    out: str = typer.Option(..., "--out", help="Folder for the PNG plots and index.html."),
    master: str | None = MASTER,
) -> None:
    """Plot a stats table: slice costs and load per unit (ssj); load per worker, window latencies (s3j)."""
    from simjoin.report import render
    from simjoin.spark import delta

    spark = _spark(master)
    try:
        pdf = delta.read_table(spark, stats).toPandas()
        files = render(pdf, out, title=stats)
    except (FileNotFoundError, ValueError) as e:
        _fail(str(e))
    _summary(f"report {stats}: {len(files)} plots and index.html in {out}")  # type: ignore[possibly-undefined]


@app.command("cache-jvm")
def cache_jvm(force: bool = typer.Option(False, "--force", help="Record again even if an archive exists.")) -> None:
    """Record the JVM class-data archive that makes every later Spark start faster (once per install)."""
    from jobs import jvm_cache

    try:
        path, recorded = jvm_cache.record(force)
    except RuntimeError as e:
        _fail(str(e))
    size = path.stat().st_size / 2**20  # type: ignore[possibly-undefined]
    _summary(f"cache-jvm: {'recorded' if recorded else 'up to date'}, {size:.0f} MiB archive at {path}")  # type: ignore


try:  # the S3J commands live in their own module
    from simjoin import cli_s3j  # noqa: F401
except ImportError as e:  # pragma: no cover - only while it is being written
    if "cli_s3j" not in str(e):
        raise
