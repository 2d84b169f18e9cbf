"""Maintenance's promise as a property (issue 56): over random sequences of appends, replacing
writes, maintenance with random retentions (whole hours and not: 60-200 minutes) and clock
advances, on two stream-like outputs whose names share a prefix (``out`` and ``out_x``):

- every version of ``out``'s user tables current at some moment within the retention still reads,
  with exactly the rows it had (within the shortest window so far: a later, longer retention cannot
  bring back what an earlier, shorter one let go);
- its current rows never change;
- maintaining ``out`` never changes anything of ``out_x`` (its versions, rows and files).

The clock advances by ageing every commit (its ``commitInfo`` time, the removes' deletion times,
the log files' modification times: what vacuum and the log cleanup go by). Real Delta tables
(deltalake), real maintenance (``simjoin.spark.maintenance``). A fast subset runs in ``make test``,
more seeds under ``-m exhaustive``.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from simjoin.spark import maintenance

HOUR = 3600.0


def _age(table: Path, seconds: float) -> None:
    """Every commit of ``table`` happened ``seconds`` earlier."""
    ms = int(seconds * 1000)
    for f in (table / "_delta_log").iterdir():
        if f.suffix == ".json" and f.name[:20].isdigit():
            lines = []
            for line in f.read_text().splitlines():
                a = json.loads(line)
                for key, field in (("commitInfo", "timestamp"), ("remove", "deletionTimestamp"),
                                   ("add", "modificationTime")):
                    if key in a and a[key].get(field) is not None:
                        a[key][field] = int(a[key][field]) - ms
                lines.append(json.dumps(a))
            f.write_text("\n".join(lines) + "\n")
        if f.is_file():
            st = f.stat()
            os.utime(f, (st.st_atime - seconds, st.st_mtime - seconds))


def _rows(t: DeltaTable) -> list[int]:
    return sorted(t.to_pyarrow_table(columns=["x"]).column("x").to_pylist())


class Output:
    """A stream-like output: the pairs and ``_stats`` (user tables), a state table, an identity file."""

    def __init__(self, root: Path, name: str) -> None:
        self.out = root / name
        self.user = [self.out, root / f"{name}_stats"]
        self.state = root / f"{name}_state" / "progress"
        ck = root / f"{name}_checkpoint"
        ck.mkdir(parents=True)
        (ck / "simjoin.json").write_text(json.dumps({
            "output": str(self.out), "pipeline": "ineq",
            "created": [str(self.out), str(root / f"{name}_stats"), str(root / f"{name}_state"), str(ck)]}))
        self.next = 0
        #: the earliest moment every maintenance so far promised to keep (a later, longer retention
        #: cannot bring back what an earlier, shorter one let go)
        self.cut = float("-inf")
        #: per user table: (commit time in seconds since the epoch, rows) of every version so far
        self.versions: dict[Path, list[tuple[float, list[int]]]] = {t: [] for t in self.user}
        for t in [*self.user, self.state]:
            self.write(t, "append")

    def write(self, table: Path, mode: str) -> None:
        n = 3
        xs = pa.array(range(self.next, self.next + n), pa.int64())
        data = pa.table({"x": xs, "unit": xs})
        self.next += n
        write_deltalake(str(table), data, mode=mode, description="simjoin.owner=ineq")
        self.record(table)

    def record(self, table: Path) -> None:
        if table in self.versions:
            t = DeltaTable(str(table))
            known = len(self.versions[table])
            for v in range(known, t.version() + 1):
                ts = DeltaTable(str(table), version=v).history(1)[0]["timestamp"] / 1000
                self.versions[table].append((ts, _rows(DeltaTable(str(table), version=v))))

    def age(self, seconds: float) -> None:
        for t in [*self.user, self.state]:
            _age(t, seconds)
        for t in self.user:
            self.versions[t] = [(ts - seconds, rows) for ts, rows in self.versions[t]]
        self.cut -= seconds

    def maintain(self, retention_s: float) -> None:
        self.cut = max(self.cut, time.time() - retention_s)
        maintenance.maintain_output(str(self.out), retention_s, internal=[f"{self.out}_state"])
        for t in self.user:
            self.record(t)

    def check(self) -> None:
        """Every version current at some moment since the cut (the last retention, or an earlier
        shorter one) reads, with its rows."""
        now = time.time()
        for t, vs in self.versions.items():
            for v, (_ts, rows) in enumerate(vs):
                until = vs[v + 1][0] if v + 1 < len(vs) else now
                if until >= self.cut:
                    got = _rows(DeltaTable(str(t), version=v))
                    assert got == rows, f"{t.name} v{v} (current until {now - until:.0f}s ago) reads {got}"
            assert _rows(DeltaTable(str(t))) == vs[-1][1]


def _fingerprint(o: Output) -> dict[str, object]:
    out: dict[str, object] = {}
    for t in [*o.user, o.state]:
        d = DeltaTable(str(t))
        out[t.name] = (d.version(), _rows(d), sorted(os.listdir(t)), sorted(os.listdir(t / "_delta_log")))
    return out


def _walk(root: Path, seed: int, steps: int) -> None:
    rng = random.Random(seed)
    mine, other = Output(root, "out"), Output(root, "out_x")
    retention = HOUR
    for _ in range(steps):
        op = rng.choice(["append", "append", "overwrite", "advance", "advance", "maintain", "state"])
        if op in ("append", "overwrite"):
            mine.write(rng.choice(mine.user), op)
        elif op == "state":
            mine.write(mine.state, "overwrite")
        elif op == "advance":
            minutes = rng.choice([5, 20, 45, 70, 130])
            mine.age(minutes * 60)
            other.age(minutes * 60)
        else:
            retention = rng.choice([60, 75, 90, 120, 150, 200]) * 60.0
            before = _fingerprint(other)
            mine.maintain(retention)
            assert _fingerprint(other) == before, "maintaining out changed out_x"
            mine.check()
    retention = rng.choice([60, 90, 150]) * 60.0
    mine.maintain(retention)
    mine.check()


#: make test: four walks of 40 steps, seeds on which the earlier rules (vacuum rounded down to whole
#: hours, no checkpoint at the cutoff) lost a version within the retention
FAST_SEEDS = (3, 5, 8, 9)


@pytest.mark.parametrize("seed", FAST_SEEDS)
def test_maintenance_keeps_every_version_within_the_retention_and_no_other_output_changes(tmp_path, seed,
                                                                                         monkeypatch):
    monkeypatch.setenv("SIMJOIN_RETENTION_CHECK", "0")
    _walk(tmp_path, seed, 40)


@pytest.mark.exhaustive
@pytest.mark.parametrize("seed", [s for s in range(40) if s not in FAST_SEEDS])
def test_maintenance_property_more_seeds(tmp_path, seed, monkeypatch):
    monkeypatch.setenv("SIMJOIN_RETENTION_CHECK", "0")
    _walk(tmp_path, seed, 40)
