"""simjoin_ssj: validated params, six retryable stage tasks, and a real dag.test() run."""

from pathlib import Path

import pytest

from tests.helpers import outlet_uris

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(scope="module")
def dag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS)).dags["simjoin_ssj"]


def test_tasks_and_params(dag):
    from airflow.sdk.exceptions import ParamValidationError

    assert [t.task_id for t in dag.topological_sort()] == [
        "tokenize", "gate_tokens", "optimize", "join", "gate_pairs", "publish", "maintain"]
    assert all(t.retries >= 2 for t in dag.tasks)
    outs = outlet_uris(dag)
    assert outs["publish"] and outs["tokenize"][0].endswith("_tokens") and outs["join"][0].endswith("_staging")
    p = dag.params
    for key, bad in (("threshold", 0), ("threshold", 1.5), ("similarity", "overlap"), ("tokenizer", "qgram:0"),
                     ("workers", 0)):
        with pytest.raises(ParamValidationError):
            p.get_param(key).resolve(bad)
    assert p.get_param("tokenizer").resolve("qgram:3") == "qgram:3"


def test_dag_run_matches_brute_force_and_reruns_idempotently(dag, spark, tmp_path):
    from deltalake import DeltaTable

    from simjoin.core.setsim import brute_force_pairs
    from simjoin.spark import delta

    texts = ["a b c d", "a b c d", "a b c e", "x y", "x y z", "q", "", "a b c d e f g h", "a b c d e f g",
             "x y z w"]
    rows = [(i * 7, t) for i, t in enumerate(texts)] + [(100, None)]
    src, out = str(tmp_path / "in"), str(tmp_path / "pairs")
    delta.overwrite(spark.createDataFrame(rows, "id long, text string"), src)
    conf = {"input": src, "output": out, "threshold": 0.75, "workers": 2, "mod": 2}
    run = dag.test(run_conf=conf)
    assert "success" in str(run.state).lower()
    good = [(i * 7, set(t.split())) for i, t in enumerate(texts) if t.strip()]
    ids = [g[0] for g in good]
    vocab = {w: k for k, w in enumerate(sorted({w for _, s in good for w in s}))}
    ref = {(ids[x], ids[y]) for x, y, _ in brute_force_pairs([sorted(vocab[w] for w in s) for _, s in good], 0.75)}

    def pairs_of(run_id):
        t = DeltaTable(out).to_pyarrow_table().to_pydict()
        return sorted((a, b) for a, b, r in zip(t["left_id"], t["right_id"], t["run_id"]) if r == run_id)

    run_id = DeltaTable(out).to_pyarrow_table().column("run_id").to_pylist()[0]
    assert pairs_of(run_id) == sorted(ref) == [(0, 7), (28, 63), (49, 56)]  # 1.0, the 0.75 tie, 0.875
    # the in-process path: no task of the run ran a Spark job (issue 43; this test process holds a
    # session, so the tasks find one: in a task process of its own none starts)
    from simjoin.pipeline.timing import timing_path

    tt = DeltaTable(timing_path()).to_pyarrow_table().to_pylist()
    mine = [r for r in tt if r["run_id"] == run_id and r["pipeline"] == "ssj"]
    assert {r["stage"] for r in mine} >= {"tokenize", "gate_tokens", "optimize", "join", "gate_pairs", "publish"}
    assert {r["spark_jobs"] for r in mine} == {0}, [(r["stage"], r["spark_jobs"]) for r in mine]
    qt = DeltaTable(out + "_quarantine").to_pyarrow_table().to_pydict()
    assert sorted(qt["reason"]) == ["empty text", "null text"]
    stats = DeltaTable(out + "_stats").to_pyarrow_table()
    assert stats.num_rows == 4 and sum(stats.column("results").to_pylist()) == 3

    # a retried task runs again under the same run id: it replaces its partition, never appends
    from simjoin.pipeline.runner import run_stage

    for stage in ("tokenize", "gate_tokens", "optimize", "join", "gate_pairs", "publish"):
        run_stage("ssj", stage, conf, run_id)
    assert pairs_of(run_id) == sorted(ref)
    assert DeltaTable(out + "_stats").to_pyarrow_table().num_rows == 4
    # the same run's tasks again on the Spark path, each its own task: the same tables
    for stage in ("tokenize", "gate_tokens", "optimize", "join", "gate_pairs", "publish"):
        run_stage("ssj", stage, {**conf, "executor": "spark"}, run_id)
    assert pairs_of(run_id) == sorted(ref)
    assert DeltaTable(out + "_stats").to_pyarrow_table().num_rows == 4
    inc = DeltaTable(out + "_increments").to_pyarrow_table().to_pylist()
    assert [r["executor"] for r in inc if r["run_id"] == run_id] == ["spark"]


def test_background_gate_runs_beside_the_join_and_gates_publish(airflow_db):
    from simjoin.pipeline.dags import build_dag

    dag = build_dag("ssj")
    down = {t.task_id: set(t.downstream_task_ids) for t in dag.tasks}
    assert down["tokenize"] == {"gate_tokens", "optimize"}
    assert down["gate_tokens"] == {"publish"}  # not upstream of optimize or join
    assert down["optimize"] == {"join"} and down["join"] == {"gate_pairs"} and down["gate_pairs"] == {"publish"}
    assert down["publish"] == {"maintain"} and down["maintain"] == set()  # maintenance after every run
