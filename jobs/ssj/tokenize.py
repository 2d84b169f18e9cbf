"""Stage 1: tokenize + length statistics. Bad rows (null/empty text, no tokens, null or duplicate
id) go to the quarantine table with a reason; good rows become integer-token records.

The stage chooses the run's executor (``choose``: in process or Spark, recorded in
``<output>_increments``) and runs ``simjoin.operators.setsim_steps`` on it: one pass profiles the
rows (token frequencies, lengths per partition, repeated ids, bad rows), one encodes the records
(kept as integers, never as strings).
An incremental run (``jobs.ssj.increment``) tags the rows appended since its base run with side + 2.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.ssj import increment, placement
from jobs.ssj.common import SSJRun
from simjoin.log import get_logger
from simjoin.operators import setsim as O
from simjoin.operators import setsim_steps as steps
from simjoin.pipeline.context import StageContext
from simjoin.spark import delta, pins

log = get_logger("simjoin.ssj")


def read_versions(spark: Any, job: SSJRun, sides: list[tuple[int, str]]
                  ) -> tuple[dict[int, int], increment.Increment]:
    """The input versions this run reads (pinned in ``<output>_runs``); a scheduled or
    asset-triggered run whose inputs are those of the last published run has nothing new.
    Also returns how this run joins (``increment.choose``).

    The small tables this needs (pins, increments) and the inputs' latest versions are read in
    parallel, while the inputs' schemas are checked: each is a Delta snapshot load, mostly latency."""
    from simjoin.pipeline.spec import NothingNew

    for _, path in sides:  # a missing input or a wrong schema fails before anything (the pins) is written
        if not delta.table_exists(spark, path):
            raise FileNotFoundError(f"input {path}: no Delta table there: allowed the path of a Delta table "
                                    "with an id and a text column")
    with ThreadPoolExecutor(max_workers=2 + len(sides), thread_name_prefix="ssj-meta") as pool:
        runs = pool.submit(pins.read_rows, spark, job.tables.runs)
        done = pool.submit(increment.read_rows, spark, job)
        latest = ({s: pool.submit(delta.latest_version, spark, p) for s, p in sides} if job.as_of is None
                  else {})
        for _, path in sides:
            check_input(spark, path, job.cfg.id_col, job.cfg.text_col)
        rows = runs.result()
        versions = pins.pin_inputs(spark, job.tables.runs, job.run_id, sides, as_of=job.as_of,
                                   reuse=job.trigger != "cli", rows=rows,
                                   latest={s: f.result() for s, f in latest.items()})
        done_rows = done.result()
    if job.trigger in ("scheduled", "asset_triggered"):
        last = pins.last_published(spark, job.tables.runs, exclude=job.run_id, rows=rows)
        if last is not None and last[1] == {(s, p): versions[s] for s, p in sides}:
            raise NothingNew(f"ssj: nothing new: the inputs are at the versions run {last[0]} published "
                             f"({', '.join(f'{p} v{versions[s]}' for s, p in sides)}); skipped")
    log.info("ssj tokenize: reading %s", ", ".join(f"{p} v{versions[s]}" for s, p in sides))
    return versions, increment.choose(spark, job, sides, versions, done=done_rows, runs=rows)


def check_input(spark: Any, path: str, id_col: str, text_col: str) -> None:
    """The input has the id and text columns, of allowed types: from a local table's Delta log
    (no Spark), else from Spark's schema."""
    local = delta.local_dir(path)
    if local is not None:
        try:
            from simjoin.io.delta_files import open_table

            schema = pa.schema(open_table(local).schema().to_arrow())
        except Exception:  # a reader feature deltalake lacks: Spark reads the schema
            schema = None
        if schema is not None:
            steps.check_input_schema(schema, id_col, text_col, f"input {path}")
            return
    O.check_input_types(dict(delta.read_table(spark, path).dtypes), id_col, text_col, f"input {path}")





