"""Issue 56's reproductions: ordinary operator actions that lost data or changed results with exit
code 0, each on real Delta tables through the pipelines' own runs and `simjoin maintain`.

1. Clearing and rerunning an older ssj run: its publish wrote its rows again, and the same DAG
   run's ``maintain`` deleted them (a rerun kept its first ``pinned_at``). Now a run's age is the
   time of its last publish.
5. ``simjoin maintain --output out`` maintained another output ``out_x`` (found by its name's
   prefix), even while ``out_x``'s lock was held. Now maintenance touches the tables the pipeline
   declares for ``out`` and nothing else.
6. A stream run started with a relative ``--output`` recorded its tables as typed; maintenance
   from another folder then touched that folder's tables. Now paths are absolute real paths
   from the start, and an identity file an earlier release wrote with relative paths is read
   relative to where it really is.
7. A retention that is not whole hours (``90m``) vacuumed at 1 h, and the log cleanup dropped the
   version that was current 75 minutes ago. Now retention rounds up and the version current at the
   cutoff keeps a checkpoint.
4. An S2J output folder named ``*_work`` had its task tables taken for internal work tables
   (retention 0). Now internal means: under the state or work folders the pipeline declares.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from tests.helpers import run_named

BIN = Path(sys.executable).parent
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _sets(path: Path, n: int = 40) -> None:
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
    texts = [" ".join(words[(i + j) % 8] for j in range(4 + i % 3)) for i in range(n)]
    write_deltalake(str(path), pa.table({"id": pa.array(range(n), pa.int64()), "text": texts}), mode="overwrite")


def _ssj(spark, sets: Path, out: Path, run_id: str) -> None:
    run_named(spark, "ssj", run_id=run_id, input=str(sets), output=str(out), threshold=0.5, executor="in_process")


def _runs(out: Path) -> dict[str, int]:
    t = DeltaTable(str(out)).to_pyarrow_table(columns=["run_id"]).column("run_id").to_pylist()
    return {r: t.count(r) for r in sorted(set(t))}


def _cli(*args: str, cwd: Path | None = None, ok: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([str(BIN / "simjoin"), *args], capture_output=True, text=True, cwd=cwd, timeout=600,
                       env={**os.environ, "SIMJOIN_RETENTION_CHECK": "0"})
    if ok:
        assert p.returncode == 0, p.stderr[-3000:]
    return p


def test_a_rerun_of_an_older_ssj_run_keeps_its_output_through_maintenance(spark, tmp_path, monkeypatch):
    from simjoin.pipeline.maintain import maintain

    sets, out = tmp_path / "sets", tmp_path / "pairs"
    _sets(sets)
    _ssj(spark, sets, out, "A")
    time.sleep(0.05)
    _ssj(spark, sets, out, "B")
    pairs = _runs(out)["A"]
    assert pairs > 0 and _runs(out)["B"] == pairs
    time.sleep(0.05)
    _ssj(spark, sets, out, "A")  # A cleared and rerun: published again, now the newest
    monkeypatch.setenv("SIMJOIN_SSJ_KEEP_RUNS", "1")
    maintain(str(out))  # the same DAG run's maintain task
    assert _runs(out) == {"A": pairs}, "the run just republished lost its rows"
    inc = {r["run_id"]: r for r in DeltaTable(str(out) + "_increments").to_pyarrow_table().to_pylist()}
    assert inc["A"]["published_at"] > inc["B"]["published_at"]


def test_maintaining_an_output_never_touches_another_that_shares_its_name_prefix(spark, tmp_path):
    from simjoin.pipeline.lock import output_lock

    sets = tmp_path / "sets"
    _sets(sets)
    out, other = tmp_path / "out", tmp_path / "out_x"
    _ssj(spark, sets, out, "cli")
    _ssj(spark, sets, other, "cli")
    theirs = sorted(p for p in tmp_path.iterdir() if p.name.startswith("out_x") and (p / "_delta_log").is_dir())
    man = (tmp_path / "out_x_manifest.json").read_text()
    before = {p.name: (DeltaTable(str(p)).version(), DeltaTable(str(p)).metadata().configuration) for p in theirs}
    assert len(before) >= 5
    with output_lock(str(other), "live-run", "a run of out_x"):  # a live run holds out_x
        p = _cli("maintain", "--output", str(out), "--retention", "2h")
    assert "maintain" in p.stdout + p.stderr
    after = {p.name: (DeltaTable(str(p)).version(), DeltaTable(str(p)).metadata().configuration) for p in theirs}
    assert after == before, "maintenance of out changed out_x's tables"
    assert (tmp_path / "out_x_manifest.json").read_text() == man
    mine = DeltaTable(str(out) + "_runs").metadata().configuration
    assert mine.get("delta.logRetentionDuration") == "interval 7200 seconds"


def _stream_inputs(root: Path) -> None:
    for name, ids, keys in (("l", [1, 2, 3], [7, 7, 8]), ("r", [101, 102], [7, 8])):
        write_deltalake(str(root / name), pa.table({
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array([T0 + dt.timedelta(seconds=s) for s in range(len(ids))], pa.timestamp("us", tz="UTC")),
            "k": pa.array(keys, pa.int64())}))


def test_an_output_named_relative_is_recorded_absolute_and_maintained_from_anywhere(tmp_path):
    here, elsewhere = tmp_path / "a", tmp_path / "b"
    here.mkdir()
    elsewhere.mkdir()
    _stream_inputs(here)
    _cli("hypercube", "--left", "l", "--right", "r", "--output", "rel/hc2", "--key", "k", "--window", "10s",
         "--workers", "2", cwd=here)
    ck = here / "rel" / "hc2_checkpoint" / "simjoin.json"
    ident = json.loads(ck.read_text())
    real = os.path.realpath(here)
    assert ident["output"] == f"{real}/rel/hc2"
    man = json.loads((here / "rel" / "hc2_manifest.json").read_text())  # the output's manifest
    assert man["output"] == f"{real}/rel/hc2" and man["pipeline"] == "hypercube"
    assert all(os.path.isabs(p) and p.startswith(real) for p in man["owned"]), man["owned"]
    assert man["layout"]["state"] == f"{real}/rel/hc2_state"
    # elsewhere holds tables at the same relative names, owned by the same pipeline
    decoy = elsewhere / "rel" / "hc2_state" / "progress"
    write_deltalake(str(decoy), pa.table({"unit": pa.array([0], pa.int64())}), description="simjoin.owner=hypercube")
    for _ in range(3):
        write_deltalake(str(decoy), pa.table({"unit": pa.array([1], pa.int64())}), mode="append")
    v = DeltaTable(str(decoy)).version()
    progress = here / "rel" / "hc2_state" / "progress"
    _cli("maintain", "--output", str(here / "rel" / "hc2"), "--retention", "1h", cwd=elsewhere)
    # an output of an earlier release: no manifest, an identity file with the paths as they were typed
    ident_old = {**ident, "output": "rel/hc2", "created": [os.path.relpath(p, real) for p in man["owned"]]}
    ck.write_text(json.dumps(ident_old))
    (here / "rel" / "hc2_manifest.json").unlink()
    p = _cli("maintain", "--output", str(here / "rel" / "hc2"), "--retention", "2h", cwd=elsewhere)
    assert DeltaTable(str(decoy)).version() == v and len(os.listdir(decoy / "_delta_log")) == v + 1, \
        "maintenance touched another folder's tables"
    assert f"{progress}:" in p.stderr and "8 tables" in p.stderr, p.stderr[-2000:]  # its own were maintained
    stats = DeltaTable(str(here / "rel" / "hc2_stats")).metadata().configuration
    assert stats["delta.logRetentionDuration"] == "interval 7200 seconds"
    # ... and it was migrated: its manifest again, with the same absolute paths
    again = json.loads((here / "rel" / "hc2_manifest.json").read_text())
    assert again["origin"] == "migrated" and sorted(again["owned"]) == sorted(man["owned"])


def _age(table: Path, version: int, seconds_ago: float) -> None:
    """Make commit ``version`` of ``table`` look ``seconds_ago`` old: its commit time, the removes it
    made, and its log file's modification time (what the log cleanup goes by)."""
    f = table / "_delta_log" / f"{version:020d}.json"
    ms = int((time.time() - seconds_ago) * 1000)
    lines = []
    for line in f.read_text().splitlines():
        a = json.loads(line)
        if "commitInfo" in a:
            a["commitInfo"]["timestamp"] = ms
        if "remove" in a:
            a["remove"]["deletionTimestamp"] = ms
        if "add" in a:
            a["add"]["modificationTime"] = ms
        lines.append(json.dumps(a))
    f.write_text("\n".join(lines) + "\n")
    os.utime(f, (ms / 1000, ms / 1000))


