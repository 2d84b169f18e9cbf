"""The micro-batch engine under every stream pipeline (docs/architecture.md, "Streams: the operator contract").

A stream is an append-only Delta table (``id``, ``ts``, payload). A run of a stream pipeline
goes ``ingest -> stages -> gate -> publish`` over one *unit*:

- **ingest** (:meth:`MicroBatchEngine.ingest`) reads what arrived since the last run with
  Structured Streaming (``availableNow``, checkpoint ``<output>_checkpoint``), or - an output's
  ``direct`` mode, local tables - by reading the inputs' new Delta versions itself (the same
  snapshot-then-appends semantics, version offsets in the same checkpoint, no query to start:
  seconds less per run, and per follow-mode unit). Each micro-batch
  is checked (the schema before any cast; per row: a null or unreadable ``id``/``ts``, a ``ts``
  more than ``max_future`` past the current time), bad rows go to ``<output>_quarantine`` with
  their reason, the pipeline's declared row rules and windows (its ``InputSpec``,
  ``simjoin.quality.rows``) apply - one Arrow function on either executor - and the good
  rows are staged in ``<output>_work/records`` tagged with the unit. A unit is numbered
  ``last committed + 1`` and never changes: if a staged unit is still open (a run failed after
  ingest), ingest consumes nothing and the run finishes that unit first.
- the pipeline's stages read :meth:`open_unit` and write ``<output>_work/<name>`` tables tagged
  with the unit (:meth:`write_work` / :meth:`work`), so any stage can be rerun.
- **publish** (:meth:`publish`), after the gate, appends every piece (pairs, stats, state)
  with ``txnAppId = <pipeline>/<piece>/<checkpoint id>`` and ``txnVersion = unit``, then the
  progress row that marks the unit committed. A publish rerun after a crash skips what Delta
  already committed: published rows are never repeated or lost. Small pieces (stats) and the
  progress row are committed with ``deltalake`` on a local path (``delta.append_rows``: the same
  ``txn`` action, milliseconds instead of a second of small Spark jobs).

**Replay contract.** Every write is idempotent per (checkpoint, unit) or per (checkpoint,
micro-batch); stages only read state committed by earlier units. **Identity.** The checkpoint
holds ``simjoin.json`` with a random id that every progress row records. A deleted or foreign
checkpoint, or a config whose fingerprint differs from the state's, is refused with one line
naming ``--reset``, which clears the output, its state, work, stats, quarantine and checkpoint
together. **Watermark.** The minimum over the stream's sides of the largest committed ``ts``;
quarantined rows (e.g. future ones) never move it, nor do rows dated after their unit's publish
time (joined, but no mark's: docs/operations.md, "Lateness").

**Layout**, one concern per module; :class:`MicroBatchEngine` composes them:

- :mod:`.units`: progress, units, batch info and the value helpers every part shares;
- :mod:`.rules`: the input schema check and the ts parse (the row rules are data:
  ``simjoin.quality.rows``);
- :mod:`.base`: identity (checkpoint, fingerprint, inputs), progress, ``--reset``, units and work tables;
- :mod:`.staging`: a micro-batch's declared row rules on either executor, quarantine, the
  live-id index, the staged unit;
- :mod:`.follow`: follow mode's streaming query;
- :mod:`.sources`: ingest, the direct read of local Delta inputs or Structured Streaming;
- :mod:`.publish`: publish exactly once, and state expiry;
"""

from __future__ import annotations

from simjoin.quality.rows import spark_ts_string
from simjoin.runtime.event_time import (
    BatchInfo,
    CheckpointMismatch,
    EventTime,
    Progress,
    StaleUnit,
    Unit,
    aware,
    epoch_us,
    on_time_max,
)
from simjoin.runtime.tables import StreamTables
from simjoin.spark.engine.publish import Publisher
from simjoin.spark.engine.rules import INTEGRAL, NUMERIC, stream_schema_check
from simjoin.spark.engine.sources import Sources
from simjoin.spark.engine.units import QUARANTINE_SCHEMA, local_path

__all__ = [
    "StreamTables",
    "EventTime",
    "Progress",
    "Unit",
    "BatchInfo",
    "MicroBatchEngine",
    "CheckpointMismatch",
    "StaleUnit",
    "QUARANTINE_SCHEMA",
    "stream_schema_check",
    "aware",
    "epoch_us",
    "local_path",
    "INTEGRAL",
    "NUMERIC",
    "spark_ts_string",
    "on_time_max",
]


class MicroBatchEngine(Sources, Publisher):
    """One stream pipeline's engine over its tables (see the module docstring)."""
