"""Stream inequality join: SPO-Join (Aslam et al., *SPO-Join: Efficient Stream Inequality Join*).

``query`` the ``--where`` predicates (Section 2.1, queries of Section 5), ``orient`` a query as
``stored OP probe`` for one stored role (Section 3.1), ``mutable`` the mutable part with its per-attribute sorted
indexes and temporary ids (Section 3.2), ``pojoin`` the immutable PO-Join batch with permutation and offset
arrays and the IE-Join bit-array probe (Sections 2.1, 3.3, 3.4), ``kernels`` the shared numba pieces,
``bruteforce`` the exact reference.
"""

from .bruteforce import brute_force_pairs, pair_set
from .kernels import OP_CODES, ProbeArgs, key_codes, probe_args
from .mutable import MutablePart
from .orient import Orientation, SideColumns, orient
from .pojoin import PLANS, POBatch
from .query import (
    INEQUALITY_OPS,
    MAX_INEQUALITIES,
    OPS,
    RESERVED_COLUMNS,
    Predicate,
    Query,
    QueryError,
    flip_op,
    parse_query,
)

__all__ = [
    "INEQUALITY_OPS",
    "MAX_INEQUALITIES",
    "OPS",
    "OP_CODES",
    "PLANS",
    "RESERVED_COLUMNS",
    "MutablePart",
    "Orientation",
    "POBatch",
    "Predicate",
    "ProbeArgs",
    "Query",
    "QueryError",
    "SideColumns",
    "brute_force_pairs",
    "flip_op",
    "key_codes",
    "orient",
    "pair_set",
    "parse_query",
    "probe_args",
]