def test_a_retention_that_is_not_whole_hours_keeps_every_version_within_it(tmp_path, monkeypatch):
    """Written 3 h ago, replaced 70 minutes ago; maintained with a 90-minute retention: the table as
    of 75 minutes ago (version 0) still reads, with its file."""
    from simjoin.runtime import maintenance

    monkeypatch.setenv("SIMJOIN_RETENTION_CHECK", "0")
    t = tmp_path / "out"
    write_deltalake(str(t), pa.table({"x": pa.array([1, 2, 3], pa.int64())}))
    write_deltalake(str(t), pa.table({"x": pa.array([4], pa.int64())}), mode="overwrite")
    _age(t, 0, 3 * 3600)
    _age(t, 1, 70 * 60)
    write_deltalake(str(t), pa.table({"x": pa.array([5], pa.int64())}), mode="append")  # a recent commit
    res = maintenance.maintain_table(str(t), "output", 90 * 60.0)
    assert res.vacuumed == 0
    assert sorted(DeltaTable(str(t), version=0).to_pyarrow_table().column("x").to_pylist()) == [1, 2, 3]
    assert sorted(DeltaTable(str(t), version=1).to_pyarrow_table().column("x").to_pylist()) == [4]
    assert sorted(DeltaTable(str(t)).to_pyarrow_table().column("x").to_pylist()) == [4, 5]
    # a second maintenance an hour later (the checkpoint of version 0 is older now) keeps it too
    ck = t / "_delta_log" / f"{0:020d}.checkpoint.parquet"
    os.utime(ck, (time.time() - 3600, time.time() - 3600))
    maintenance.maintain_table(str(t), "output", 90 * 60.0)
    assert DeltaTable(str(t), version=0).to_pyarrow_table().num_rows == 3


