"""The output contract every pipeline shares (README, "What the demo leaves behind": each pipeline's tables).

- Pair orientation: a self-join reports ``left_id < right_id``; an R-S join reports
  ``(left, right)`` as given (:func:`orient_pairs`).
- Row kinds: Spark tasks that return several kinds of rows in one Arrow stream (pairs beside
  their counters, members beside new centroids) tag each row with one :class:`RowKind`. A value
  means one thing everywhere.
- Stats tables: the columns every stats table carries (:data:`STATS_COMMON`), and the
  ``pipeline`` column that tells ``simjoin report`` which plots to draw.

Pure Python + numpy: importable from every layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "RowKind",
    "Role",
    "orient_pairs",
    "PAIR_ID_COLUMNS",
    "STATS_COMMON",
    "STATS_COMMON_SCHEMA",
]


class RowKind(IntEnum):
    """What a row of a multi-kind task output is (column ``kind``, a byte)."""

    PAIR = 0  # a result pair
    STATS = 1  # one counter row of a task (per unit / per window and worker)
    MEMBER = 2  # a workset member (S3J formulation)
    CENTROID = 3  # the centroid of a newly opened workset (S3J formulation)
    COUNTER = 4  # per (partition, window) centroid-distance counter (S3J formulation)
    WORKSET = 5  # per (window, workset) load statistics of a join task (S3J rebalance)
    FILE = 6  # a Parquet file of result pairs a task wrote into the output table's directory, not yet committed


class Role(IntEnum):
    """S3J roles of a record in a workset (Section 7) and the state-only buffer role."""

    INNER = 0
    OUTLIER = 1
    OUTER = 2
    BUFFER = 3  # a physical outer copy kept for worksets opened later in the same window


PAIR_ID_COLUMNS = ("left_id", "right_id")

#: Columns every stats table has, whatever the pipeline: which pipeline wrote the row (what
#: ``simjoin report`` dispatches on) and the seconds the row's work took.
STATS_COMMON = ("pipeline", "seconds")
STATS_COMMON_SCHEMA = "pipeline string, seconds double"


def orient_pairs(left: npt.ArrayLike, right: npt.ArrayLike, self_join: bool) -> tuple[np.ndarray, np.ndarray]:
    """Self-join: (min, max) of each pair; R-S join: unchanged."""
    a = np.asarray(left, dtype=np.int64)
    b = np.asarray(right, dtype=np.int64)
    if not self_join:
        return a, b
    return np.minimum(a, b), np.maximum(a, b)


#: Who owns a table: the Delta table's description (``metaData.description``) is ``OWNER=<name>``,
#: the pipeline whose stage created it (``ssj``, ``s3j``, ..., ``generate``), set in the commit that
#: creates the table (``owner_description``), so that ``simjoin generate --overwrite`` replaces only
#: tables ``generate`` wrote (``jobs.generate.write``). Not a table property: ``deltalake`` refuses
#: keys it does not know when it creates a table, and a later ``ALTER`` would be a commit of its own.
OWNER = "simjoin.owner"


def owner_of(description: str | None, configuration: Mapping[str, Any] | None = None) -> str | None:
    """The owner a table's description (or a ``simjoin.owner`` table property) names; None: unmarked."""
    prop = (configuration or {}).get(OWNER)
    if prop:
        return str(prop)
    d = (description or "").strip()
    if not d.startswith(f"{OWNER}="):
        return None
    return d.removeprefix(f"{OWNER}=") or None
