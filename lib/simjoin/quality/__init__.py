"""Data-quality gates (Great Expectations 1.x) and the quarantine writer."""

from simjoin.quality.gates import GateFailed, run_suite
from simjoin.quality.quarantine import QuarantineResult, Rule, split_quarantine

__all__ = ["GateFailed", "run_suite", "QuarantineResult", "Rule", "split_quarantine"]