def test_an_output_folder_named_like_a_work_folder_keeps_its_history(tmp_path, monkeypatch):
    """An S2J-like directory output called ``jobs_work``: its task tables are user tables (kept for
    the retention); only its declared ``_state``/``_work`` folders are internal."""
    from simjoin.runtime import maintenance

    monkeypatch.setenv("SIMJOIN_RETENTION_CHECK", "0")
    out = tmp_path / "jobs_work"
    task, state = out / "gaps", out / "_state" / "progress"
    for p in (task, state):
        write_deltalake(str(p), pa.table({"unit": pa.array([0], pa.int64())}), description="simjoin.owner=s2j")
        write_deltalake(str(p), pa.table({"unit": pa.array([1], pa.int64())}), mode="overwrite")
    ck = out / "_checkpoint"
    ck.mkdir()
    (ck / "simjoin.json").write_text(json.dumps({"output": str(out), "pipeline": "s2j", "created": [str(out)]}))
    from simjoin.pipeline.maintain import layout_of
    from simjoin.pipeline.registry import get_spec

    res = maintenance.maintain_output(str(out), 7200.0, layout=layout_of(get_spec("s2j"), str(out)))
    roles = {Path(r.path).relative_to(out).as_posix(): r.role for r in res.tables}
    assert roles == {"gaps": "output", "_state/progress": "internal"}
    assert DeltaTable(str(task), version=0).to_pyarrow_table().num_rows == 1  # time travel still reads


def _pairs_of(out: Path) -> list[tuple[int, int]]:
    t = DeltaTable(str(out)).to_pyarrow_table(columns=["left_id", "right_id"])
    return sorted(zip(t.column("left_id").to_pylist(), t.column("right_id").to_pylist(), strict=True))


