"""Stage: write a synthetic input table (sets, vectors, ineq, keys, aqi) to Delta.

A path that already holds a Delta table is refused unless ``--overwrite`` (DAG param
``overwrite``) is given; a retry of the same Airflow run replaces the table its first attempt
wrote. A path holding anything that is not a Delta table is never replaced.

``generate`` replaces only tables it wrote itself: its tables carry the Delta property
``simjoin.owner = generate`` (set when its stage creates them, as every pipeline's stage sets its
own name: ``delta_files.owner_config``), or, written before that property, carry its marker in
every commit. A pipeline's table (pairs, stats, state, quarantine, progress, ...), any unmarked
table, and a pipeline's folder without a Delta log (``_checkpoint``, ``_state``, ``_work``) are
refused, with or without ``--overwrite``.
"""

from __future__ import annotations

import os
from typing import Any

from simjoin.config import parse_duration
from simjoin.io import delta_files
from simjoin.pipeline.context import StageContext
from simjoin.pipeline.spec import Run
from simjoin.spark import delta
from simjoin.spark import generate as gen

#: The owner (``simjoin.owner``) of the tables ``generate`` writes: its pipeline name.
GENERATE = "generate"


def _marker(run: Run) -> str:
    return f"simjoin generate {run.run_id}"


def _generate_wrote(spark: Any, out: str) -> bool:
    """An unmarked table every commit of which is ``generate``'s (written before the owner property)."""
    rows = delta.history(spark, out).select("userMetadata").collect()
    return bool(rows) and all(str(r[0] or "").startswith("simjoin generate ") for r in rows)


def _folder_owner(spark: Any, local: str) -> str | None:
    """The pipeline whose folder ``local`` (no Delta log) is: one an output's manifest owns
    (``simjoin.runtime.manifest.find_for``: ``<output>_checkpoint``, ``_state``, ``_work``, S2J's
    ``DIR/_checkpoint``...), or a folder holding tables a pipeline owns; None if no owner is found."""
    from simjoin.runtime.manifest import find_for

    m = find_for(local)
    if m is not None and m.pipeline and m.pipeline != GENERATE:
        return m.pipeline
    for sub in sorted(os.listdir(local))[:100]:
        p = os.path.join(local, sub)
        if delta.table_exists(spark, p) and (who := delta.owner(spark, p)) and who != GENERATE:
            return who
    return None


def _refuse_owned(spark: Any, out: str) -> None:
    """Refuse, in one line, a table ``generate`` did not write: a pipeline's, or unmarked."""
    who = delta.owner(spark, out)
    if who == GENERATE or (who is None and _generate_wrote(spark, out)):
        return
    if who is not None:
        raise ValueError(f"--out {out} is a table of the {who} pipeline (Delta property {delta_files.OWNER}={who}): "
                         "generate never replaces a pipeline's table: allowed a new path, or a table simjoin "
                         "generate wrote (with --overwrite)")
    raise ValueError(f"--out {out} holds a Delta table simjoin generate did not write (no {delta_files.OWNER}="
                     f"{GENERATE} property): allowed a new path, or a table simjoin generate wrote (with --overwrite)")


def check_out(spark: Any, run: Run) -> None:
    """Refuse an ``out`` that holds a table (without overwrite), a table or folder ``generate`` did
    not write (always), or anything else (always)."""
    out = str(run.cfg.out)
    if delta.table_exists(spark, out):
        _refuse_owned(spark, out)
        if run.cfg.overwrite:
            return
        if run.trigger != "cli":  # an Airflow retry of this very run may replace what it wrote
            last = delta.history(spark, out, 1).select("userMetadata").first()
            if last is not None and last[0] == _marker(run):
                return
        raise ValueError(f"--out {out} already holds a Delta table: allowed a new path, or --overwrite "
                         "(DAG param overwrite: true) to replace it")
    local = None if "://" in out and not out.startswith("file://") else os.path.abspath(out.removeprefix("file://"))
    if local is not None and os.path.isdir(os.path.join(local, "_delta_log")):
        return  # a Delta write that failed before its first commit (a retry replaces its files)
    if local is not None and os.path.isdir(local) and os.listdir(local) and (who := _folder_owner(spark, local)):
        raise ValueError(f"--out {out} is a folder of the {who} pipeline (its checkpoint, "
                         "state or work tables): generate never writes there: allowed a new path, an empty folder or "
                         "a table simjoin generate wrote (with --overwrite)")
    if local is not None and os.path.exists(local) and (not os.path.isdir(local) or os.listdir(local)):
        what = "a file" if not os.path.isdir(local) else "a folder that is not a Delta table"
        raise ValueError(f"--out {out} is {what}: allowed a new path, an empty folder or a Delta table "
                         "(with --overwrite)")


def run(ctx: StageContext) -> dict[str, Any]:
    spark, run = ctx.session, ctx.run
    cfg = run.cfg
    check_out(spark, run)
    if cfg.kind == "sets":
        df = gen.sets_df(spark, cfg.rows, cfg.seed, universe=cfg.universe, dup_frac=cfg.dup_frac, lengths=cfg.lengths,
                         dist=cfg.dist)
    elif cfg.kind == "vectors":
        df = gen.vectors_df(spark, cfg.rows, cfg.dim, cfg.dist, cfg.rate, cfg.seed, drift=cfg.drift,
                            drift_period=parse_duration(cfg.drift_period), drift_after=cfg.drift_after)
    elif cfg.kind == "ineq":
        df = gen.ineq_df(spark, cfg.rows, cfg.dist, cfg.seed, cfg.rate)
    elif cfg.kind == "aqi":
        df = gen.aqi_df(spark, cfg.rows, cfg.domain, cfg.seed, cfg.rate)
    else:
        df = gen.keys_df(spark, cfg.rows, cfg.alpha, cfg.domain, cfg.seed, cfg.rate)
    delta.overwrite(df, cfg.out, options={"userMetadata": _marker(run)})
    return {"kind": cfg.kind, "path": cfg.out, "rows": cfg.rows, "version": delta.latest_version(spark, cfg.out)}
