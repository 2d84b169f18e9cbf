"""Where a run's stages run: the in-process executor or the Spark executor, and why.

- A stream's unit (:func:`choose_unit`): in process when its tables are local and it has at most
  ``SIMJOIN_LOCAL_UNIT_ROWS`` records, else on Spark.
- A set-similarity join (:func:`choose_path`, issue 43): the in-process path runs the same stages
  as the Spark path without a JVM; it is chosen when the tables are local, the join fits in this
  machine's memory by the estimate below, and no cluster would do the work faster.

Pure Python: the caller gives the numbers (the inputs' Delta logs give records and bytes; the
machine its memory).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["EXECUTORS", "PathChoice", "choose_path", "choose_unit", "in_process_bytes", "UnitBudget", "unit_budget"]

#: The executors a user may ask for; ``auto`` lets :func:`choose_path` decide.
EXECUTORS = ("auto", "in_process", "spark")

#: Peak memory of the in-process path per byte of the inputs' Parquet files (the text, its tokens
#: twice over while they are encoded, the records) and per record (rids, ids, offsets, the routing
#: to units and the unit copies). A deliberate over-estimate: 10M generated sets at θ 0.6
#: (489 MiB of Parquet) were estimated at 11.3 GiB and peaked at 8.8 GB resident.
BYTES_PER_INPUT_BYTE = 12.0
BYTES_PER_RECORD = 600.0
#: The share of the machine's memory the in-process path may plan to use.
MEMORY_SHARE = 0.6
#: On a cluster master the in-process path takes at most this many records: beyond them the
#: cluster's cores pay back Spark's fixed cost (about 15 s on 2 cores).
CLUSTER_IN_PROCESS_RECORDS = 2_000_000


@dataclass(frozen=True)
class PathChoice:
    """The chosen executor (``in_process`` or ``spark``), why, and the estimate it rests on."""

    executor: str
    reason: str
    estimated_bytes: int

    @property
    def in_process(self) -> bool:
        return self.executor == "in_process"


def in_process_bytes(records: int, input_bytes: int, decoded_bytes: int = 0) -> int:
    """The in-process path's estimated peak memory for ``records`` records in ``input_bytes``
    bytes of Parquet whose text decodes to ``decoded_bytes`` (compressible text decodes to many
    times its Parquet size: 200k records in 1.1 MiB held 472 MiB of text)."""
    return int(BYTES_PER_INPUT_BYTE * max(input_bytes, decoded_bytes) + BYTES_PER_RECORD * records)


def choose_path(records: int, input_bytes: int, memory_bytes: int, *, local_tables: bool, cluster: bool,
                requested: str = "auto", decoded_bytes: int = 0, memory_source: str = "") -> PathChoice:
    """The executor of a join of ``records`` input rows in ``input_bytes`` bytes of Parquet
    (``decoded_bytes`` of text once decoded) with ``memory_bytes`` of memory available to it
    (``memory_source`` says where that number comes from). ``local_tables``: every table is a
    local Delta table ``deltalake`` reads and writes; ``cluster``: Spark's master is a cluster,
    not ``local``. ``requested``: the user's ``--executor``; ``in_process`` where it cannot run is
    refused."""
    if requested not in EXECUTORS:
        raise ValueError(f"--executor {requested!r}: allowed {', '.join(EXECUTORS)}")
    need = in_process_bytes(records, input_bytes, decoded_bytes)
    budget = int(MEMORY_SHARE * memory_bytes)
    decoded = f" ({decoded_bytes / 2**20:,.0f} MiB of text decoded)" if decoded_bytes > input_bytes else ""
    est = (f"{records:,} records, {input_bytes / 2**20:,.0f} MiB of Parquet{decoded}: about "
           f"{need / 2**30:.1f} GiB in process")
    where = f" ({memory_source})" if memory_source else ""
    if requested == "spark":
        return PathChoice("spark", "set by the user: --executor spark", need)
    if requested == "in_process":
        if not local_tables:
            raise ValueError("--executor in_process: the input and output must be local Delta tables "
                             "(a path on this machine without a '%'); allowed: auto or spark")
        return PathChoice("in_process", f"set by the user: --executor in_process ({est})", need)
    if not local_tables:
        return PathChoice("spark", "a table is not local (deltalake cannot reach it)", need)
    if need > budget:
        return PathChoice("spark", f"{est}, over {MEMORY_SHARE:.0%} of the "
                          f"{memory_bytes / 2**30:.1f} GiB available{where}", need)
    if cluster and records > CLUSTER_IN_PROCESS_RECORDS:
        return PathChoice("spark", f"{est}; a cluster takes more than {CLUSTER_IN_PROCESS_RECORDS:,} records", need)
    return PathChoice("in_process", f"{est}, within {MEMORY_SHARE:.0%} of the "
                      f"{memory_bytes / 2**30:.1f} GiB available{where}", need)


def choose_unit(requested: str, rows: int, limit: int, local_tables: bool, why_not_local: str = "") -> PathChoice:
    """The executor of a stream's unit of ``rows`` staged records: ``requested`` (the pipeline's
    ``--executor``), else in process when its tables are local (``local_tables``; else
    ``why_not_local`` says why not) and it has at most ``limit`` records
    (``SIMJOIN_LOCAL_UNIT_ROWS``), else Spark. ``in_process`` where it cannot run is refused."""
    if requested not in EXECUTORS:
        raise ValueError(f"--executor {requested!r}: allowed {', '.join(EXECUTORS)}")
    if requested == "spark":
        return PathChoice("spark", "set by the user: --executor spark", 0)
    if not local_tables:
        if requested == "in_process":
            raise ValueError(f"--executor in_process: {why_not_local or 'a table is not local'}; the streams, the "
                             "output and its state must be local Delta tables; allowed: auto or spark")
        return PathChoice("spark", f"a table is not local ({why_not_local or 'deltalake cannot reach it'})", 0)
    if requested == "in_process":
        return PathChoice("in_process", f"set by the user: --executor in_process ({rows:,} records)", 0)
    if rows > limit:
        return PathChoice("spark", f"{rows:,} records > SIMJOIN_LOCAL_UNIT_ROWS={limit:,}", 0)
    return PathChoice("in_process", f"{rows:,} records <= SIMJOIN_LOCAL_UNIT_ROWS={limit:,}, local tables", 0)


@dataclass(frozen=True)
class UnitBudget:
    """Memory per unit and task slots, from the Spark session (Fier & Freytag Sec. 2.3's limit)."""

    memory_bytes: int
    slots: int
    source: str


def size_bytes(text: str | None) -> int | None:
    """Spark's size strings (``4g``, ``512m``, ``1024k``, plain bytes) in bytes."""
    if not text:
        return None
    s = text.strip().lower().rstrip("b")
    mult = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}.get(s[-1:], 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def unit_budget(conf: Any, remote: bool = False, executors: int = 1, memory_gb: float | None = None) -> UnitBudget:
    """How much memory one unit may use, and how many units run at once (Fier & Freytag Sec.
    2.3's limit), from Spark's configuration ``conf`` (``conf(key, default)``: a session's, or for
    the in-process executor the one a session of this configuration would have).

    A unit runs in one task slot. Slots: ``local[N]``'s N (all cores for ``local[*]``), else
    ``spark.executor.cores`` x ``executors`` (or ``spark.cores.max``; one executor over Spark
    Connect: ``remote``). Memory per slot: ``spark.executor.pyspark.memory`` / executor cores when
    it is set (Spark enforces it); in local mode the machine's memory less the driver's JVM heap
    and 1 GiB for the OS; on a cluster this host's memory less the executor heap, per executor
    core. ``memory_gb`` (``--memory-gb``), when given, caps the result."""
    import os
    import re

    master = conf("spark.master", "local[*]") or "local[*]"
    phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    cores = os.cpu_count() or 1
    local = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master)
    if local:
        n = local.group(1)
        slots = cores if n in (None, "*") else int(n) if n else 1
        exec_cores = slots
    else:
        exec_cores = int(conf("spark.executor.cores", "0") or 0) or cores
        cap = int(conf("spark.cores.max", "0") or 0)
        slots = cap or exec_cores * (1 if remote else max(1, executors))
    pyspark_mem = size_bytes(conf("spark.executor.pyspark.memory", None))
    if pyspark_mem:
        per, source = pyspark_mem // exec_cores, f"spark.executor.pyspark.memory / {exec_cores} cores"
    elif local:
        heap = size_bytes(conf("spark.driver.memory", "1g")) or 2**30
        per = max(2**28, (phys - heap - 2**30) // max(1, slots))
        source = f"local: {phys / 2**30:.1f} GiB less the {heap / 2**30:.1f} GiB driver heap and 1 GiB, / {slots} slots"
    else:
        heap = size_bytes(conf("spark.executor.memory", "1g")) or 2**30
        per = max(2**28, (phys - heap - 2**30) // exec_cores)
        source = (f"host {phys / 2**30:.1f} GiB less the {heap / 2**30:.1f} GiB executor heap and 1 GiB, "
                  f"/ {exec_cores} cores")
    if memory_gb is not None and memory_gb * 2**30 < per:
        per, source = int(memory_gb * 2**30), f"--memory-gb {memory_gb:g} (below {source})"
    return UnitBudget(memory_bytes=int(per), slots=max(1, int(slots)), source=source)