@pytest.mark.parametrize("follow", [False, True], ids=["backlog", "follow-catch-up"])
def test_sigterm_stops_a_backlog_between_units_and_a_restart_resumes(tmp_path, follow):
    """Issue 56 (8): with a backlog of 20 units, SIGTERM after the first unit still published all
    20 before exiting. Now the unit in progress is published and the run stops (exit 0); a
    restart publishes the rest, and the pairs equal an uninterrupted run's."""
    import signal

    for k in range(20):
        for name, base in (("l", 0), ("r", 1000)):
            write_deltalake(str(tmp_path / name), pa.table({
                "id": pa.array([base + 2 * k, base + 2 * k + 1], pa.int64()),
                "ts": pa.array([T0 + dt.timedelta(seconds=k), T0 + dt.timedelta(seconds=k, milliseconds=500)],
                               pa.timestamp("us", tz="UTC")),
                "k": pa.array([k % 3, (k + 1) % 3], pa.int64())}), mode="append")

    def args(out: str) -> list[str]:
        return [str(BIN / "simjoin"), "hypercube", "--left", str(tmp_path / "l"), "--right", str(tmp_path / "r"),
                "--output", out, "--key", "k", "--window", "5s", "--workers", "2", "--max-records-per-unit", "4"]

    out = str(tmp_path / "out")
    p = subprocess.Popen(args(out) + (["--follow", "--trigger", "1s"] if follow else []), stderr=subprocess.PIPE,
                         text=True)
    seen = []
    assert p.stderr is not None
    for line in p.stderr:
        seen.append(line)
        if " unit 0 published" in line:
            t0 = time.monotonic()
            p.send_signal(signal.SIGTERM)
            break
    rest = p.stderr.read()
    assert p.wait(120) == 0, "".join(seen)[-2000:] + rest[-2000:]
    took = time.monotonic() - t0
    published = DeltaTable(f"{out}_state/progress").to_pyarrow_table().num_rows
    assert 1 <= published <= 2, f"{published} units published after SIGTERM at unit 0"
    assert "stopping after the unit in progress" in rest and "stopped between units" in rest, rest[-2000:]
    assert took < 60
    _cli(*args(out)[1:])  # the restart: the rest of the backlog
    _cli(*args(str(tmp_path / "ref"))[1:])
    assert DeltaTable(f"{out}_state/progress").to_pyarrow_table().num_rows > published
    assert _pairs_of(Path(out)) == _pairs_of(tmp_path / "ref") and _pairs_of(Path(out))


def _s2j_piece(root: Path, k: int) -> None:
    import numpy as np

    rng = np.random.default_rng(k)
    for name, base in (("left", 0), ("right", 10_000)):
        n = 30
        write_deltalake(str(root / name), pa.table({
            "id": pa.array(base + k * 100 + np.arange(n), pa.int64()),
            "ts": pa.array([T0 + dt.timedelta(minutes=10 * k, seconds=int(s)) for s in rng.integers(0, 300, n)],
                           pa.timestamp("us", tz="UTC")),
            "pm25": rng.uniform(0, 150, n)}), mode="append")


def _age_log(table: Path, hours: float) -> None:
    """Every commit file of ``table`` looks ``hours`` old to the log cleanup (its file time)."""
    old = time.time() - hours * 3600
    for f in (table / "_delta_log").iterdir():
        if f.suffix == ".json":
            os.utime(f, (old, old))


