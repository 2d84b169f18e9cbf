"""One run per output at a time (``simjoin.pipeline.lock``): a second run on the same output is
refused with one line while the first one writes, and the tables stay those of one clean run; a
lock left by a process that is gone is taken over. A crash never locks an output for good
(issue 37, item 8): an empty or unreadable lock file is stale, a symlinked path takes the lock
of its real path, and every DAG task has an execution timeout (tests/dags/test_dagbag.py)."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from simjoin.pipeline.lock import OutputLocked, lock_path, output_lock, read_lock
from tests.reliability.cases import CASES, reader_view

BIN = Path(sys.executable).parent


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _flags(spec, params):
    """The CLI arguments of ``params`` (a selector field, e.g. generate's kind, is a sub-command)."""
    sub, out = [], []
    for f in spec.fields():
        if f.name in params and params[f.name] is not None:
            flag = f.metadata.get("flag")
            if flag == "":
                sub = [str(params[f.name])]
            else:
                out += [flag or "--" + f.name.replace("_", "-"), str(params[f.name])]
    return sub + out


def test_the_lock_sits_beside_the_output_and_is_released(tmp_path):
    out = str(tmp_path / "deep" / "pairs")
    with output_lock(out, "r1") as path:
        assert path == out + "_lock" == lock_path(out)
        held = read_lock(path)
        assert held["run_id"] == "r1" and held["pid"] == os.getpid() and held["host"] == socket.gethostname()
        assert not os.path.exists(out), "taking the lock created the output folder"
    assert not os.path.exists(out + "_lock")
    with output_lock("s3://bucket/pairs", "r1") as path:  # not a local path: no lock
        assert path is None


def test_a_held_lock_is_refused_with_one_line(tmp_path):
    out = str(tmp_path / "pairs")
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        Path(out + "_lock").write_text(json.dumps({"run_id": "manual__1", "pid": holder.pid,
                                                   "host": socket.gethostname(), "started": "2026-01-01T00:00:00",
                                                   "started_ts": time.time()}))
        with pytest.raises(OutputLocked) as e, output_lock(out, "r2"):
            pass
        msg = str(e.value)
        assert "\n" not in msg and msg == (
            f"output {out} is being written by run manual__1 (pid {holder.pid} on {socket.gethostname()} since "
            f"2026-01-01T00:00:00): allowed one run per output at a time; wait for it, or remove {out}_lock if that "
            "process is gone")
        assert read_lock(out + "_lock")["run_id"] == "manual__1", "the refused run touched the holder's lock"
    finally:
        holder.kill()
        holder.wait()


def test_a_stale_lock_is_taken_over_with_a_warning(tmp_path, caplog):
    out = str(tmp_path / "pairs")
    pid = _dead_pid()
    Path(out + "_lock").write_text(json.dumps({"run_id": "old", "pid": pid, "host": socket.gethostname(),
                                               "started": "2026-01-01T00:00:00", "started_ts": time.time() - 60}))
    with caplog.at_level(logging.WARNING, logger="simjoin.lock"), output_lock(out, "new") as path:
        assert read_lock(path)["run_id"] == "new"
    assert any("took over the stale lock of run old" in r.getMessage() for r in caplog.records)
    assert not os.path.exists(out + "_lock")
    # a live pid that a later process reused: stale too
    reused = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        Path(out + "_lock").write_text(json.dumps({"run_id": "older", "pid": reused.pid, "host": socket.gethostname(),
                                                   "started": "2026-01-01T00:00:00",
                                                   "started_ts": time.time() - 3600}))
        with output_lock(out, "new") as path:
            assert read_lock(path)["run_id"] == "new"
    finally:
        reused.kill()
        reused.wait()
    # a lock of another host is never judged stale from here
    Path(out + "_lock").write_text(json.dumps({"run_id": "far", "pid": pid, "host": "elsewhere.invalid"}))
    with pytest.raises(OutputLocked, match="run far"), output_lock(out, "new"):
        pass


@pytest.mark.parametrize("content", ["", "{\"run_id\": \"cut", "\x00\x00garbage", "[1, 2]"],
                         ids=["empty", "cut", "garbage", "not-an-object"])
def test_an_empty_or_unreadable_lock_is_stale(tmp_path, caplog, content):
    """A crash while writing the lock file (or a full disk) left it empty or unreadable: it is
    taken over with a warning, not "being written" forever."""
    from simjoin.pipeline import lock as lock_mod

    out = str(tmp_path / "pairs")
    Path(out + "_lock").write_text(content)
    old = time.time() - 3600
    os.utime(out + "_lock", (old, old))
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="simjoin.lock"), output_lock(out, "new") as path:
        assert read_lock(path)["run_id"] == "new"
    assert time.monotonic() - t0 < lock_mod._EMPTY_STALE_S, "an old empty lock is stale at once"
    assert any("took over the stale lock" in r.getMessage() and "empty or unreadable" in r.getMessage()
               for r in caplog.records)
    assert not os.path.exists(out + "_lock")
    # one written just now may be a writer's in place (no hard links): taken over once older
    Path(out + "_lock").write_text(content)
    with output_lock(out, "newer") as path:
        assert read_lock(path)["run_id"] == "newer"
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")], "a temporary lock file was left"


