"""Incremental runs: an ssj run builds on the last published run when it can, else joins in full.

A run reads its inputs at pinned versions v and publishes exactly the pairs of v. Say a published
run b read the same inputs at versions v_b <= v, with the same parameters, and every commit since
v_b only appended rows. Then

    pairs(v) = pairs(v_b)  ∪  {pairs (x, y) of v with x or y appended since v_b}.

So the run tokenizes the whole input under one token order (prefix filtering stays exact under
any global order, as long as every record uses the same one), joins only the appended records
against all records (``simjoin.operators.setsim_steps.increment_blocks``), and publishes b's pairs with the
new ones. A run falls back to a full join, and says why in ``<output>_increments``, when:

- there is no such published run (``--no-incremental``, other parameters, other inputs);
- an input was rewritten since (an overwrite, MERGE, DELETE, UPDATE or OPTIMIZE, or its commits
  are gone from the Delta log);
- an appended row repeats an id of an earlier row (which row is kept could change);
- run b's output partition no longer holds the pairs it published (someone deleted them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from jobs.ssj.common import SSJRun
from simjoin.spark import delta, pins

INCREMENTS_SCHEMA = ("run_id string, mode string, base_run string, reason string, params string, "
                     "new_records long, pairs long, executor string, executor_reason string, published_at timestamp")
#: The parameters the pairs depend on: a base run must have had the same.
PAIR_PARAMS = ("threshold", "similarity", "tokenizer", "id_col", "text_col")


@dataclass(frozen=True)
class Increment:
    """How this run joins: on top of ``base_run`` (incremental) or in full (``base_run`` None)."""

    base_run: str | None
    reason: str
    since: dict[int, int] = field(default_factory=dict)  # side -> the base run's version of that input
    new_records: int | None = None
    executor: str = "spark"  # where the run's stages run: in_process or spark (simjoin.runtime.placement)
    executor_reason: str = ""

    @property
    def in_process(self) -> bool:
        return self.executor == "in_process"

    @property
    def incremental(self) -> bool:
        return self.base_run is not None

    @property
    def mode(self) -> str:
        return "incremental" if self.incremental else "full"


def params_key(job: SSJRun) -> str:
    return json.dumps({k: getattr(job.cfg, k) for k in PAIR_PARAMS}, sort_keys=True)


def full(reason: str) -> Increment:
    return Increment(None, f"a full join: {reason}")


def read_rows(spark: Any, job: SSJRun) -> dict[str, Any]:
    """``<output>_increments`` by run id (empty if there is no table yet)."""
    return {r["run_id"]: r for r in delta.small_rows(spark, job.tables.increments)}  # one row per run: small


def choose(spark: Any, job: SSJRun, sides: list[tuple[int, str]], versions: dict[int, int],
           done: dict[str, Any] | None = None, runs: list[Any] | None = None) -> Increment:
    """The latest published run this one can build on, or a full join and why. ``done`` and ``runs``:
    the increments and pins tables' rows, if already read."""
    if not job.cfg.incremental:
        return full("incremental is off")
    done = read_rows(spark, job) if done is None else done
    key = params_key(job)
    for run_id, pinned in pins.published_runs(spark, job.tables.runs, exclude=job.run_id, rows=runs):
        r = done.get(run_id)
        if (set(pinned) != set(sides) or any(pinned[(s, p)] > versions[s] for s, p in sides)
                or r is None or r["pairs"] is None or r["params"] != key):
            continue
        for s, p in sides:
            why = pins.append_only(spark, p, pinned[(s, p)], versions[s])
            if why:
                return full(f"{why} since run {run_id}")
        have = delta.count_partition(spark, job.output, {"run_id": run_id})
        if have != r["pairs"]:
            return full(f"run {run_id}'s output partition holds {have} pairs; it published {r['pairs']}")
        since = {s: pinned[(s, p)] for s, p in sides}
        return Increment(run_id, f"incremental on run {run_id} ("
                         + ", ".join(f"{p} v{since[s]} -> v{versions[s]}" for s, p in sides) + ")", since)
    return full("no published run of these inputs with these parameters to build on")


def write(spark: Any, job: SSJRun, inc: Increment, pairs: int | None = None) -> Increment:
    """This run's row of ``<output>_increments`` (its ``run_id`` partition, replaced); ``pairs`` is set
    by the publish stage, which makes the run a base for later ones, with ``published_at``: the time
    of its last publish (a rerun's too), by which ssj's retention rule counts a run's age."""
    import datetime as dt

    at = dt.datetime.now(dt.UTC).replace(tzinfo=None) if pairs is not None else None
    row = (job.run_id, inc.mode, inc.base_run, inc.reason, params_key(job), inc.new_records, pairs, inc.executor,
           inc.executor_reason, at)
    delta.overwrite_rows(spark, [row], INCREMENTS_SCHEMA, job.tables.increments, job.part, merge_schema=True)
    return job.keep("increment", inc)  # type: ignore[no-any-return]


def with_new_records(inc: Increment, n: int) -> Increment:
    return replace(inc, new_records=n)


#: The columns of a published pair; a run's output partition is unique by the first two.
PAIR_COLS = ("left_id", "right_id", "similarity")
PAIR_ARROW = pa.schema([("left_id", pa.int64()), ("right_id", pa.int64()), ("similarity", pa.float64())])


def published(spark: Any, job: SSJRun, inc: Increment, staged: Any) -> Any:
    """The pairs this run publishes (``PAIR_COLS``, the executor's partitions): its staged pairs,
    with its base run's pairs for an incremental run. Unique by (left_id, right_id) when the
    appended rows were told apart exactly (``pins.appended``): the ``ssj_published`` gate
    (``jobs.ssj.gates.pairs``) checks it."""
    if not inc.incremental:
        return staged
    ex = job.executor(spark, inc)
    carried = ex.scan(job.output, list(PAIR_COLS), where=[("run_id", "=", inc.base_run)])
    return ex.union([ex.map(carried, _pair_types, PAIR_ARROW), staged])


def _pair_types(t: Any, part: int) -> Any:
    return t.select(list(PAIR_COLS)).cast(PAIR_ARROW)


def load(spark: Any, job: SSJRun) -> Increment:
    """The increment the tokenize stage chose: kept in this process, else its table row."""
    if "increment" in job.frames:
        return job.frames["increment"]  # type: ignore[no-any-return]
    r = read_rows(spark, job).get(job.run_id)
    if r is None:
        raise ValueError(f"{job.tables.increments} has no row for run {job.run_id!r}: run the tokenize stage first")
    return Increment(r["base_run"], r["reason"], new_records=r["new_records"],
                     executor=r.get("executor") or "spark", executor_reason=r.get("executor_reason") or "")
