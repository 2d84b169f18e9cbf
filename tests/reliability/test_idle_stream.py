"""``--idle-timeout``: in a two-stream join whose other stream went idle, the active stream's state
still expires; the idle stream's rows that arrive later behind the point it was caught up to are
quarantined as late, the others are joined exactly (docs/operations.md, "Lateness"). Off by
default: then nothing expires while a stream is idle."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

BIN = Path(sys.executable).parent
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _append(path: Path, ids: list[int], secs: list[float], keys: list[int]) -> None:
    write_deltalake(str(path), pa.table({
        "id": pa.array(ids, pa.int64()),
        "ts": pa.array([T0 + dt.timedelta(seconds=s) for s in secs], pa.timestamp("us", tz="UTC")),
        "k": pa.array(keys, pa.int64())}), mode="append")


def _run(root: Path, *extra: str) -> None:
    r = subprocess.run([str(BIN / "simjoin"), "hypercube", "--left", str(root / "l"), "--right", str(root / "r"),
                        "--output", str(root / "out"), "--key", "k", "--window", "10s", "--workers", "2", *extra],
                       capture_output=True, text=True, env={**os.environ, "SIMJOIN_WAREHOUSE": str(root / "wh")})
    assert r.returncode == 0, r.stderr[-3000:]


def _held(root: Path) -> dict[int, int]:
    t = DeltaTable(str(root / "out_state" / "tuples")).to_pyarrow_table()
    sides = t.column("side").to_pylist()
    return {s: sides.count(s) for s in (0, 1)}


def test_an_idle_stream_lets_the_other_expire_and_its_late_rows_are_quarantined(tmp_path):
    idle = ("--idle-timeout", "1s")
    _append(tmp_path / "l", [1, 2, 3], [1, 2, 3], [7, 7, 8])
    _append(tmp_path / "r", [101, 102], [2, 4], [7, 8])
    _run(tmp_path, *idle)
    assert _held(tmp_path) == {0: 3, 1: 2}
    time.sleep(1.5)  # the right stream is idle from now on
    _append(tmp_path / "l", [4, 5], [100, 104], [7, 8])
    _run(tmp_path, *idle)
    # the right stream was caught up with the left one (ts 104): everything before 104 - 10 s expired
    assert _held(tmp_path) == {0: 2, 1: 0}
    # the right stream wakes up: a row behind the mark (104) is late, one past it is joined
    _append(tmp_path / "r", [103, 104], [50, 105], [7, 8])
    _run(tmp_path, *idle)
    q = DeltaTable(str(tmp_path / "out_quarantine")).to_pyarrow_table().to_pylist()
    assert [(r["id"], r["reason"].split(":")[0]) for r in q] == [(103, "late")], q
    t = DeltaTable(str(tmp_path / "out")).to_pyarrow_table()
    got = sorted(zip(t.column("left_id").to_pylist(), t.column("right_id").to_pylist(), strict=True))
    assert got == [(1, 101), (2, 101), (3, 102), (5, 104)]  # the brute force over the rows admitted


def test_without_idle_timeout_nothing_expires_while_a_stream_is_idle(tmp_path):
    _append(tmp_path / "l", [1, 2], [1, 2], [7, 7])
    _append(tmp_path / "r", [101], [2], [7])
    _run(tmp_path)
    time.sleep(1.5)
    _append(tmp_path / "l", [4], [100], [7])
    _run(tmp_path)
    # the left stream's tuples stay (the right one may still send rows for ts 1-2); the right one's
    # expire as the left one moves on
    assert _held(tmp_path) == {0: 3, 1: 0}


def _s3j(root: Path, *extra: str) -> None:
    r = subprocess.run([str(BIN / "simjoin"), "s3j", "--left", str(root / "l"), "--right", str(root / "r"),
                        "--output", str(root / "out"), "--threshold", "0.5", "--metric", "euclidean", "--window",
                        "10s", "--workers", "2", *extra],
                       capture_output=True, text=True, env={**os.environ, "SIMJOIN_WAREHOUSE": str(root / "wh")})
    assert r.returncode == 0, r.stderr[-3000:]


def _vectors(path: Path, ids: list[int], secs: list[float], xs: list[float]) -> None:
    write_deltalake(str(path), pa.table({
        "id": pa.array(ids, pa.int64()),
        "ts": pa.array([T0 + dt.timedelta(seconds=s) for s in secs], pa.timestamp("us", tz="UTC")),
        "vector": [[x, 0.0] for x in xs]}), mode="append")


def test_s3j_closes_the_windows_of_an_idle_stream(tmp_path):
    """S3J goes by the watermark (the smaller committed max ts): with the right stream idle, the
    left one's windows close, their state goes, and a right row for a closed window is late."""
    _vectors(tmp_path / "l", [1, 2], [1, 3], [0.0, 5.0])
    _vectors(tmp_path / "r", [101], [2], [0.1])
    _s3j(tmp_path, "--idle-timeout", "1s")
    time.sleep(1.5)
    _vectors(tmp_path / "l", [3], [105], [0.0])
    _s3j(tmp_path, "--idle-timeout", "1s")
    js = DeltaTable(str(tmp_path / "out_state" / "join")).to_pyarrow_table()
    starts = {int((w - T0).total_seconds()) for w in js.column("window_start").to_pylist()}
    assert 0 not in starts, starts  # window [0, 10) closed and expired
    _vectors(tmp_path / "r", [102, 103], [4, 106], [5.1, 0.2])
    _s3j(tmp_path, "--idle-timeout", "1s")
    q = DeltaTable(str(tmp_path / "out_quarantine")).to_pyarrow_table().to_pylist()
    assert [(r["id"], r["reason"].split(":")[0]) for r in q] == [(102, "late")], q
    t = DeltaTable(str(tmp_path / "out")).to_pyarrow_table()
    got = sorted(zip(t.column("left_id").to_pylist(), t.column("right_id").to_pylist(), strict=True))
    assert got == [(1, 101), (3, 103)]