def test_a_lock_file_is_never_seen_half_written(tmp_path):
    """The lock appears with its whole content (written first, then linked), so a reader never
    sees it empty: a run that finds an empty lock may trust that a crash left it."""
    out = str(tmp_path / "pairs")
    with output_lock(out, "r1") as path:
        st = os.stat(path)
        assert st.st_size > 0 and read_lock(path)["run_id"] == "r1"
        assert st.st_nlink == 1, "the temporary name was not removed"


def test_a_symlinked_output_takes_the_same_lock(tmp_path):
    """The lock is named after the real path: an output reached through a symlinked folder, or a
    symlink to the output itself, cannot take a second lock while the real path is held."""
    real = tmp_path / "real"
    (real / "pairs").mkdir(parents=True)
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    (tmp_path / "pairs_alias").symlink_to(real / "pairs", target_is_directory=True)
    out = str(real / "pairs")
    for other in (str(tmp_path / "link" / "pairs"), str(tmp_path / "pairs_alias"), str(tmp_path / "link/pairs/")):
        assert lock_path(other) == lock_path(out) == out + "_lock"
        with output_lock(out, "r1"):
            with pytest.raises(OutputLocked, match="being written by run r1"), output_lock(other, "r2"):
                pass
        with output_lock(other, "r2"):
            with pytest.raises(OutputLocked, match="being written by run r2"), output_lock(out, "r1"):
                pass
    assert not os.path.exists(out + "_lock")


