"""The output manifest (issue 56): the one record of what an output owns, read by maintenance,
``--reset``, the lock, the runner, the Airflow plugin and ``show``/``history``. Real Delta tables
(deltalake), no Spark."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from simjoin.pipeline import get_spec
from simjoin.pipeline.lock import output_lock
from simjoin.pipeline.maintain import layout_of
from simjoin.pipeline.maintain import maintain as maintain_output
from simjoin.pipeline.runner import claim_output
from simjoin.runtime import maintenance, manifest
from simjoin.runtime.tables import DirTables, StreamTables


def _table(path: Path, owner: str | None, unit: int = 0, mode: str = "append") -> None:
    write_deltalake(str(path), pa.table({"unit": pa.array([unit], pa.int64())}), mode=mode,
                    description=f"simjoin.owner={owner}" if owner else None)


def _stream(root: Path, name: str = "out", pipeline: str = "ineq") -> Path:
    """A stream output as the engine leaves it: its tables, its checkpoint identity, its manifest."""
    out = root / name
    t = StreamTables(str(out))
    for p in (t.output, t.stats, t.progress, t.records):
        _table(Path(p), pipeline)
    os.makedirs(t.checkpoint)
    Path(t.checkpoint, "simjoin.json").write_text(json.dumps({"id": "ck", "output": str(out), "pipeline": pipeline}))
    owned = [t.output, t.stats, t.quarantine, t.state_dir, t.work_dir, t.checkpoint]
    manifest.write(manifest.create(pipeline, str(out), t.layout(), owned))
    return out


def test_the_manifest_records_absolute_paths_roles_and_retention_classes(tmp_path):
    out = _stream(tmp_path)
    f = tmp_path / "out_manifest.json"
    d = json.loads(f.read_text())
    assert d["format"] == 1 and d["pipeline"] == "ineq" and d["output"] == os.path.realpath(out)
    assert all(os.path.isabs(p) for p in d["owned"] + list(d["layout"].values()))
    m = manifest.read(str(out))
    assert m is not None
    roles = {os.path.relpath(p, tmp_path): (m.role(p), m.keep(p)) for p in maintenance.tables_in(m)}
    assert roles == {"out": ("output", "retention"), "out_stats": ("stats", "retention"),
                     "out_state/progress": ("progress", "internal"), "out_work/records": ("records", "internal")}
    assert m.keep(str(tmp_path / "out_state" / "batches")) == "internal"
    assert m.keep(str(tmp_path / "out_checkpoint")) == "files"
    assert not list(tmp_path.glob("*.tmp")), "written through a temporary file, then renamed"


@pytest.mark.parametrize("how", ["copied", "moved"])
def test_a_moved_or_copied_output_is_refused_in_one_line(tmp_path, how):
    out = _stream(tmp_path / "a")
    (tmp_path / "b").mkdir()
    for name in ("out", "out_stats", "out_state", "out_work", "out_checkpoint", "out_manifest.json"):
        src, dst = tmp_path / "a" / name, tmp_path / "b" / name
        if how == "moved":
            shutil.move(str(src), str(dst))
        elif src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy(src, dst)
    other = tmp_path / "b" / "out"
    before = sorted(os.listdir(out / "_delta_log")) if how == "copied" else None
    for call in (lambda: maintain_output(str(other), "1h"), lambda: output_lock(str(other), "r").__enter__(),
                 lambda: maintenance.unit_open(str(other))):
        with pytest.raises(manifest.Moved) as e:
            call()
        line = str(e.value)
        assert "\n" not in line and f"written for {os.path.realpath(out)}" in line and "moved or copied" in line
        assert f"move it back to {os.path.realpath(out)}" in line
    assert not (tmp_path / "b" / "out_lock").exists(), "no lock taken for a refused output"
    if before is not None:  # the original is untouched
        assert sorted(os.listdir(out / "_delta_log")) == before


def test_a_batch_output_claims_its_layout_at_the_first_run_and_never_a_foreign_file(tmp_path):
    spec = get_spec("ssj")
    run = spec.make_run({"input": str(tmp_path / "in"), "output": str(tmp_path / "out"), "threshold": 0.8}, "r1")
    m = claim_output(run)
    assert m is not None and m.pipeline == "ssj" and m.path == str(tmp_path / "out_manifest.json")
    assert sorted(map(os.path.basename, m.owned)) == sorted(
        f"out{s}" for s in ("", "_tokens", "_lengths", "_plan", "_stats", "_quarantine", "_runs", "_increments",
                            "_staging"))
    assert claim_output(run).id == m.id  # the next run reads it
    # a user's folder where the pipeline would write: refused before anything is written
    (tmp_path / "o2_plan").mkdir()
    (tmp_path / "o2_plan" / "notes.txt").write_text("mine")
    run2 = spec.make_run({"input": str(tmp_path / "in"), "output": str(tmp_path / "o2"), "threshold": 0.8}, "r2")
    with pytest.raises(ValueError, match=r"o2_plan already exists and was not written by simjoin ssj") as e:
        claim_output(run2)
    assert "\n" not in str(e.value) and not (tmp_path / "o2_manifest.json").exists()
    # issue 63: --output a folder of someone's Parquet file, or an existing file: refused at once
    (tmp_path / "mout" / "parq").mkdir(parents=True)
    (tmp_path / "mout" / "parq" / "part-0.parquet").write_bytes(b"PAR1")
    (tmp_path / "afile").write_text("x")
    for out in (tmp_path / "mout" / "parq", tmp_path / "afile"):
        r = spec.make_run({"input": str(tmp_path / "in"), "output": str(out), "threshold": 0.5}, "r4")
        with pytest.raises(ValueError, match=f"{out} already exists and was not written by simjoin ssj"):
            claim_output(r)
        assert not os.path.exists(f"{out}_manifest.json") and not os.path.exists(f"{out}_tokens")
    assert os.listdir(tmp_path / "mout" / "parq") == ["part-0.parquet"]
    # an output another pipeline wrote
    _stream(tmp_path, "hc", pipeline="hypercube")
    run3 = spec.make_run({"input": str(tmp_path / "in"), "output": str(tmp_path / "hc"), "threshold": 0.8}, "r3")
    with pytest.raises(ValueError, match=r"belongs to simjoin hypercube"):
        claim_output(run3)


def test_an_output_of_an_earlier_release_is_migrated_with_nothing_lost(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMJOIN_RETENTION_CHECK", "0")
    out = tmp_path / "old"
    for p, owner in ((out, "ssj"), (tmp_path / "old_stats", "ssj"), (tmp_path / "old_plan", None),
                     (tmp_path / "old_x", "ssj")):  # old_plan: not marked; old_x: another output's name
        _table(p, owner)
        _table(p, owner, 1, mode="overwrite")
    res = maintain_output(str(out), "2h")
    assert sorted(os.path.basename(t.path) for t in res.tables) == ["old", "old_stats"]
    m = manifest.read(str(out))
    assert m is not None and m.origin == "migrated" and m.pipeline == "ssj"
    assert sorted(map(os.path.basename, m.owned)) == ["old", "old_stats"]
    assert DeltaTable(str(out), version=0).to_pyarrow_table().num_rows == 1  # time travel within the retention
    for name in ("old_plan", "old_x"):
        conf = DeltaTable(str(tmp_path / name)).metadata().configuration
        assert "delta.logRetentionDuration" not in conf, f"{name} is not the output's"


def test_tables_are_told_by_the_manifest_that_owns_them(tmp_path):
    _stream(tmp_path, "out")
    _stream(tmp_path, "out_x")  # shares the prefix: its own output
    d = tmp_path / "jobs_work"  # an S2J-like directory output whose name looks like a work folder
    t = DirTables(str(d))
    for p in (t.task("gap"), t.progress):
        _table(Path(p), "s2j")
    _table(d / "an_input", None)  # the user's table inside the directory: not the output's
    manifest.write(manifest.create("s2j", str(d), layout_of(get_spec("s2j"), str(d)) or {},
                                   [t.task("gap"), t.state_dir, t.checkpoint]))
    assert manifest.find_for(str(tmp_path / "out_stats")).output == os.path.realpath(tmp_path / "out")
    assert manifest.find_for(str(tmp_path / "out_x_state" / "progress")).output == os.path.realpath(tmp_path / "out_x")
    m = manifest.find_for(t.task("gap"))
    assert m is not None and m.role(t.task("gap")) == "output" and m.keep(t.task("gap")) == "retention"
    assert m.role(t.progress) == "progress"
    assert manifest.find_for(str(d / "an_input")) is None
    from simjoin.ui import data

    c = data.card(t.task("gap"), version=None)
    assert (c.owner, c.role, c.output) == ("s2j", "output", os.path.realpath(d))
    assert data.card(str(d / "an_input")).owner is None


def test_an_unreadable_manifest_is_one_line(tmp_path):
    out = _stream(tmp_path)
    (tmp_path / "out_manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"the output manifest cannot be read .* allowed: restore it") as e:
        manifest.read(str(out))
    assert "\n" not in str(e.value)
