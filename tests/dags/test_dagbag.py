"""DAGs load in a real DagBag and run with dag.test()."""

from pathlib import Path

import pytest

from tests.helpers import outlet_uris

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(scope="module")
def dagbag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_no_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert "simjoin_generate" in dagbag.dags


def test_every_dag_has_docs_tags_retries(dagbag):
    for dag_id, dag in dagbag.dags.items():
        assert dag.doc_md, dag_id
        assert "simjoin" in dag.tags, dag_id
        for t in dag.tasks:
            assert t.retries >= 2, (dag_id, t.task_id)


def test_every_task_has_an_execution_timeout(dagbag):
    """A hung task is failed after its ``execution_timeout`` (its output's lock, whose process is
    then gone, is stale): no task may run forever (simjoin.pipeline.dags.task_timeout)."""
    import datetime as dt

    assert dagbag.dags
    for dag_id, dag in dagbag.dags.items():
        for t in dag.tasks:
            assert t.execution_timeout is not None, (dag_id, t.task_id)
            assert dt.timedelta(minutes=1) <= t.execution_timeout <= dt.timedelta(days=1), (dag_id, t.task_id)


def test_dag_files_are_thin():
    for f in DAGS.glob("*.py"):
        text = f.read_text()
        assert "import numpy" not in text and "pyspark" not in text, f"{f.name} holds algorithm code"


def test_generate_params_are_validated(dagbag):
    from airflow.sdk.exceptions import ParamValidationError

    dag = dagbag.dags["simjoin_generate"]
    params = dag.params
    spec = {k: params.get_param(k).schema for k in params}
    assert spec["rows"]["minimum"] == 0 and spec["dim"]["maximum"] == 4096
    assert "pareto" in spec["dist"]["enum"] and spec["kind"]["enum"] == ["sets", "vectors", "ineq", "keys", "aqi"]
    for key, value in (("rows", -5), ("dim", 0), ("dist", "lognormal"), ("rate", 0), ("kind", "graphs")):
        with pytest.raises(ParamValidationError):
            params.get_param(key).resolve(value)
    assert params.get_param("rows").resolve(5) == 5
    outs = [u for us in outlet_uris(dag).values() for u in us]
    assert outs and all(u.startswith("file://") for u in outs)


def test_generate_dag_runs(dagbag, spark, tmp_path):
    from deltalake import DeltaTable

    dag = dagbag.dags["simjoin_generate"]
    out = str(tmp_path / "keys")
    run = dag.test(run_conf={"kind": "keys", "out": out, "rows": 777, "alpha": 1.3, "domain": 50, "seed": 3})
    assert str(run.state) in ("success", "DagRunState.SUCCESS")
    t = DeltaTable(out).to_pyarrow_table()
    assert t.num_rows == 777 and set(t.column_names) == {"id", "ts", "k", "payload"}


def test_building_the_dags_imports_no_spark():
    """DAG files are parsed often: building them from the specs must not import pyspark."""
    import subprocess
    import sys

    code = ("import sys\nfrom simjoin.pipeline.dags import build_dag\nfrom simjoin.pipeline import specs\n"
            "[build_dag(n) for n in specs()]\nprint(sorted(specs()), 'pyspark' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("False"), out


def test_every_spec_names_real_tables_and_stages():
    """Each stage's reads, writes and outlets name tables of its run; each stage function exists."""
    from simjoin.pipeline import specs
    from simjoin.pipeline.dags import dag_defaults

    for name, spec in specs().items():
        paths = spec.make_run(dag_defaults(spec)).table_paths()
        for st in spec.stages:
            for key in (*st.reads, *st.writes, *st.outlets):
                assert key in paths, (name, st.name, key, sorted(paths))
            assert callable(st.function()), (name, st.name)
        assert sum(st.publishes for st in spec.stages) <= 1, name