def test_task_timeout_default_and_overrides(monkeypatch):
    """Every DAG task's ``execution_timeout``: one default, the spec's, then the environment; a
    bad value fails with one line naming the variable."""
    import dataclasses
    import datetime as dt

    from simjoin.pipeline import get_spec
    from simjoin.pipeline.dags import TASK_TIMEOUT, task_timeout

    for var in ("SIMJOIN_TASK_TIMEOUT", "SIMJOIN_S3J_TASK_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    spec = get_spec("s3j")
    assert TASK_TIMEOUT == "4h" and task_timeout(spec) == dt.timedelta(hours=4)
    assert task_timeout(dataclasses.replace(spec, task_timeout="90m")) == dt.timedelta(minutes=90)
    monkeypatch.setenv("SIMJOIN_TASK_TIMEOUT", "2h")
    assert task_timeout(spec) == dt.timedelta(hours=2)
    monkeypatch.setenv("SIMJOIN_S3J_TASK_TIMEOUT", "600s")
    assert task_timeout(spec) == dt.timedelta(seconds=600)
    assert task_timeout(get_spec("ssj")) == dt.timedelta(hours=2)
    for bad in ("0s", "soon", "-5m"):
        monkeypatch.setenv("SIMJOIN_S3J_TASK_TIMEOUT", bad)
        with pytest.raises(ValueError) as e:
            task_timeout(spec)
        assert str(e.value) == (f"SIMJOIN_S3J_TASK_TIMEOUT={bad!r}: allowed a duration above 0 such as 4h, 90m "
                                "or 600s")


def test_a_task_is_refused_while_another_run_holds_the_output_and_airflow_may_retry(tmp_path):
    """``run_stage`` (one Airflow task) takes the lock for its stage; the refusal is not one of the
    validation errors that fail a task without retry."""
    from simjoin.pipeline.runner import VALIDATION_ERRORS, run_stage, run_task

    params = {"left": str(tmp_path / "l"), "output": str(tmp_path / "pairs"), "threshold": 0.1}
    with output_lock(params["output"], "other-run"):
        with pytest.raises(OutputLocked, match="being written by run other-run"):
            run_stage("s3j", "ingest", params, "r1", spark=object())
        with pytest.raises(OutputLocked):  # re-raised as is: Airflow retries the task later
            run_task("s3j", "ingest", params, "r1")
    assert issubclass(OutputLocked, VALIDATION_ERRORS)  # the CLI: exit code 2, one line


#: The race per pipeline: a tool that writes a few hundred thousand rows (fast), and a stream join,
#: where two runs at once would append a unit twice (slow).
RACES = [pytest.param("generate", {"rows": 300_000}, id="generate"),
         pytest.param("s3j", {}, id="s3j", marks=(pytest.mark.slow, pytest.mark.exhaustive))]  # one lock for all


@pytest.mark.parametrize("name,extra", RACES)
def test_two_concurrent_cli_runs_one_wins_the_other_gets_one_line(spark, tmp_path, name, extra):
    """A real ``simjoin`` process writes the output; a second run on it, in this process, exits
    with code 2 and one line while the first holds it; the first's tables equal a clean run's
    on identical inputs; a stream's second run, run again once the first is done, adds nothing."""
    from simjoin.cli import cli_group
    from simjoin.pipeline import get_spec
    from simjoin.pipeline.lock import output_of
    from tests.helpers import run_named

    spec, case = get_spec(name), CASES[name]
    params = {**case.make_inputs(spark, str(tmp_path / "a")), **extra}
    args = [*(spec.cli_group or spec.name,), *_flags(spec, params)]
    output = output_of(spec.make_run(params))
    first = subprocess.Popen([str(BIN / "simjoin"), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, "SIMJOIN_FAULTS": ""})
    try:
        lock = output + "_lock"
        deadline = time.time() + 300
        while not os.path.exists(lock) and first.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        assert os.path.exists(lock), f"the first run never took the lock: {first.communicate()}"
        r = CliRunner().invoke(cli_group(), args)
        lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
        assert r.exit_code == 2, r.output
        assert lines and lines[-1].startswith(f"error: output {output} is being written by run cli "
                                              f"(pid {first.pid} on "), lines
        assert "allowed one run per output at a time" in lines[-1] and lines[-1].endswith("if that process is gone")
        out, err = first.communicate(timeout=900)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, err[-3000:]
    assert out.strip().splitlines()[-1].startswith(f"{name} "), out[-1000:]
    assert not os.path.exists(lock)
    clean_params = {**case.make_inputs(spark, str(tmp_path / "clean")), **extra}
    clean, _ = run_named(spark, name, **clean_params)
    won = spec.make_run(params)
    assert reader_view(spark, won, case) == reader_view(spark, clean, case)
    if spec.run_type == "stream":  # the refused run, now alone: nothing new, nothing twice
        r = CliRunner().invoke(cli_group(), args)
        assert r.exit_code == 0, r.output
        assert reader_view(spark, won, case) == reader_view(spark, clean, case)
