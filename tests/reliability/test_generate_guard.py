"""Issue 37, item 7: ``generate --overwrite`` guards pipeline tables.

Reproduction: ``simjoin generate vectors --out <an s3j pairs table> --overwrite`` replaced the
pairs, and the ``simjoin_generate`` DAG did the same for any table under the warehouse, ``_state``
and ``_checkpoint`` included. Now a table a pipeline's stage creates carries its owner
(``simjoin.owner=<pipeline>`` in the Delta table's description); ``generate`` replaces only its
own tables and refuses, in one line naming the table and its owner, everything else."""

import glob
import os

import pytest
from click.testing import CliRunner

from simjoin.cli import cli_group
from simjoin.spark import delta
from tests.helpers import load_dag, run_named
from tests.reliability.cases import CASES

app = cli_group()


def _generate(out, *more):
    r = CliRunner().invoke(app, ["generate", "vectors", "--out", out, "--rows", "10", "--dim", "2", *more])
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    return r.exit_code, lines


@pytest.fixture(scope="module")
def s3j_out(spark, tmp_path_factory):
    """An s3j run's tables: its output, stats, quarantine, state and checkpoint."""
    folder = str(tmp_path_factory.mktemp("guard"))
    params = CASES["s3j"].make_inputs(spark, folder)
    run_named(spark, "s3j", **params)
    return params["output"]


def _snapshot(spark, path):
    return delta.latest_version(spark, path), delta.read_table(spark, path).count()


def test_generate_refuses_an_s3j_pairs_table_and_its_state(spark, s3j_out):
    state = sorted(os.path.dirname(d) for d in glob.glob(f"{s3j_out}_state/*/_delta_log"))
    assert state, os.listdir(f"{s3j_out}_state")
    for table in (s3j_out, f"{s3j_out}_stats", state[0]):
        assert delta.owner(spark, table) == "s3j", table
        before = _snapshot(spark, table)
        for more in (("--overwrite",), ()):
            code, lines = _generate(table, *more)
            assert code == 2, lines
            assert lines[-1] == (f"error: --out {table} is a table of the s3j pipeline (Delta property "
                                 "simjoin.owner=s3j): generate never replaces a pipeline's table: allowed a new "
                                 "path, or a table simjoin generate wrote (with --overwrite)"), lines
        assert _snapshot(spark, table) == before, table


def test_generate_refuses_a_pipeline_folder_without_a_delta_log(spark, s3j_out):
    for folder in (f"{s3j_out}_checkpoint", f"{s3j_out}_state"):
        assert os.listdir(folder), folder
        before = sorted(os.listdir(folder))
        code, lines = _generate(folder, "--overwrite")
        assert code == 2 and f"--out {folder} is a folder of the s3j pipeline" in lines[-1], lines
        assert sorted(os.listdir(folder)) == before


def test_generate_overwrites_only_its_own_tables(spark, tmp_path):
    own = str(tmp_path / "own")
    assert _generate(own)[0] == 0
    assert delta.owner(spark, own) == "generate"
    code, lines = _generate(own, "--overwrite")
    assert code == 0, lines
    assert delta.latest_version(spark, own) == 1 and delta.owner(spark, own) == "generate"
    # written before the owner mark: every commit carries generate's marker, so it is generate's
    old = str(tmp_path / "old")
    df = spark.createDataFrame([(1, "a")], "id long, text string")
    delta.overwrite(df, old, options={"userMetadata": "simjoin generate cli"})
    assert delta.owner(spark, old) is None
    assert _generate(old, "--overwrite")[0] == 0
    # a table someone else wrote, unmarked: refused
    mine = str(tmp_path / "mine")
    delta.overwrite(df, mine)
    code, lines = _generate(mine, "--overwrite")
    assert code == 2 and lines[-1] == (
        f"error: --out {mine} holds a Delta table simjoin generate did not write (no simjoin.owner=generate "
        "property): allowed a new path, or a table simjoin generate wrote (with --overwrite)"), lines
    assert delta.read_table(spark, mine).count() == 1


@pytest.mark.slow
def test_the_generate_dag_refuses_a_pipeline_table(spark, s3j_out, airflow_db):
    dag = load_dag("generate", fail_fast=True)
    before = _snapshot(spark, s3j_out)
    run = dag.test(run_conf={"kind": "vectors", "out": s3j_out, "rows": 10, "dim": 2, "overwrite": True})
    assert "failed" in str(run.state).lower()
    assert _snapshot(spark, s3j_out) == before
