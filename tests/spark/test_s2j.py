"""``simjoin s2j`` on Spark + Delta: concurrent tasks of every type over two streams appended in
pieces (one publish crashing midway) equal the brute force pair for pair; a self-join with
snapshots on punctuation, queried one-time and continuously; forced overload (shed + processed =
input, exact on what is processed); scaling up and down; bad tasks and rows."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from simjoin.core.s2j.bruteforce import brute_force
from simjoin.core.s2j.operator import make_tuples
from simjoin.core.s2j.task import parse_tasks
from tests.helpers import run_named

T0 = dt.datetime(2026, 8, 1, tzinfo=dt.UTC)
BIN = Path(sys.executable).parent


def _gen(seed, n, base, t_max=150):
    rng = np.random.default_rng(seed)
    return {"id": np.arange(n, dtype=np.int64) * 4 + base, "ts": np.sort(rng.integers(0, t_max, n)) * 60_000_000,
            "pm25": rng.uniform(0, 150, n).round(1), "pm10": rng.uniform(0, 250, n).round(1),
            "station": rng.integers(0, 12, n).astype(np.int64), "p": np.zeros(n, bool)}


def _append(spark, path, S, idx, extra=()):
    rows = [(int(S["id"][i]), T0 + dt.timedelta(microseconds=int(S["ts"][i])), float(S["pm25"][i]),
             float(S["pm10"][i]), int(S["station"][i]), bool(S["p"][i])) for i in idx]
    spark.createDataFrame(rows + list(extra), "id long, ts timestamp, pm25 double, pm10 double, station long, p boolean") \
        .write.format("delta").mode("append").save(path)


def _tuples(S, keep=None):
    m = np.ones(len(S["id"]), bool) if keep is None else keep
    return make_tuples(S["id"][m], S["ts"][m], {c: S[c][m].astype(float) for c in ("pm25", "pm10", "station")})


def _pairs(path):
    from deltalake import DeltaTable

    t = DeltaTable(path).to_pyarrow_table()
    return list(zip(t.column("left_id").to_pylist(), t.column("right_id").to_pylist(), strict=True)), t


def _table(path):
    from deltalake import DeltaTable

    return DeltaTable(path).to_pyarrow_table()


TASKS = ["gap: abs(l.pm25 - r.pm25) > 40", "eq: l.station = r.station AND l.pm10 < r.pm10",
         "band: abs(l.pm10 - r.pm10) <= 2.5", "ineq: l.pm25 + 100 < r.pm10",
         "hot: l.pm25 > 120 AND abs(l.station - r.station) < 2"]


def test_concurrent_tasks_of_every_type_in_pieces_with_a_crash(spark, tmp_path, monkeypatch):
    L, R = _gen(31, 240, 2), _gen(32, 240, 500_002)
    out = str(tmp_path / "out")
    conf = {"left": str(tmp_path / "l"), "right": str(tmp_path / "r"), "output": out, "window": "20m",
            "workers": 2, "min_block": 16, "tasks": "; ".join(TASKS)}
    for k, idx in enumerate(np.split(np.arange(240), [80, 160])):
        # a row dated before what its stream committed (late), a NaN and a repeated live id: quarantined
        extra = [(99_999, T0, 1.0, 1.0, 1, False), (99_998, T0 + dt.timedelta(hours=3), float("nan"), 1.0, 1, False),
                 (int(L["id"][159]), T0 + dt.timedelta(hours=3), 1.0, 1.0, 1, False)] if k == 2 else ()
        _append(spark, conf["left"], L, idx, extra=extra)
        _append(spark, conf["right"], R, idx)
        if k == 1:  # task tables appended, the unit not committed: the rerun must not repeat them
            monkeypatch.setenv("SIMJOIN_FAULTS", "s2j.publish.mid")
            with pytest.raises(Exception, match="s2j.publish.mid"):
                run_named(spark, "s2j", **conf)
            monkeypatch.delenv("SIMJOIN_FAULTS")
        run_named(spark, "s2j", **conf)
    W = 20 * 60_000_000
    for t in parse_tasks(TASKS):
        got, tab = _pairs(f"{out}/{t.name}")
        ref = brute_force(t, _tuples(L), _tuples(R), W)
        assert len(got) == len(set(got)), f"{t.name}: a pair published twice"
        assert set(got) == ref and len(ref) > 0, (t.name, len(ref - set(got)), len(set(got) - ref))
        assert tab.column_names == ["left_id", "right_id", "ts"]
    q = _table(f"{out}/_quarantine").to_pydict()
    reasons = " | ".join(q["reason"])
    assert len(q["id"]) == 3 and "late" in reasons and "NaN" in reasons and "duplicate id" in reasons
    st = _table(f"{out}/_stats").to_pandas()
    unit = st[st["level"] == "unit"]
    # source sharing: each micro-batch is read once, whatever the number of tasks
    assert len(unit) == 3 and (unit["input_scans"] == 1).all() and (unit["tasks"] == len(TASKS)).all()
    assert (unit["shed"] == 0).all() and (unit["tau"] == 0).all()  # no capacity: never overloaded
    assert set(st[st["level"] == "task"]["task"]) == {t.split(":")[0] for t in TASKS}
    # the shed table exists from the first unit, empty: nothing shed (issue 63, point 4)
    assert _table(f"{out}/_shed").num_rows == 0 and "shed_ratio" in _table(f"{out}/_shed").column_names
    # pre-projection: the blocks hold only the tasks' columns
    from simjoin.core.s2j.join import Block

    blob = _table(f"{out}/_state/blocks").column("blob")[0].as_py()
    assert sorted(Block.from_bytes(blob).tuples.cols) == ["pm10", "pm25", "station"]


def test_self_join_snapshots_on_punctuation_query_and_follow(spark, tmp_path):
    S = _gen(41, 150, 7, t_max=90)
    S["p"][[10, 149]] = True  # punctuation tuples in the 1st and 3rd pieces
    out = str(tmp_path / "out")
    conf = {"left": str(tmp_path / "s"), "output": out, "window": "10m", "workers": 3, "min_block": 8,
            "tasks": "gap: abs(l.pm25 - r.pm25) > 100", "punctuation": "p"}
    for idx in np.split(np.arange(150), [40, 90]):
        _append(spark, conf["left"], S, idx)
        run_named(spark, "s2j", **conf)
    t = parse_tasks(conf["tasks"])[0]
    got, _ = _pairs(f"{out}/gap")
    ref = brute_force(t, _tuples(S), None, 10 * 60_000_000)
    assert len(got) == len(set(got)) and set(got) == ref and len(ref) > 50
    from deltalake import DeltaTable

    dtab = DeltaTable(f"{out}/gap")
    tags = [json.loads(h["userMetadata"]) for h in dtab.history() if h.get("userMetadata")]
    assert sorted(x["snapshot"] for x in tags) == [0, 1] and sorted(x["unit"] for x in tags) == [0, 2]
    from simjoin.cli import cli_group

    r = CliRunner().invoke(cli_group(), ["s2j", "query", "--output", out, "--task", "gap", "--snapshot", "0",
                                         "--limit", "0"])
    assert r.exit_code == 0, r.output
    first = {(int(a), int(b)) for a, b, _ in (ln.split(",") for ln in r.output.splitlines()[1:-1])}
    assert first and first < set(got)
    assert all(max(S["ts"][(S["id"] == a)][0], S["ts"][(S["id"] == b)][0]) <= S["ts"][39] for a, b in first)
    r = CliRunner().invoke(cli_group(), ["s2j", "query", "--output", out, "--task", "gap",
                                         "--from", (T0 + dt.timedelta(minutes=30)).isoformat(),
                                         "--to", (T0 + dt.timedelta(minutes=60)).isoformat()])
    assert r.exit_code == 0, r.output
    n_span = sum(1 for a, b in got if 30 * 60e6 <= max(S["ts"][S["id"] == a][0], S["ts"][S["id"] == b][0]) < 60 * 60e6)
    assert r.output.strip().splitlines()[-1].startswith(f"s2j query: {n_span} pairs of task gap")
    # follow: every snapshot from the start, then stop
    p = subprocess.run([str(BIN / "simjoin"), "s2j", "follow", "--output", out, "--task", "gap", "--from-start",
                        "--max-snapshots", "2", "--interval", "0.1"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    import re

    rows = [ln for ln in lines if re.match(r"snapshot \d+: \d+,\d+,", ln)]
    assert len(rows) == len(got) and {tuple(map(int, r.split(": ")[1].split(",")[:2])) for r in rows} == set(got)
    assert lines[-1] == f"s2j follow: 2 snapshots, {len(got)} pairs of task gap; stopped"


def test_follow_stops_cleanly_on_sigint(tmp_path):
    out = tmp_path / "none"
    p = subprocess.Popen([str(BIN / "simjoin"), "s2j", "follow", "--output", str(out), "--task", "gap",
                          "--interval", "0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(4)
    p.send_signal(signal.SIGINT)
    stdout, _ = p.communicate(timeout=60)
    assert p.returncode == 0 and stdout.strip().endswith("s2j follow: 0 snapshots, 0 pairs of task gap; stopped")


def test_forced_overload_sheds_and_stays_exact(spark, tmp_path):
    L, R = _gen(51, 300, 1, t_max=60), _gen(52, 300, 700_001, t_max=60)
    out = str(tmp_path / "out")
    conf = {"left": str(tmp_path / "l"), "right": str(tmp_path / "r"), "output": out, "window": "30m",
            "workers": 2, "capacity": 100, "tau1": 0.6, "tau2": 1.0, "beta": 0.5, "tau0": 0.1, "shed_base": 0.1,
            "sustain": 1000, "min_block": 16, "tasks": "gap: abs(l.pm25 - r.pm25) > 40; eq: l.station = r.station"}
    for idx in np.split(np.arange(300), [100, 200]):
        _append(spark, conf["left"], L, idx)
        _append(spark, conf["right"], R, idx)
        run_named(spark, "s2j", **conf)
    shed = _table(f"{out}/_shed").to_pydict()
    st = _table(f"{out}/_stats").to_pandas()
    unit = st[st["level"] == "unit"].sort_values("unit")
    from simjoin.core.s2j.adapt import Thresholds, shed_count, shed_ratio

    th = Thresholds(tau0=0.1, tau1=0.6, tau2=1.0, beta=0.5, base=0.1)
    for _, u in unit.iterrows():  # the ratio follows the model, the count follows the ratio
        assert u["shed_ratio"] == pytest.approx(shed_ratio(u["tau"], th))
        assert u["shed"] == shed_count(u["shed_ratio"], u["tuples_in"])
        assert u["processed"] + u["shed"] == u["tuples_in"]
    assert len(shed["id"]) == unit["shed"].sum() > 100
    # processed + shed = input, and the results equal the brute force over what was processed
    shed_l = {i for s, i in zip(shed["side"], shed["id"], strict=True) if s == 0}
    shed_r = {i for s, i in zip(shed["side"], shed["id"], strict=True) if s == 1}
    kl, kr = ~np.isin(L["id"], list(shed_l)), ~np.isin(R["id"], list(shed_r))
    assert kl.sum() + len(shed_l) == 300 and kr.sum() + len(shed_r) == 300
    for t in parse_tasks(conf["tasks"]):
        got, _ = _pairs(f"{out}/{t.name}")
        assert len(got) == len(set(got)) and set(got) == brute_force(t, _tuples(L, kl), _tuples(R, kr), 30 * 60_000_000)


def test_scaling_up_and_down_keeps_results_exact(spark, tmp_path):
    L = _gen(61, 260, 3, t_max=30)
    late = _gen(62, 12, 90_003, t_max=60)
    late["ts"] = late["ts"] + 400 * 60_000_000  # a trickle long after the burst
    out = str(tmp_path / "out")
    conf = {"left": str(tmp_path / "s"), "output": out, "window": "30m", "workers": 1, "capacity": 60,
            "tau0": 0.3, "tau1": 0.95, "tau2": 0.96, "beta": 0.9, "sustain": 1, "max_workers": 6, "min_block": 4,
            "tasks": "gap: abs(l.pm25 - r.pm25) > 60; eq: l.station = r.station AND l.pm10 <= r.pm10"}
    pieces = [(L, idx) for idx in np.split(np.arange(260), [130])] + [(late, np.arange(6)), (late, np.arange(6, 12))]
    for S, idx in pieces:
        _append(spark, conf["left"], S, idx)
        run_named(spark, "s2j", **conf)
    st = _table(f"{out}/_stats").to_pandas()
    workers = list(st[st["level"] == "unit"].sort_values("unit")["workers"])
    assert max(workers) > 1 and workers[-1] < max(workers), workers
    # expired state is dropped: after 4 units no block is older than the window behind the stream
    blocks = _table(f"{out}/_state/blocks").to_pydict()
    newest = int(T0.timestamp() * 1_000_000) + int(late["ts"].max())
    assert blocks["ts_max"] and min(blocks["ts_max"]) > newest - 30 * 60_000_000
    both = {k: np.concatenate([L[k], late[k]]) for k in L}
    for t in parse_tasks(conf["tasks"]):
        got, _ = _pairs(f"{out}/{t.name}")
        assert len(got) == len(set(got)) and set(got) == brute_force(t, _tuples(both), None, 30 * 60_000_000)


def test_bad_tasks_and_inputs_fail_early(spark, tmp_path):
    from simjoin.config import ConfigError
    from simjoin.core.s2j.task import TaskError

    S = _gen(71, 20, 1)
    _append(spark, str(tmp_path / "s"), S, np.arange(20))
    base = {"left": str(tmp_path / "s"), "output": str(tmp_path / "out")}
    with pytest.raises(Exception, match=r"lacks columns \['zz'\]"):
        run_named(spark, "s2j", **base, tasks="x: l.zz < r.pm25")
    with pytest.raises(TaskError, match="unexpected token '<<'"):
        run_named(spark, "s2j", **base, tasks="x: l.pm25 << r.pm25")
    with pytest.raises(ConfigError, match="s2j.right"):
        run_named(spark, "s2j", **base, right=base["left"], tasks="x: l.pm25 < r.pm25")
    with pytest.raises(ConfigError, match="s2j.tau0"):
        run_named(spark, "s2j", **base, tasks="x: l.pm25 < r.pm25", tau0=0.5)
    with pytest.raises(ConfigError, match="s2j.tasks"):
        run_named(spark, "s2j", **base)
    written = sorted(os.listdir(base["output"])) if os.path.exists(base["output"]) else []
    assert written in ([], ["_checkpoint"]), written  # at most the checkpoint's identity, no table


def test_cli_takes_tasks_from_a_config_file(spark, tmp_path):
    from simjoin.cli import cli_group

    S = _gen(81, 60, 1)
    _append(spark, str(tmp_path / "s"), S, np.arange(60))
    # the README's example: the shipped conf/s2j-aqi.yaml (the paper's two air-quality tasks; every
    # other key its default)
    shipped = os.path.join(os.path.dirname(__file__), "..", "..", "conf", "s2j-aqi.yaml")
    r = CliRunner().invoke(cli_group(), ["s2j", "run", "--left", str(tmp_path / "s"), "--output", str(tmp_path / "aqi"),
                                         "--config", shipped, "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert "s2j 2 tasks (pm25, pm10), window 30m" in r.output.strip().splitlines()[-1]
    for t in parse_tasks(["pm25: abs(l.pm25 - r.pm25) > 30", "pm10: abs(l.pm10 - r.pm10) > 30"]):
        got, _ = _pairs(str(tmp_path / "aqi" / t.name))
        assert set(got) == brute_force(t, _tuples(S), None, 30 * 60_000_000)
    r = CliRunner().invoke(cli_group(), ["s2j", "run", "--left", str(tmp_path / "s"), "--output", str(tmp_path / "o"),
                                         "--config", str(tmp_path / "missing.yaml")])
    assert r.exit_code == 2 and "a readable YAML file" in r.output