def test_s2j_snapshots_outlive_the_log_cleanup_and_an_output_named_work_keeps_them(tmp_path):
    """Issue 56 (4): an S2J output folder named ``*_work`` lost its tasks' history at maintenance
    (taken for internal tables, retention 0): ``s2j query`` then said "no snapshot yet". And
    snapshots lived only in commit metadata: once the log was older than the retention, even the
    latest query failed while the table held its rows. Now the snapshot index is data
    (``DIR/_snapshots``): the latest snapshot reads after any cleanup, an older one within the
    retention reads, and one older than the retention is refused in one line naming it."""
    out = tmp_path / "jobs_work"
    for k in range(3):
        _s2j_piece(tmp_path, k)
        _cli("s2j", "run", "--left", str(tmp_path / "left"), "--right", str(tmp_path / "right"), "--output",
             str(out), "--window", "20m", "--workers", "2", "--task", "gap: abs(l.pm25 - r.pm25) > 40")
    index = sorted(DeltaTable(str(out / "_snapshots")).to_pyarrow_table().to_pylist(), key=lambda r: r["snapshot"])
    assert sorted((r["snapshot"], r["task"]) for r in index) == [(0, "gap"), (1, "gap"), (2, "gap")]
    rows = DeltaTable(str(out / "gap")).to_pyarrow_table().num_rows
    first = DeltaTable(str(out / "gap"), version=index[0]["version"]).to_pyarrow_table().num_rows
    assert 0 < first < rows

    def query(*extra: str) -> subprocess.CompletedProcess:
        return _cli("s2j", "query", "--output", str(out), "--task", "gap", "--limit", "0", *extra, ok=False)

    _cli("maintain", "--output", str(out), "--retention", "2h")
    q = query("--snapshot", "0")
    assert q.returncode == 0 and q.stdout.strip().splitlines()[-1].startswith(f"s2j query: {first} pairs"), q.stderr
    # three hours later: the tasks' early log is past the retention and cleaned up
    for t in (out / "gap", out / "_snapshots"):
        _age_log(t, 3)
    _cli("maintain", "--output", str(out), "--retention", "2h")
    q = query()
    assert q.returncode == 0 and q.stdout.strip().splitlines()[-1].startswith(f"s2j query: {rows} pairs"), \
        q.stdout[-500:] + q.stderr[-1500:]
    q = query("--snapshot", "0")
    assert q.returncode == 2 and "\n" not in q.stderr.strip(), q.stderr
    assert "older than the table's retention (7200 seconds)" in q.stderr and "the latest, 2" in q.stderr
    # --reset clears the index with the tables it indexes: the next snapshot 0 is the only one
    _cli("s2j", "run", "--left", str(tmp_path / "left"), "--right", str(tmp_path / "right"), "--output",
         str(out), "--window", "20m", "--workers", "2", "--task", "gap: abs(l.pm25 - r.pm25) > 40", "--reset")
    index = DeltaTable(str(out / "_snapshots")).to_pyarrow_table().to_pylist()
    assert [(r["snapshot"], r["unit"]) for r in index] == [(0, 0)]


def test_the_in_process_estimate_counts_decoded_text_and_the_memory_really_available(tmp_path, monkeypatch):
    """Issue 56 (9): 200k records of compressible text (1.1 MiB of Parquet) were estimated at
    128 MiB while the decoded text alone was 472 MiB, and the physical RAM was assumed free (no
    container limit, no concurrent run). Here at a tenth of the size: the estimate covers the
    decoded text; a cgroup limit below it, or other runs' reservations, send the join to Spark,
    and the reason says so."""
    from jobs.ssj.placement import choose
    from simjoin import memory
    from simjoin.pipeline import get_spec
    from simjoin.runtime.placement import in_process_bytes

    n = 20_000
    base = " ".join(f"w{i}" for i in range(400))  # 2 KiB of text, the same in every row
    texts = [f"{base} x{i % 7}" for i in range(n)]
    decoded = sum(len(t) for t in texts)
    src = tmp_path / "sets"
    write_deltalake(str(src), pa.table({"id": pa.array(range(n), pa.int64()), "text": texts}))
    parquet = sum(f.stat().st_size for f in src.glob("*.parquet"))
    assert parquet * 20 < decoded  # compressible: the old estimate (12 x Parquet) misses it
    assert in_process_bytes(n, parquet) < decoded

    monkeypatch.setenv("SIMJOIN_MEMORY_LEDGER", str(tmp_path / "ledger"))
    job = get_spec("ssj").make_run({"input": str(src), "output": str(tmp_path / "out"), "threshold": 0.8})
    where = choose(job, [(0, str(src))], {0: 0})
    assert where.in_process and where.estimated_bytes >= 12 * decoded * 0.95, where
    assert "MiB of text decoded" in where.reason and "available" in where.reason
    # this process reserved it: another process planning now sees it (its own reservation is not counted)
    others = subprocess.run([sys.executable, "-c", "from simjoin.memory import reserved_by_others as r; print(r())"],
                            capture_output=True, text=True, env={**os.environ}, check=True)
    assert int(others.stdout) == where.estimated_bytes
    # a container limit below the estimate: Spark, and the reason names the cgroup
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "meminfo").write_text("MemTotal:       24000000 kB\nMemAvailable:   20000000 kB\n")
    (root / "sys" / "fs" / "cgroup").mkdir(parents=True)
    (root / "sys" / "fs" / "cgroup" / "memory.max").write_text(str(512 * 2**20))
    (root / "sys" / "fs" / "cgroup" / "memory.current").write_text(str(100 * 2**20))
    room = memory.available_memory(str(root), ledger=str(tmp_path / "empty"))
    assert room.bytes == 412 * 2**20 and "cgroup limit 0.5 GiB" in room.source
    monkeypatch.setattr(memory, "available_memory", lambda *a, **k: room)
    where = choose(job, [(0, str(src))], {0: 0})
    assert where.executor == "spark" and "cgroup limit 0.5 GiB" in where.reason, where


