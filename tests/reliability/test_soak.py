"""The soak test's short version (``bench/soak.py``, issue "Runs for days"): every stream
pipeline's follow mode under a steady producer, killed with SIGKILL twice and restarted, with
maintenance every few units; then its output equals the brute force with no pair twice, and one
more ``simjoin maintain`` leaves a bounded number of files whatever the number of units."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simjoin.runtime.maintenance import COMPACT_MIN_FILES

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.slow


def _soak_module():
    spec = importlib.util.spec_from_file_location("bench_soak", ROOT / "bench" / "soak.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("pipeline", ["ineq", "s3j", "hypercube", "s2j"])
def test_follow_with_kills_and_maintenance_is_exact_and_bounded(tmp_path, pipeline):
    soak = _soak_module()
    a = argparse.Namespace(units=36, kill_every=14, maintain_every=6, retention="1m", rows=8, every=0.25,
                           trigger="200ms", sample_s=2.0, max_minutes=6.0, seed=3,
                           input_maintain_every=10)  # the producer compacts and checkpoints its inputs too
    r = soak.soak(pipeline, a, tmp_path)
    assert r["units"] >= 36 and len(r["kills"]) == 2, r["units"]
    assert r["exact"] and r["repeated"] == 0, f"{r['pairs']} pairs, the brute force {r['brute_force']}"
    assert r["pairs"] > 0
    out = tmp_path / "out"
    ck = out / "_checkpoint" if pipeline == "s2j" else tmp_path / "out_checkpoint"
    assert (ck / "maintenance.json").is_file(), "follow mode maintained its tables"
    # the checkpoint keeps the last micro-batches' offsets only
    assert len(os.listdir(ck / "offsets")) <= 10 + a.maintain_every + 2
    # one more maintenance with nothing retained: every table back to a handful of files
    env = {**os.environ, "SIMJOIN_RETENTION_CHECK": "0", "SIMJOIN_WAREHOUSE": str(tmp_path / "warehouse")}
    m = subprocess.run([str(BIN / "simjoin"), "maintain", "--output", str(out), "--retention", "0s"],
                       capture_output=True, text=True, env=env)
    assert m.returncode == 0, m.stderr[-2000:]
    files = soak.files_by_table(tmp_path)
    for table, (n, _) in files.items():
        if table.endswith("_checkpoint"):
            assert n <= 2 * 10 + 3, (table, n)
        elif "batches" not in table:  # one part per file: bounded by the window, not compacted
            # fewer small files than compaction waits for, the log checkpoint, its json, _last_checkpoint
            assert n <= COMPACT_MIN_FILES + 3, (table, n)
    got = soak.got_pairs(pipeline, soak.pairs_table(pipeline, tmp_path))  # the same pairs after it
    assert len(got) == len(set(got)) == r["pairs"]
