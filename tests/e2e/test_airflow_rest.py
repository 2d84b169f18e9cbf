"""Airflow end to end through its REST API, as a user drives it: `airflow standalone` in a
temporary AIRFLOW_HOME with the project's dags/, on a free loopback port that is not Airflow's
default (so the execution API URL must follow the port), its tasks on the warm Spark
(`simjoin spark-server`, Spark Connect). With a JWT from /auth/token the test unpauses
simjoin_ssj, triggers it with a conf that overrides Params, polls until the run succeeds, and
reads the Delta output; then a bad conf fails its first task once, with the validation message
in the task log, and writes nothing. Unauthenticated calls get 401."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.tools.airflow_stack import Stack, free_port

BIN = Path(sys.executable).parent


def _pairs(path: str) -> set[tuple[int, int]]:
    from deltalake import DeltaTable

    t = DeltaTable(path).to_pyarrow_table(columns=["left_id", "right_id"])
    return set(zip(t.column("left_id").to_pylist(), t.column("right_id").to_pylist(), strict=True))


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    root = tmp_path_factory.mktemp("airflow-e2e")
    port = free_port()
    assert port != 8080 and port != 8793
    s = Stack(home=str(root / "home"), api_port=port, warm=True, connect_port=free_port(),
              warehouse=str(root / "warehouse"), env={"SIMJOIN_SSJ_SCHEDULE": "asset"})
    try:
        s.start(timeout=300, wait_for_dags=("simjoin_ssj", "simjoin_generate", "simjoin_s3j"))
        yield s
    finally:
        s.stop()


def _cli(stack: Stack, *args: str) -> str:
    p = subprocess.run([str(BIN / "simjoin"), *args], capture_output=True, text=True, timeout=600, env=stack.env)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


@pytest.mark.airflow
def test_rest_trigger_on_a_moved_port_runs_on_the_warm_spark(stack, tmp_path):
    wh = stack.env["SIMJOIN_WAREHOUSE"]
    sets, out, ref = f"{wh}/e2e_sets", f"{wh}/e2e_pairs", f"{wh}/e2e_pairs_cli"
    assert stack.env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == f"http://127.0.0.1:{stack.port}/execution/"
    _cli(stack, "generate", "sets", "--out", sets, "--rows", "3000", "--seed", "7")
    _cli(stack, "ssj", "--input", sets, "--output", ref, "--threshold", "0.6")

    # unauthenticated: 401, nothing triggered
    status, _ = stack.request("GET", "/api/v2/dags", auth=False, ok=(401, 403))
    assert status == 401
    status, _ = stack.request("POST", "/api/v2/dags/simjoin_ssj/dagRuns", {"logical_date": None},
                              auth=False, ok=(401, 403))
    assert status == 401

    run_id = stack.trigger("simjoin_ssj", {"input": sets, "output": out, "threshold": 0.6})
    run = stack.wait("simjoin_ssj", run_id, timeout=600)
    tis = stack.task_instances("simjoin_ssj", run_id)
    assert run["state"] == "success", [(t["task_id"], t["state"]) for t in tis]
    assert {t["task_id"] for t in tis} == {"tokenize", "gate_tokens", "optimize", "join", "gate_pairs", "publish",
                                          "maintain"}  # the tables' maintenance after every run
    assert all(t["state"] == "success" and t["try_number"] == 1 for t in tis)
    got = _pairs(out)
    assert got and got == _pairs(ref)  # the DAG's pairs are the CLI's, pair for pair

    # in process (issue 43: the join fits this machine): every task recorded its timing, and none
    # opened a Spark session
    from deltalake import DeltaTable

    timing = DeltaTable(f"{wh}/_simjoin/task_timing").to_pandas()
    mine = timing[(timing["run_id"] == run_id) & (timing["mode"] == "airflow")]
    assert set(mine["stage"]) == {t["task_id"] for t in tis} - {"maintain"}  # maintenance: deltalake, no stage
    assert (mine["spark"] == "none").all(), mine[["stage", "spark"]]

    # the Spark path (--executor spark): every task connects to the warm Spark, in well under 2 s
    run_id = stack.trigger("simjoin_ssj", {"input": sets, "output": out + "_spark", "threshold": 0.6,
                                           "executor": "spark"})
    run = stack.wait("simjoin_ssj", run_id, timeout=600)
    tis = stack.task_instances("simjoin_ssj", run_id)
    assert run["state"] == "success", [(t["task_id"], t["state"]) for t in tis]
    assert _pairs(out + "_spark") == got  # the same pairs on either path
    timing = DeltaTable(f"{wh}/_simjoin/task_timing").to_pandas()
    mine = timing[(timing["run_id"] == run_id) & (timing["mode"] == "airflow")]
    assert set(mine["stage"]) == {t["task_id"] for t in tis} - {"maintain"}
    # the gates read Spark's frames on this path too: every task holds a session
    assert (mine["spark"] == "warm").all(), mine[["stage", "spark"]]
    # a Connect session opens in about 1 s; a fresh JVM takes 10 s or more (a loose bound: 2 busy cores)
    assert mine["startup_s"].max() < 8.0, mine[["stage", "startup_s"]]
    log_text = stack.task_log("simjoin_ssj", run_id, "join")
    assert "Spark start-up" in log_text and "warm" in log_text


@pytest.mark.airflow
def test_bad_conf_fails_once_with_the_message_and_writes_nothing(stack):
    wh = stack.env["SIMJOIN_WAREHOUSE"]
    out = f"{wh}/e2e_bad_pairs"
    status, body = stack.request("POST", "/api/v2/dags/simjoin_ssj/dagRuns",
                                 {"logical_date": None, "conf": {"threshold": 1.5}}, ok=(200, 400, 422))
    if status == 200:  # accepted by the API: the first task must fail, once, with the Param's message
        run = stack.wait("simjoin_ssj", body["dag_run_id"], timeout=300)
        assert run["state"] == "failed"
    else:
        assert "threshold" in str(body) or "1.5" in str(body)

    # a conf the Params accept but the config rejects: right == left
    sets = f"{wh}/e2e_sets"
    run_id = stack.trigger("simjoin_ssj", {"input": sets, "right": sets, "output": out})
    run = stack.wait("simjoin_ssj", run_id, timeout=300)
    assert run["state"] == "failed"
    tis = {t["task_id"]: t for t in stack.task_instances("simjoin_ssj", run_id)}
    assert tis["tokenize"]["state"] == "failed" and tis["tokenize"]["try_number"] == 1  # not retried
    text = stack.task_log("simjoin_ssj", run_id, "tokenize")
    assert "right" in text and "allowed" in text, text[-2000:]
    assert not os.path.exists(out)

    # an unknown column: the first task fails once, naming the column and what the table has
    run_id = stack.trigger("simjoin_ssj", {"input": sets, "output": out, "text_col": "no_such_col"})
    run = stack.wait("simjoin_ssj", run_id, timeout=300)
    assert run["state"] == "failed"
    tis = {t["task_id"]: t for t in stack.task_instances("simjoin_ssj", run_id)}
    assert tis["tokenize"]["state"] == "failed" and tis["tokenize"]["try_number"] == 1
    text = stack.task_log("simjoin_ssj", run_id, "tokenize")
    assert "no_such_col" in text and "allowed" in text, text[-2000:]
    assert not os.path.exists(out)


@pytest.mark.airflow
def test_a_generate_run_writing_the_input_starts_the_join_through_its_asset(stack):
    """simjoin_ssj is scheduled on its input table's Asset (SIMJOIN_SSJ_SCHEDULE=asset): a
    simjoin_generate run that writes that table starts it, and it joins what was written."""
    wh = stack.env["SIMJOIN_WAREHOUSE"]
    sets, out, ref = f"{wh}/sets", f"{wh}/ssj_pairs", f"{wh}/asset_pairs_cli"
    stack.request("PATCH", "/api/v2/dags/simjoin_ssj", {"is_paused": False})
    gen = stack.trigger("simjoin_generate", {"kind": "sets", "out": sets, "rows": 2000, "seed": 11,
                                             "overwrite": True})
    assert stack.wait("simjoin_generate", gen, timeout=300)["state"] == "success"
    deadline = time.monotonic() + 120
    runs: list = []
    while time.monotonic() < deadline and not runs:
        _, body = stack.request("GET", "/api/v2/dags/simjoin_ssj/dagRuns?run_type=asset_triggered")
        runs = body["dag_runs"]
        time.sleep(1)
    assert runs, "no asset-triggered simjoin_ssj run after simjoin_generate wrote its input"
    run = stack.wait("simjoin_ssj", runs[0]["dag_run_id"], timeout=600)
    assert run["state"] == "success", [(t["task_id"], t["state"]) for t in
                                       stack.task_instances("simjoin_ssj", runs[0]["dag_run_id"])]
    _cli(stack, "ssj", "--input", sets, "--output", ref)
    got = _pairs(out)
    assert got and got == _pairs(ref)


def _append_later(path: str, seconds: float) -> None:
    """Append a copy of a stream's rows with new ids, ``seconds`` later: the next micro-batch."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable, write_deltalake

    t = DeltaTable(path).to_pyarrow_table()
    i_id, i_ts = t.schema.get_field_index("id"), t.schema.get_field_index("ts")
    ids, ts = t.column("id"), t.column("ts")
    t = t.set_column(i_id, t.schema.field(i_id), pc.add(ids, pa.scalar(pc.max(ids).as_py() + 1, ids.type)))
    shift = pa.scalar(dt.timedelta(seconds=seconds), pa.duration(ts.type.unit))
    t = t.set_column(i_ts, t.schema.field(i_ts), pc.add(ts, shift).cast(ts.type))
    write_deltalake(path, t, mode="append")