def _killed_in_process(key: str, ledger: Path) -> int:
    """A process that runs a join in process for ``key`` and is killed (SIGKILL, as the kernel's
    OOM killer does): what it leaves in the memory ledger is all a later attempt can know."""
    code = ("import os, signal; from simjoin.memory import hold; "
            f"hold({key!r}, 'ssj join'); os.kill(os.getpid(), signal.SIGKILL)")
    p = subprocess.run([sys.executable, "-c", code], env={**os.environ, "SIMJOIN_MEMORY_LEDGER": str(ledger)})
    assert p.returncode == -9
    return 0


def test_an_in_process_run_killed_for_memory_is_retried_on_spark(spark, tmp_path, monkeypatch):
    """Issue 56 (6): a run killed while it ran in process (out of memory) is retried on the Spark
    path, and the reason is recorded: the next run of the output chooses Spark; an Airflow retry of
    the killed join task runs the join, gate and publish on Spark, with the same pairs."""
    from jobs.ssj import increment
    from jobs.ssj.placement import choose, memory_key
    from simjoin.pipeline import get_spec
    from simjoin.pipeline.runner import run_stage

    ledger = tmp_path / "ledger"
    monkeypatch.setenv("SIMJOIN_MEMORY_LEDGER", str(ledger))
    sets = tmp_path / "sets"
    _sets(sets)
    ref = tmp_path / "ref"
    _ssj(spark, sets, ref, "R")  # uninterrupted, in process
    # 1. the next run of an output whose last in-process run was killed takes Spark
    out = tmp_path / "out"
    params = {"input": str(sets), "output": str(out), "threshold": 0.5}
    job = get_spec("ssj").make_run(params)
    _killed_in_process(memory_key(job), ledger)
    where = choose(job, [(0, str(sets))], {0: 0})
    assert where.executor == "spark" and "was killed before it ended" in where.reason, where
    assert choose(job, [(0, str(sets))], {0: 0}).in_process  # the record was the last run's: consumed
    # 2. an Airflow-like run, one stage per process attempt: tokenize in process, the join killed
    # in process, then its retry
    spec = get_spec("ssj")
    names = [s.name for s in spec.stages]
    for st in names[: names.index("join")]:
        run_stage(spec, st, params, run_id="A", spark=spark)
    assert increment.load(spark, spec.make_run(params, "A")).in_process
    _killed_in_process(memory_key(job), ledger)
    for st in names[names.index("join"):]:
        run_stage(spec, st, params, run_id="A", spark=spark)
    inc = increment.read_rows(spark, spec.make_run(params, "A"))["A"]
    assert inc["executor"] == "spark" and "in-process join of this run" in inc["executor_reason"], inc
    got = DeltaTable(str(out)).to_pyarrow_table(columns=["left_id", "right_id", "similarity"])
    want = DeltaTable(str(ref)).to_pyarrow_table(columns=["left_id", "right_id", "similarity"])
    assert sorted(got.to_pylist(), key=str) == sorted(want.to_pylist(), key=str) and want.num_rows
