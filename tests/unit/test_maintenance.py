"""Table maintenance (``simjoin maintain``, ``simjoin.runtime.maintenance``) on real Delta tables
written with deltalake the way a stream pipeline lays them out: compaction keeps every row,
state written one part per file is never compacted, vacuum and log cleanup honour the retention,
a direct ingest's old offsets and published units' markers go, the lock is respected, and a
table kept open across a log cleanup is still read right."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from simjoin.runtime import maintenance

BIN = Path(sys.executable).parent
OWNER = "simjoin.owner=ineq"


def _append(path: Path, unit: int, n: int = 3, **extra) -> None:
    write_deltalake(str(path), pa.table({"unit": pa.array([unit] * n, pa.int64()),
                                         "x": pa.array(range(n), pa.int64()), **extra}), mode="append",
                    description=OWNER)


def _stream_output(root: Path, units: int = 12) -> Path:
    """An ineq-like output: pairs, stats, progress and one-part-per-file batches (one small file per
    unit each), a work table, checkpoint offsets and commits, publish markers, an identity file."""
    out = root / "out"
    for u in range(units):
        _append(out, u)
        _append(root / "out_stats", u)
        _append(root / "out_state" / "progress", u, n=1)
        _append(root / "out_state" / "batches", u, n=1)
    _append(root / "out_work" / "records", 0, n=0)
    ck = root / "out_checkpoint"
    for kind in ("offsets", "commits"):
        (ck / kind).mkdir(parents=True)
        for b in range(units):
            (ck / kind / str(b)).write_text("{}")
    marks = root / "out_work" / "_publishing"
    marks.mkdir()
    for u in range(units):
        (marks / f"ck-{u}").write_text("")
    created = [str(out), str(root / "out_stats"), str(root / "out_state"), str(root / "out_work"), str(ck)]
    (ck / "simjoin.json").write_text(json.dumps({"id": "ck", "output": str(out), "pipeline": "ineq",
                                                 "created": created}))
    return out


def _maintain(out: Path, retention: float, **kw):
    """Maintenance as the pipeline runs it: the output of an earlier release (an identity file,
    no manifest) gets its manifest, and the state and work folders it names are internal."""
    return maintenance.maintain_output(str(out), retention, **kw)


@pytest.fixture
def no_floor(monkeypatch):
    monkeypatch.setenv("SIMJOIN_RETENTION_CHECK", "0")


def test_maintain_compacts_keeps_rows_and_parts_and_cleans_up(tmp_path, no_floor):
    out = _stream_output(tmp_path)
    before = {p: DeltaTable(str(p)).to_pyarrow_table().sort_by("unit") for p in (out, tmp_path / "out_stats")}
    res = _maintain(out, 0.0, by_part=["batches"])
    by = {Path(t.path).relative_to(tmp_path).as_posix(): t for t in res.tables}
    assert set(by) == {"out", "out_stats", "out_state/progress", "out_state/batches", "out_work/records"}
    # compacted to one file each, the same rows
    for name in ("out", "out_stats", "out_state/progress"):
        assert by[name].files_before == 12 and by[name].files_after == 1, by[name]
    for p, rows in before.items():
        assert DeltaTable(str(p)).to_pyarrow_table().sort_by("unit").equals(rows)
    # one part per file stays so (its expiry drops whole files)
    assert by["out_state/batches"].files_after == 12 and by["out_state/batches"].compacted == 0
    # retention 0: the replaced files are gone from disk, and the log is a checkpoint
    parquet = [f for f in os.listdir(out) if f.endswith(".parquet")]
    assert len(parquet) == 1, parquet
    assert not any(f.endswith(".json") and int(f[:20]) < DeltaTable(str(out)).version()
                   for f in os.listdir(out / "_delta_log") if f[:20].isdigit())
    # the last 10 committed micro-batches' offsets stay; published units' markers go
    ck = tmp_path / "out_checkpoint"
    assert sorted(int(n) for n in os.listdir(ck / "offsets")) == list(range(2, 12))
    assert sorted(int(n) for n in os.listdir(ck / "commits")) == list(range(2, 12))
    assert os.listdir(tmp_path / "out_work" / "_publishing") == []
    assert json.loads((ck / "maintenance.json").read_text())["unit"] == 11
    # Spark's own VACUUM keeps the same promise
    conf = DeltaTable(str(out)).metadata().configuration
    assert conf["delta.deletedFileRetentionDuration"] == "interval 0 seconds"
    assert DeltaTable(str(out)).metadata().description == OWNER


def test_retention_keeps_what_readers_of_older_versions_need(tmp_path, no_floor):
    out = _stream_output(tmp_path, units=10)
    v = DeltaTable(str(out)).version()
    _maintain(out, 600.0)  # 10 minutes: every version is younger
    assert DeltaTable(str(out), version=v - 3).to_pyarrow_table().num_rows == 3 * (10 - 3)  # time travel works
    assert DeltaTable(str(out)).to_pyarrow_table().num_rows == 30


def test_an_open_unit_keeps_its_work_tables_files(tmp_path, no_floor):
    out = _stream_output(tmp_path)
    _append(tmp_path / "out_work" / "records", 11, n=2)  # a published unit's rows: not open
    assert not maintenance.unit_open(str(out))
    _append(tmp_path / "out_work" / "records", 12, n=2)  # staged, not published
    _append(tmp_path / "out_work" / "records", 12, n=2)
    rec = tmp_path / "out_work" / "records"
    res = _maintain(out, 7200.0, by_part=["batches"])
    assert all(t.vacuumed == 0 for t in res.tables), "an open unit's readers keep their files"
    assert DeltaTable(str(rec)).to_pyarrow_table().num_rows == 6


def test_retention_floor_and_schedule(tmp_path, monkeypatch):
    monkeypatch.delenv("SIMJOIN_RETENTION_CHECK", raising=False)
    with pytest.raises(ValueError, match=r"^--retention 10m: allowed at least 1h"):
        maintenance.parse_retention("10m")
    with pytest.raises(ValueError, match="allowed a duration such as 7d"):
        maintenance.parse_retention("soon")
    assert maintenance.parse_retention(None) == 7 * 86400.0
    assert maintenance.parse_retention("36h") == 36 * 3600.0
    out = _stream_output(tmp_path)
    assert maintenance.due(str(out), 9, 10) and not maintenance.due(str(out), 8, 10)
    assert not maintenance.due(str(out), 99, 0)  # 0: never
    monkeypatch.setenv("SIMJOIN_RETENTION_CHECK", "0")
    _maintain(out, 0.0)
    assert not maintenance.due(str(out), 12, 10) and maintenance.due(str(out), 21, 10)  # since unit 11


def test_a_table_kept_open_is_read_right_after_its_log_is_cleaned(tmp_path, no_floor):
    from simjoin.io.delta_files import open_table

    p = tmp_path / "t"
    for u in range(5):
        _append(p, u)
    assert open_table(str(p)).to_pyarrow_table().num_rows == 15
    maintenance.maintain_table(str(p), "internal", 0.0)
    _append(p, 5)
    assert not (p / "_delta_log" / f"{0:020d}.json").exists()
    assert open_table(str(p)).to_pyarrow_table().num_rows == 18
    _append(p, 6)
    assert open_table(str(p)).to_pyarrow_table().num_rows == 21  # kept, brought up to date


def test_cli_refuses_a_locked_output_and_a_path_without_simjoin_tables(tmp_path):
    from simjoin.pipeline.lock import output_lock

    out = _stream_output(tmp_path)
    env = {**os.environ, "SIMJOIN_WAREHOUSE": str(tmp_path / "wh")}
    with output_lock(str(out), "follow", "follow mode"):
        r = subprocess.run([str(BIN / "simjoin"), "maintain", "--output", str(out)], capture_output=True,
                           text=True, env=env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "lock" in r.stderr, r.stderr
    r = subprocess.run([str(BIN / "simjoin"), "maintain", "--output", str(tmp_path / "nothing")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "no table a simjoin pipeline wrote" in r.stderr, r.stderr
    r = subprocess.run([str(BIN / "simjoin"), "maintain", "--output", str(out)], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith(f"maintain {out}: 5 tables, data files 48 -> 15, ")


def test_state_retention_rules(tmp_path):
    a = tmp_path / "out_state" / "assignment"
    for u in (0, 3, 3, 7):
        _append(a, u, n=2)
    assert maintenance.prune_state(str(a), "latest", 9) == 6
    assert set(DeltaTable(str(a)).to_pyarrow_table().column("unit").to_pylist()) == {7}
    g = tmp_path / "out_state" / "grids"
    for u in range(6):
        _append(g, u, n=1)
    assert maintenance.prune_state(str(g), "history", 5 + maintenance.HISTORY_UNITS - 3) == 3
    assert sorted(DeltaTable(str(g)).to_pyarrow_table().column("unit").to_pylist()) == [3, 4, 5]
    with pytest.raises(ValueError, match="allowed latest or history"):
        maintenance.prune_state(str(g), "forever", 5)


def test_ssj_keeps_the_last_runs_and_each_parameter_sets_base():
    import datetime as dt

    from jobs.ssj.retention import kept_runs

    t0 = dt.datetime(2026, 1, 1)

    def pin(rid, h, published=True):
        return [{"run_id": rid, "pinned_at": t0 + dt.timedelta(hours=h), "published": published, "side": s}
                for s in (0, 1)]

    pins = pin("a", 0) + pin("b", 1) + pin("c", 2) + pin("d", 3) + pin("e", 4, published=False) + pin("old", -5, False)
    inc = [{"run_id": "a", "params": "theta 0.5"}] + [{"run_id": r, "params": "theta 0.8"} for r in "bcd"]
    # the last 2 published (d, c), a: the only run of its parameters (a base), e: in flight, newer
    assert kept_runs(pins, inc, 2) == {"d", "c", "a", "e"}
    assert kept_runs(pins, inc, 10) == {"a", "b", "c", "d", "e"}


def test_ssj_prune_drops_the_partitions_of_runs_let_go(tmp_path, monkeypatch):
    import datetime as dt

    from jobs.ssj.retention import prune

    out = tmp_path / "pairs"
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    for h, rid in enumerate(["r1", "r2", "r3"]):
        for path in (out, tmp_path / "pairs_tokens"):
            write_deltalake(str(path), pa.table({"run_id": [rid] * 2, "left_id": [1, 2]}), mode="append",
                            partition_by=["run_id"])
        write_deltalake(str(tmp_path / "pairs_runs"), pa.table({
            "run_id": [rid], "side": [0], "path": ["in"], "version": [h], "as_of": [None],
            "pinned_at": pa.array([t0 + dt.timedelta(hours=h)], pa.timestamp("us", tz="UTC")),
            "published": [True]}), mode="append")
        write_deltalake(str(tmp_path / "pairs_increments"), pa.table({"run_id": [rid], "params": ["p"]}),
                        mode="append")
    monkeypatch.setenv("SIMJOIN_SSJ_KEEP_RUNS", "2")
    tables = [str(out), *(str(tmp_path / f"pairs{x}") for x in ("_tokens", "_runs", "_increments"))]
    from simjoin.runtime import manifest
    from simjoin.runtime.tables import SSJTables

    # the output's manifest, as the run's first stage writes it: the rule finds the tables by role
    manifest.write(manifest.create("ssj", str(out), SSJTables(str(out)).layout(), tables))
    dropped = prune(str(out), tables)
    assert dropped == {str(out): 2, str(tmp_path / "pairs_tokens"): 2}
    for path in (out, tmp_path / "pairs_tokens"):
        assert sorted(set(DeltaTable(str(path)).to_pyarrow_table().column("run_id").to_pylist())) == ["r2", "r3"]
    assert DeltaTable(str(tmp_path / "pairs_runs")).to_pyarrow_table().num_rows == 3  # the bookkeeping stays
    monkeypatch.setenv("SIMJOIN_SSJ_KEEP_RUNS", "0")
    with pytest.raises(ValueError, match="at least 1"):
        prune(str(out), tables)


def test_s3j_drops_the_centroids_no_open_window_holds(tmp_path):
    from jobs.s3j.retention import prune

    out = tmp_path / "out"
    st = tmp_path / "out_state"
    write_deltalake(str(st / "centroids"), pa.table({
        "partition": pa.array([0, 0, 0, 1, 1], pa.int32()), "workset_id": pa.array([1, 2, 3, 1, 2], pa.int64()),
        "unit": pa.array([0, 0, 1, 0, 1], pa.int64())}))
    write_deltalake(str(st / "join"), pa.table({
        "partition": pa.array([0, 1], pa.int32()), "workset_id": pa.array([2, 1], pa.int64())}))
    _append(st / "progress", 1, n=1)
    ck = tmp_path / "out_checkpoint"
    ck.mkdir()
    (ck / "simjoin.json").write_text(json.dumps({"output": str(out), "pipeline": "s3j",
                                                 "created": [str(st), str(ck)]}))
    tables = maintenance.tables_of(str(out))
    assert prune(str(out), tables) == {"worksets": 1, "rows": 1}  # (0, 1): no member; (0, 3), (1, 2): highest ids
    left = DeltaTable(str(st / "centroids")).to_pyarrow_table()
    assert sorted(zip(left.column("partition").to_pylist(), left.column("workset_id").to_pylist())) == [
        (0, 2), (0, 3), (1, 1), (1, 2)]
    # the platform calls the rule only while no unit is open
    assert not maintenance.unit_open(str(out))
    _append(tmp_path / "out_work" / "records", 2, n=1)  # staged, not published
    (ck / "simjoin.json").write_text(json.dumps({"output": str(out), "pipeline": "s3j",
                                                 "created": [str(st), str(ck), str(tmp_path / "out_work")]}))
    assert maintenance.unit_open(str(out))
