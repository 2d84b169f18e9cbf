"""The memory ledger's record of a killed in-process run (issue 56, 6): a reservation whose process
was killed is kept for the next run of its output, once; one without an output, or older than
``DIED_KEEP_S``, goes. Real processes, killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from simjoin import memory


def _killed(ledger: str, key: str | None) -> int:
    code = ("import os, signal; from simjoin.memory import reserve; "
            f"reserve(123, 'ssj run', key={key!r}); os.kill(os.getpid(), signal.SIGKILL)")
    p = subprocess.run([sys.executable, "-c", code], env={**os.environ, "SIMJOIN_MEMORY_LEDGER": ledger})
    assert p.returncode == -signal.SIGKILL
    return len(os.listdir(ledger))


def test_a_killed_run_is_found_once_by_the_next_run_of_its_output(tmp_path):
    ledger = str(tmp_path / "ledger")
    _killed(ledger, "ssj:/w/out")
    _killed(ledger, None)  # no output named: nothing to tell anyone
    assert memory.reserved_by_others(ledger) == 0  # dead processes reserve nothing
    assert sorted(n.split("-")[0] for n in os.listdir(ledger)) == ["died"]
    assert memory.died("ssj:/w/other", ledger) is None
    got = memory.died("ssj:/w/out", ledger)
    assert got is not None and got["bytes"] == 123 and got["what"] == "ssj run" and got["pid"] > 0
    assert memory.died("ssj:/w/out", ledger) is None and os.listdir(ledger) == []


def test_an_old_record_goes_and_a_live_process_keeps_its_estimate(tmp_path):
    ledger = str(tmp_path / "ledger")
    _killed(ledger, "ssj:/w/out")
    f = os.path.join(ledger, os.listdir(ledger)[0])
    old = time.time() - memory.DIED_KEEP_S - 60
    os.utime(f, (old, old))
    assert memory.died("ssj:/w/out", ledger) is None and os.listdir(ledger) == []
    # hold keeps this process's estimate, adding the output
    path = memory.reserve(5 << 20, "ssj in process", ledger)
    memory.hold("ssj:/w/out", "ssj join", ledger)
    assert json.load(open(path)) == {"bytes": 5 << 20, "what": "ssj in process", "key": "ssj:/w/out"}
    os.remove(path)


def test_a_simjoin_command_that_ends_well_leaves_no_record_of_a_killed_run(tmp_path):
    """``simjoin`` ends with ``os._exit`` (no exit handlers): its reservations go first, or every
    rerun of an in-process ssj on the same output took it for killed and ran on Spark."""
    ledger = str(tmp_path / "ledger")
    code = ("from simjoin.memory import reserve, hold; from simjoin.cli import _exit_now; "
            "reserve(123, 'ssj run', key='ssj:/w/out'); hold('ssj:/w/out', 'ssj run'); _exit_now(0)")
    p = subprocess.run([sys.executable, "-c", code], env={**os.environ, "SIMJOIN_MEMORY_LEDGER": ledger})
    assert p.returncode == 0
    assert memory.died("ssj:/w/out", ledger) is None
    assert os.listdir(ledger) == []