@pytest.mark.airflow
@pytest.mark.exhaustive  # make test: test_s3j_dag runs the in_process task through dag.test, against brute force
def test_an_s3j_micro_batch_runs_in_one_in_process_task_on_no_spark_session(stack):
    """simjoin_s3j through REST over a few hundred new rows: ingest reads the inputs by their
    Delta logs and hands the small unit to the one ``in_process`` task (the per-stage tasks are
    skipped); neither opens a Spark session; that task announces the pairs' Asset; two
    micro-batches equal the CLI's pairs, pair for pair."""
    from deltalake import DeltaTable

    wh = stack.env["SIMJOIN_WAREHOUSE"]
    left, right, out, ref = f"{wh}/s3j_l", f"{wh}/s3j_r", f"{wh}/s3j_dag", f"{wh}/s3j_cli"
    _cli(stack, "generate", "vectors", "--out", left, "--rows", "250", "--dim", "2", "--seed", "1")
    _cli(stack, "generate", "vectors", "--out", right, "--rows", "250", "--dim", "2", "--seed", "2")
    conf = {"left": left, "right": right, "threshold": 0.02, "metric": "angular"}
    args = ["s3j", "--left", left, "--right", right, "--threshold", "0.02", "--metric", "angular"]
    stages = {"partition", "worksets", "join", "gate", "stats", "rebalance", "publish"}
    for k in range(2):
        if k:  # the next micro-batch: as many new rows, a minute later
            for path in (left, right):
                _append_later(path, 60.0)
        run_id = stack.trigger("simjoin_s3j", {**conf, "output": out})
        run = stack.wait("simjoin_s3j", run_id, timeout=600)
        tis = {t["task_id"]: t for t in stack.task_instances("simjoin_s3j", run_id)}
        assert run["state"] == "success", {t: ti["state"] for t, ti in tis.items()}
        assert {t for t, ti in tis.items() if ti["state"] == "success"} == {"ingest", "in_process", "maintain"}, tis
        assert {t for t, ti in tis.items() if ti["state"] == "skipped"} == stages
        _cli(stack, *args, "--output", ref)
        got = _pairs(out)
        assert got and got == _pairs(ref), f"micro-batch {k}: the DAG's pairs differ from the CLI's"
        timing = DeltaTable(f"{wh}/_simjoin/task_timing").to_pandas()
        mine = timing[(timing["run_id"] == run_id) & (timing["mode"] == "airflow")]
        assert set(mine["stage"]) == {"ingest", "in_process"} and (mine["spark"] == "none").all(), mine
    assert "runs its later stages in one task, in_process" in stack.task_log("simjoin_s3j", run_id, "ingest")
    assert "runs on the in-process executor" in stack.task_log("simjoin_s3j", run_id, "in_process")
    _, body = stack.request("GET", "/api/v2/assets/events?source_dag_id=simjoin_s3j&source_task_id=in_process")
    uris = {e.get("uri") or (e.get("asset") or {}).get("uri", "") for e in body["asset_events"]}
    assert any(u.endswith("/s3j_dag") for u in uris), body
