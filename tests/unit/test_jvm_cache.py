"""``simjoin cache-jvm`` records its archive with runs of its own: their task timing, locks and
manifests go to its scratch warehouse, never to the user's (issue 63 point 10: ``--force`` wrote
its internal runs into the user's task-timing table)."""

from __future__ import annotations

import os

from jobs.tools.jvm_cache import own_warehouse
from simjoin.pipeline.timing import timing_path


def test_the_recording_runs_write_to_its_scratch_warehouse_only(tmp_path, monkeypatch):
    users = str(tmp_path / "users")
    monkeypatch.setenv("SIMJOIN_WAREHOUSE", users)
    scratch = tmp_path / "scratch" / "warehouse"
    with own_warehouse(scratch):
        assert timing_path() == os.path.join(str(scratch), "_simjoin", "task_timing")
    assert os.environ["SIMJOIN_WAREHOUSE"] == users and timing_path().startswith(users)
    monkeypatch.delenv("SIMJOIN_WAREHOUSE")
    with own_warehouse(scratch):
        assert timing_path().startswith(str(scratch))
    assert "SIMJOIN_WAREHOUSE" not in os.environ
