"""Issue 56's event-time reproductions, through `simjoin hypercube` as a user runs it, against
brute force (same key, ``|ts_l - ts_r| < W``).

3. A row dated in the future (inside ``--max-future``) made every ordinary row of the next
   micro-batch late: the stream's mark moved to the publish time + 60 s. With data that lags the
   wall clock (a replay 30 minutes behind), half the ordinary rows were quarantined even with
   ``--allowed-lateness 2m``. Now a row dated after its unit's publish time is joined but never
   advances its stream's mark, at the wall clock and far behind it.
2. ``--idle-timeout`` counted the pipeline's own downtime: both producers committed while it was
   stopped, the first unit after the restart held only the left stream (``--max-records-per-unit``),
   the right stream was declared idle, and its rows waiting in the input were quarantined as late.
   Now a stream whose input holds unread commits is never idle.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

BIN = Path(sys.executable).parent
WINDOW = dt.timedelta(hours=2)


def _append(path: Path, rows: list[tuple[int, dt.datetime, int]]) -> None:
    write_deltalake(str(path), pa.table({
        "id": pa.array([r[0] for r in rows], pa.int64()),
        "ts": pa.array([r[1] for r in rows], pa.timestamp("us", tz="UTC")),
        "k": pa.array([r[2] for r in rows], pa.int64())}), mode="append")


def _run(root: Path, *extra: str) -> None:
    p = subprocess.run([str(BIN / "simjoin"), "hypercube", "--left", str(root / "l"), "--right", str(root / "r"),
                        "--output", str(root / "out"), "--key", "k", "--window", "2h", "--workers", "2", *extra],
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "SIMJOIN_WAREHOUSE": str(root / "wh")})
    assert p.returncode == 0, p.stderr[-3000:]


def _brute(left: list, right: list) -> list[tuple[int, int]]:
    return sorted((a, b) for a, ta, ka in left for b, tb, kb in right if ka == kb and abs(ta - tb) < WINDOW)


def _outcome(root: Path) -> tuple[list[tuple[int, int]], list]:
    t = DeltaTable(str(root / "out")).to_pyarrow_table(columns=["left_id", "right_id"])
    pairs = sorted(zip(t.column("left_id").to_pylist(), t.column("right_id").to_pylist(), strict=True))
    q = root / "out_quarantine"
    late = []
    if (q / "_delta_log").is_dir():
        late = [r for r in DeltaTable(str(q)).to_pyarrow_table().to_pylist() if str(r["reason"]).startswith("late")]
    return pairs, late


@pytest.mark.parametrize(("lag", "lateness"), [(dt.timedelta(0), "0s"), (dt.timedelta(minutes=30), "2m")],
                         ids=["at-the-wall-clock", "30m-behind"])
def test_a_row_dated_in_the_future_makes_no_later_row_late(tmp_path, lag, lateness):
    now = dt.datetime.now(dt.UTC) - lag
    left = [(1, now - dt.timedelta(seconds=3), 1), (2, now - dt.timedelta(seconds=2), 2),
            (3, dt.datetime.now(dt.UTC) + dt.timedelta(minutes=50), 1)]  # the outlier: 50 min ahead of the clock
    right = [(101, now - dt.timedelta(seconds=3), 1), (102, now - dt.timedelta(seconds=1), 2)]
    _append(tmp_path / "l", left)
    _append(tmp_path / "r", right)
    _run(tmp_path, "--allowed-lateness", lateness)
    time.sleep(1.0)
    # the next micro-batch: ordinary rows a few seconds after the first ones (on the data's clock)
    later = now + dt.timedelta(seconds=5)
    left2 = [(4, later, 1), (5, later + dt.timedelta(seconds=1), 2), (6, later, 3)]
    right2 = [(103, later, 1), (104, later + dt.timedelta(seconds=2), 3), (105, later - dt.timedelta(seconds=4), 2)]
    _append(tmp_path / "l", left2)
    _append(tmp_path / "r", right2)
    _run(tmp_path, "--allowed-lateness", lateness)
    pairs, late = _outcome(tmp_path)
    assert late == [], f"ordinary rows quarantined as late after a future-dated row: {late}"
    assert pairs == _brute(left + left2, right + right2) and len(pairs) >= 8


def test_a_stream_with_unread_commits_is_never_idle_across_a_stop(tmp_path):
    t0 = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    left = [(1, t0, 7), (2, t0 + dt.timedelta(seconds=1), 8)]
    right = [(101, t0, 7)]
    _append(tmp_path / "l", left)
    _append(tmp_path / "r", right)
    idle = ("--idle-timeout", "5s", "--max-records-per-unit", "4")
    _run(tmp_path, *idle)
    time.sleep(6.5)  # the pipeline is stopped; both producers commit meanwhile
    left2 = [(i, t0 + dt.timedelta(seconds=10 + i), 7 + i % 2) for i in range(3, 7)]  # fills one unit
    right2 = [(100 + i, t0 + dt.timedelta(seconds=9 + i), 7 + i % 2) for i in range(2, 7)]
    _append(tmp_path / "l", left2)
    _append(tmp_path / "r", right2)
    _run(tmp_path, *idle)  # unit 1 holds the left stream only; the right's rows wait in its input
    pairs, late = _outcome(tmp_path)
    assert late == [], f"rows waiting in the input were taken for late: {late}"
    assert pairs == _brute(left + left2, right + right2) and len(pairs) >= 10
