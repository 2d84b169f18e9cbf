"""Distributed set-similarity join (Fier & Freytag): optimizer + local PPJoin.

``optimizer`` splits the join into units (Sec. 2.1-2.5), ``ppjoin`` joins one
unit, ``bruteforce`` is the exact reference, ``similarity`` holds the bounds
(its ``similarity()`` function is not re-exported here, so that the name
``simjoin.core.setsim.similarity`` stays the module).
"""

from .bruteforce import brute_force_pairs
from .optimizer import (
    Candidate,
    NodeSlices,
    Plan,
    PlanUnit,
    RamFactors,
    UnitCosts,
    candidate_ram,
    choose_parameters,
    cost_deviation,
    distribute_slices,
    index_ram,
    length_stats,
    make_plan,
    probe_ram,
    search_plan,
    slice_costs,
    unit_ram,
)
from .ppjoin import PPJoinStats, gather_rows, ppjoin
from .similarity import (
    SIMILARITIES,
    check_similarity,
    check_threshold,
    index_prefix,
    max_length,
    min_length,
    min_overlap,
    probe_prefix,
)

__all__ = [
    "SIMILARITIES",
    "Candidate",
    "NodeSlices",
    "PPJoinStats",
    "Plan",
    "PlanUnit",
    "RamFactors",
    "UnitCosts",
    "brute_force_pairs",
    "candidate_ram",
    "check_similarity",
    "check_threshold",
    "choose_parameters",
    "cost_deviation",
    "distribute_slices",
    "gather_rows",
    "index_prefix",
    "index_ram",
    "length_stats",
    "make_plan",
    "max_length",
    "min_length",
    "min_overlap",
    "ppjoin",
    "probe_prefix",
    "probe_ram",
    "search_plan",
    "slice_costs",
    "unit_ram",
]