def run(ctx: StageContext) -> dict[str, Any]:
    """Write the tokens, lengths and quarantine tables; keep the records for the later stages of
    this process."""
    spark, job = ctx.session, ctx.run
    import time

    from simjoin.operators.setsim_steps import warm_kernels
    from simjoin.quality.gates import preload

    cfg = job.cfg
    sides = [(0, job.input)] + ([(1, job.right)] if job.right else [])
    versions, inc = read_versions(spark, job, sides)
    where = placement.choose(job, sides, versions)
    inc = replace(inc, executor=where.executor, executor_reason=where.reason)
    log.info("ssj tokenize: %s", inc.reason)
    log.info("ssj tokenize: runs %s: %s", where.executor.replace("_", " "), where.reason)
    ex = job.executor(spark, inc)
    # in process the gates run in the warm gate server (no Great Expectations import here); on
    # Spark Great Expectations imports in the background while Spark tokenizes
    preload(process=ex.gate_server)
    warm_kernels(cfg.similarity)
    t0 = time.perf_counter()
    rows = steps.input_rows(ex, [(s, p, versions[s], inc.since[s] if inc.incremental else None) for s, p in sides],
                            cfg.id_col, cfg.text_col)
    read_s = time.perf_counter() - t0
    # the optimizer's slice measurements in the encode pass, unless the user set the plan
    measure = (cfg.threshold, cfg.similarity) if cfg.workers is None and cfg.mod is None else None
    tok = steps.tokenize(ex, rows, cfg.qgram, measure)
    if inc.incremental and (clash := steps.appended_id_clash(ex, tok.records)) is not None:
        inc = replace(increment.full(f"the appended row id {clash} repeats an id of an earlier row"),
                      executor=inc.executor, executor_reason=inc.executor_reason)
        log.info("ssj tokenize: %s", inc.reason)
        for kept in (tok.records, tok.tokenized):
            ex.release(kept)
        tok = steps.tokenize(ex, steps.retag_full(ex, rows), cfg.qgram, measure)
    t1 = time.perf_counter()
    good, n_bad = ex.count(tok.records), tok.prof.bad
    n_in = tok.prof.good + n_bad
    if good != tok.prof.good:
        raise AssertionError(f"ssj tokenize lost rows: {good} records encoded, {tok.prof.good} good rows")
    log.info("quality %s: %d rows in, %d good, %d quarantined", " + ".join(p for _, p in sides), n_in, good, n_bad)
    if tok.measures is not None:  # for the optimizer, before the writes below queue their tasks
        job.keep("measures", ex.collect(tok.measures))
    if n_bad:
        ex.write(ex.map(tok.bad, _tokenize_stage, QUARANTINE_ARROW), job.tables.quarantine, job.part)
    else:  # the partition replaced by no rows, without a pass over the encoded rows to find none
        delta.overwrite_partition_arrow(spark, QUARANTINE_ARROW.empty_table(), job.tables.quarantine, job.part)
    length_rows = [{"length": int(a), "count": int(c)} for a, c in zip(tok.prof.lengths, tok.prof.counts)]
    delta.overwrite_rows(spark, [(r["length"], r["count"], job.run_id) for r in length_rows],
                         "length int, count long, run_id string", job.tables.lengths, job.part)
    ex.write(tok.records, job.tables.tokens, job.part)
    new = ex.count(ex.map(tok.records, _appended, steps.RECORD_ARROW)) if inc.incremental else good
    inc = increment.write(spark, job, increment.with_new_records(inc, new))
    job.keep("records", tok.records)
    # released by the publish stage, all at once: on Spark, releasing a persisted frame drops what
    # was persisted from it too (the records from the tokenized partitions)
    job.keep("tokenized", [tok.records, tok.tokenized])
    job.keep("length_rows", length_rows)
    log.info("ssj tokenize: %d records in, %d tokenized (%d to join: %s), %d quarantined", n_in, good, new,
             inc.mode, n_bad)
    took = {"read": read_s, **tok.seconds, "write": time.perf_counter() - t1}
    log_steps("tokenize", took)
    return {"records_in": n_in, "records": good, "quarantined": n_bad, "mode": inc.mode,
            "base_run": inc.base_run, "new_records": new, "versions": {p: versions[s] for s, p in sides},
            "executor": inc.executor, "steps": took}


QUARANTINE_ARROW = pa.schema([*steps.BAD_ARROW, pa.field("stage", pa.string())])


def _tokenize_stage(t: pa.Table, part: int) -> pa.Table:
    return t.append_column("stage", pa.array(["tokenize"] * t.num_rows, pa.string()))


def _appended(t: pa.Table, part: int) -> pa.Table:
    return t.filter(pc.greater_equal(t.column("side"), O.APPENDED))


def log_steps(stage: str, steps: dict[str, float]) -> None:
    """One line per in-process stage with where its seconds went (``bench/ssj.py`` reads it)."""
    log.info("ssj steps %s: %s", stage, json.dumps({k: round(v, 4) for k, v in steps.items()}))
