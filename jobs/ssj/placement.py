"""Where an ssj run's stages run (``simjoin.runtime.placement.choose_path``): chosen once by the
tokenize stage from the inputs' Delta logs, their text's decoded size, the memory available and
Spark's master, with the memory an in-process run reserves and a killed in-process run's fallback
to Spark. The stages themselves run on whichever executor this names and never ask which."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import replace
from typing import Any

import numpy as np

from jobs.ssj import increment
from jobs.ssj.common import SSJRun
from simjoin.log import get_logger
from simjoin.runtime.placement import PathChoice, choose_path
from simjoin.spark import delta

log = get_logger("simjoin.ssj")


def choose(job: SSJRun, sides: list[tuple[int, str]], versions: dict[int, int]) -> PathChoice:
    """Where this run's stages run (``simjoin.runtime.placement``): from the inputs' Delta logs
    (records and Parquet bytes at the pinned versions), their text's decoded size (a sample), the
    memory available to this process now (``simjoin.memory``: MemAvailable, the cgroup's limit,
    other in-process runs' reservations) and Spark's master. An in-process choice reserves its
    estimate until this process ends."""
    from simjoin.config import SparkConfig, load_config
    from simjoin.memory import available_memory, died, reserve

    local = all(delta.local_dir(p) is not None for p in [*(p for _, p in sides), job.output])
    records = size = decoded = 0
    if local:
        from deltalake import DeltaTable

        for s, p in sides:
            try:
                table = DeltaTable(str(delta.local_dir(p)), version=versions[s])
                acts = table.get_add_actions(flatten=True)
                n = np.asarray(acts.column("num_records").to_pylist(), dtype=float)
                size += int(np.nansum(np.asarray(acts.column("size_bytes").to_pylist(), dtype=float)))
                records += int(np.nansum(n))  # a file without statistics counts its bytes only
                decoded += decoded_text_bytes(table, job.cfg.text_col, int(np.nansum(n)))
            except Exception as e:  # a feature deltalake lacks: Spark reads the input
                log.info("ssj tokenize: deltalake cannot read %s (%s)", p, e)
                local = False
    master = load_config(SparkConfig, "spark").master
    key = memory_key(job)
    gone = died(key)  # the last in-process run of this output was killed (out of memory?) before it ended
    room = available_memory()
    where = choose_path(records, size, room.bytes, local_tables=local, cluster=not master.startswith("local"),
                        requested=job.cfg.executor, decoded_bytes=decoded, memory_source=room.source)
    if gone is not None and where.in_process and job.cfg.executor == "auto":
        when = dt.datetime.fromtimestamp(float(gone["at"]), dt.UTC).strftime("%Y-%m-%d %H:%M UTC")  # type: ignore[arg-type]
        where = PathChoice("spark", f"the in-process run before this one ({gone['what']}, pid {gone['pid']}, "
                           f"{int(gone['bytes']) / 2**30:.1f} GiB planned; {when}) was killed before it ended, "  # type: ignore[call-overload]
                           f"out of memory or by a signal: this run takes Spark (it would have run in process: "
                           f"{where.reason})", where.estimated_bytes)
        log.warning("ssj tokenize: %s", where.reason)
    if where.in_process:  # concurrent runs plan around it until this process ends
        reserve(where.estimated_bytes, f"ssj {job.output} run {job.run_id}", key=key)
    return where


def memory_key(job: SSJRun) -> str:
    """What an in-process run's memory reservation names: the output (``simjoin.memory.died``)."""
    return f"ssj:{os.path.realpath(job.output)}"


#: Rows read per sampled data file to measure the decoded text per record.
SAMPLE_ROWS = 2048


def decoded_text_bytes(table: Any, text_col: str, records: int, files: int = 3) -> int:
    """The text column's decoded size at ``records`` records, from a sample: the first
    :data:`SAMPLE_ROWS` rows of up to ``files`` data files spread over the table (Parquet's
    sizes say nothing of it: dictionary-encoded, compressed text decodes to many times its size)."""
    from urllib.parse import unquote

    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    uris = table.file_uris()
    if not uris or records <= 0:
        return 0
    picks = sorted({0, len(uris) // 2, len(uris) - 1})[:files]
    seen = rows = 0
    for i in picks:
        try:
            batch = next(pq.ParquetFile(unquote(uris[i])).iter_batches(batch_size=SAMPLE_ROWS, columns=[text_col]))
        except (StopIteration, OSError, KeyError, ValueError):
            continue
        col = batch.column(0)
        seen += int(pc.sum(pc.binary_length(col)).as_py() or 0) + 4 * len(col)  # Arrow's offsets
        rows += len(col)
    return 0 if rows == 0 else int(seen / rows * records)


def for_join(spark: Any, job: SSJRun, inc: increment.Increment) -> increment.Increment:
    """The increment the join runs under: on Spark as chosen; in process with this process marked
    as running it (``simjoin.memory.hold``); or, when this run's in-process join was killed before
    it ended (out of memory, or by a signal: an Airflow retry of this task), on Spark from here
    on, the reason recorded in ``<output>_increments`` (the gate and publish then take Spark too;
    both executors write the same tables)."""
    from simjoin.memory import died, hold

    if inc.executor != "in_process":
        return inc
    key = memory_key(job)
    gone = died(key)
    if gone is None:
        hold(key, f"ssj {job.output} run {job.run_id}")
        return inc
    why = (f"the in-process join of this run ({gone['what']}, pid {gone['pid']}) was killed before it ended, "
           f"out of memory or by a signal: the join, gate and publish run on Spark (tokenize had chosen in process: "
           f"{inc.executor_reason})")
    log.warning("ssj join: %s", why)
    return increment.write(spark, job, replace(inc, executor="spark", executor_reason=why))
