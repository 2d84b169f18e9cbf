"""A safe ``--reset`` (issue 37, item 3): it removes only the tables and folders the pipeline
created for the output, as ``<output>_checkpoint/simjoin.json`` lists them (``created``), and
refuses with one line when an input is the output or lives under it. Reproductions:
``simjoin s3j --left W/s3j/left --output W/s3j --reset`` removed ``W/s3j/left``; the reset of an
S2J output (a directory) wiped the whole directory, a user's other files with it."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from simjoin.cli import cli_group
from simjoin.spark import delta
from tests.helpers import run_named
from tests.reliability.cases import s2j_inputs

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SCHEMA = "id long, ts timestamp, vector array<double>"
S3J = ["--threshold", "0.2", "--metric", "euclidean", "--window", "10s", "--workers", "2"]


def _cli(*args):
    r = CliRunner().invoke(cli_group(), list(args))
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    return r.exit_code, (lines[-1] if lines else "")


def _vectors(spark, path, n=30, seed=1):
    rng = np.random.default_rng(seed)
    X, secs = rng.uniform(0, 1, (n, 2)), np.round(np.sort(rng.uniform(0, 20, n)), 1)
    rows = [(i, T0 + dt.timedelta(seconds=float(secs[i])), X[i].tolist()) for i in range(n)]
    spark.createDataFrame(rows, SCHEMA).write.format("delta").mode("append").save(path)
    return sorted((r[0], r[1]) for r in rows)


def _ids(spark, path):
    return sorted((r.id, r.ts.replace(tzinfo=dt.UTC)) for r in delta.read_table(spark, path).collect())


def _pairs(spark, path):
    return sorted(tuple(r) for r in delta.read_table(spark, path).collect())


def test_reset_refuses_an_input_under_the_output(spark, tmp_path):
    w = tmp_path / "W"
    left, out = str(w / "s3j" / "left"), str(w / "s3j")
    rows = _vectors(spark, left)
    code, line = _cli("s3j", "--left", left, "--output", out, *S3J, "--reset")
    assert code == 2, line
    assert f"input {left} lives under {out}" in line and "--reset would remove" in line, line
    assert _ids(spark, left) == rows  # the input survives
    # without --reset the output is not created there either
    code, line = _cli("s3j", "--left", left, "--output", out, *S3J)
    assert code == 2 and f"input {left} lives under {out}" in line, line
    assert _ids(spark, left) == rows and not os.path.exists(out + "_checkpoint")
    # an input that lives under a table beside the output (its state folder): refused too
    inner = str(w / "o_state" / "in")
    _vectors(spark, inner)
    code, line = _cli("s3j", "--left", inner, "--output", str(w / "o"), *S3J, "--reset")
    assert code == 2 and f"input {inner} lives under {w / 'o_state'}" in line, line
    assert os.path.isdir(os.path.join(inner, "_delta_log"))


def test_reset_removes_exactly_what_the_pipeline_created(spark, tmp_path):
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    _vectors(spark, src)
    # a user's files beside the output, named like its tables
    os.makedirs(out + "_report")
    open(out + "_notes.txt", "w").write("mine")
    code, line = _cli("s3j", "--left", src, "--output", out, *S3J)
    assert code == 0, line
    first = _pairs(spark, out)
    assert first
    with open(out + "_manifest.json") as fh:  # the output's manifest: what the pipeline created
        created = json.load(fh)["owned"]
    assert sorted(created) == sorted(out + s for s in ("", "_stats", "_quarantine", "_state", "_work",
                                                       "_checkpoint"))
    there = sorted(p for p in created if os.path.exists(p))
    assert out + "_quarantine" in there  # a clean run has its quarantine, empty (issue 63, point 4)
    assert not delta.read_table(spark, out + "_quarantine").count()
    _, res = run_named(spark, "s3j", reset=True, left=src, output=out, threshold=0.2, metric="euclidean",
                       window="10s", workers=2)
    assert sorted(res["reset"]) == sorted([*there, out + "_manifest.json"]) and out in there and out + "_checkpoint" in there
    assert os.path.isdir(out + "_report") and open(out + "_notes.txt").read() == "mine"
    assert _pairs(spark, out) == first  # joined again from the start: the same pairs


def test_s2j_reset_keeps_the_shared_directory(spark, tmp_path):
    """S2J's output is a folder of tables. A folder that already holds someone's files (here the
    inputs and notes) is refused at the first run (issue 63: an output never takes over what it
    did not write); files a user puts into the output folder later stay through --reset."""
    shared = tmp_path / "shared"
    params = s2j_inputs(spark, str(shared))  # the inputs live in the shared directory
    out = str(shared)
    (shared / "notes.txt").write_text("mine")
    args = ["s2j", "run", "--left", params["left"], "--right", params["right"], "--output", out,
            "--window", params["window"], "--workers", "2"]
    for t in params["tasks"].split(";"):
        args += ["--task", t.strip()]
    before_files = sorted(os.listdir(shared))
    code, line = _cli(*args)
    assert code == 2 and "which simjoin s2j did not create" in line, line
    assert sorted(os.listdir(shared)) == before_files, "a refused run wrote into the folder"
    # an output folder of its own; the user adds files to it afterwards
    out = str(tmp_path / "results")
    args[args.index("--output") + 1] = out
    code, line = _cli(*args)
    assert code == 0, line
    (Path(out) / "notes.txt").write_text("mine")
    os.makedirs(Path(out) / "mine")
    before = {t: _pairs(spark, os.path.join(out, t)) for t in ("gap", "eq")}
    assert any(before.values())
    with open(os.path.join(out, "_manifest.json")) as fh:
        man = json.load(fh)
    assert out not in man["owned"] and man["dirs"] == [out]  # the folder it created
    assert {os.path.join(out, "gap"), os.path.join(out, "eq"), os.path.join(out, "_state")} <= set(man["owned"])
    code, line = _cli(*args, "--reset")
    assert code == 0, line
    assert (Path(out) / "notes.txt").read_text() == "mine" and (Path(out) / "mine").is_dir()
    assert delta.table_exists(spark, params["left"]) and delta.table_exists(spark, params["right"])
    assert {t: _pairs(spark, os.path.join(out, t)) for t in ("gap", "eq")} == before
    # a directory the pipeline created goes too, once only its tables were in it
    own = str(tmp_path / "own")
    p = {k: v for k, v in params.items() if k != "output"}
    run_named(spark, "s2j", output=own, **p)
    from simjoin.pipeline import get_spec

    run = get_spec("s2j").make_run({**p, "output": own}, reset=True)
    removed = run.reset_tables(spark)
    assert own in removed and not os.path.exists(own)
