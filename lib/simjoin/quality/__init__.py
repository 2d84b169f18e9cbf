"""Data quality: the gates (Great Expectations 1.x) and the declared row rules with their quarantine
(``simjoin.quality.rows``)."""

from simjoin.quality.gates import GateFailed, run_suite

__all__ = ["GateFailed", "run_suite"]
