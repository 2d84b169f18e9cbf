"""A two-stage pipeline built only from a spec in this file gets a working CLI command and a DAG
that dag.test() runs: the platform adds no per-pipeline plumbing."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from click.testing import CliRunner
from pyspark.sql import functions as F

from simjoin.config import check, check_fields, param
from simjoin.pipeline import PipelineSpec, Run, Stage
from simjoin.pipeline.registry import register
from simjoin.spark import delta


@dataclass(frozen=True)
class ToyConfig:
    input: str | None = param(None, "Input table with a column x.", io=True, required=True,
                              dag_default="{warehouse}/toy/in")
    output: str | None = param(None, "Output table.", io=True, required=True, dag_default="{warehouse}/toy/out")
    factor: int = param(2, "Multiply x by this.", ge=1, le=10)
    keep: str = param("all", "Which rows to keep.", choices=("all", "even"))
    low: int = param(0, "Keep x >= low.")
    high: int = param(100, "Keep x <= high.")

    def __post_init__(self) -> None:
        check_fields(self, "toy")
        check(self.low <= self.high, "toy", "high", self.high, f"a value >= low ({self.low})")


class ToyRun(Run):
    @property
    def tables(self) -> dict[str, str]:
        return {"output": self.cfg.output, "scaled": f"{self.cfg.output}_scaled"}


def scale(ctx):
    spark, run = ctx.session, ctx.run
    df = delta.read_table(spark, run.cfg.input).select((F.col("x") * run.cfg.factor).alias("x"))
    delta.overwrite(df, run.tables["scaled"])
    run.keep("scaled", df)
    return {"rows": df.count()}


def select(ctx):
    spark, run = ctx.session, ctx.run
    df = run.frame("scaled", lambda: delta.read_table(spark, run.tables["scaled"]))
    df = df.where((F.col("x") >= run.cfg.low) & (F.col("x") <= run.cfg.high))
    if run.cfg.keep == "even":
        df = df.where(F.col("x") % 4 == 0)
    delta.overwrite(df, run.cfg.output)
    return {"kept": df.count()}


def summary(run, results):
    r = results["rounds"][-1]
    return f"toy: {r['select']['kept']} of {r['scale']['rows']} rows -> {run.cfg.output}"


SPEC = register(PipelineSpec(
    name="toy",
    config=ToyConfig,
    run_type="batch",
    doc="A toy pipeline: scale, then select.",
    stages=(Stage("scale", "tests.spark.test_toy_pipeline:scale", writes=("scaled",)),
            Stage("select", "tests.spark.test_toy_pipeline:select", reads=("scaled",), writes=("output",),
                  outlets=("output",), publishes=True)),
    run_class="tests.spark.test_toy_pipeline:ToyRun",
    summary="tests.spark.test_toy_pipeline:summary",
    output_columns={"output": ("x",)},
))


@pytest.fixture()
def toy_input(spark, tmp_path):
    src = str(tmp_path / "in")
    delta.overwrite(spark.createDataFrame([(i,) for i in range(10)], "x long"), src)
    return src


def test_cli_command_from_the_spec(spark, tmp_path, toy_input):
    from simjoin.pipeline.cli import commands

    cmd = commands(SPEC)
    assert {"--factor", "--keep", "--low", "--high", "--input", "--output", "--run-id"} <= {
        o for p in cmd.params for o in p.opts}
    out = str(tmp_path / "out")
    r = CliRunner().invoke(cmd, ["--input", toy_input, "--output", out, "--factor", "3", "--keep", "even"])
    assert r.exit_code == 0, r.output
    last = r.output.strip().splitlines()[-1]
    assert last.startswith(f"toy: 3 of 10 rows -> {out} in ")  # 0, 12, 24
    assert sorted(x.x for x in delta.read_table(spark, out).collect()) == [0, 12, 24]
    # the same validation as YAML and the DAG, one line each
    for args, needle in ((["--factor", "11"], "invalid --factor 11: allowed 1 <= factor <= 10"),
                         (["--low", "5", "--high", "1"], "invalid --high 1: allowed a value >= --low (5)"),
                         (["--keep", "odd"], "'odd' is not one of")):
        r = CliRunner().invoke(cmd, ["--input", toy_input, "--output", out, *args])
        assert r.exit_code == 2 and needle in r.output, r.output
    r = CliRunner().invoke(cmd, ["--input", toy_input, "--output", toy_input])
    assert r.exit_code == 2 and "is also an input" in r.output


def test_dag_from_the_spec_runs(spark, tmp_path, toy_input, airflow_db):
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.sdk.exceptions import ParamValidationError

    # a DAG file of two lines, as in dags/, loaded by a real DagBag and serialized like the project's
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "simjoin_toy.py").write_text("# airflow dag built from the toy spec\n"
                                           "from tests.spark.test_toy_pipeline import SPEC\n"
                                           "from simjoin.pipeline.dags import build_dag\n\n"
                                           "dag = build_dag(SPEC)\n")
    bag = DagBag(dag_folder=str(folder))
    assert bag.import_errors == {}
    from airflow.dag_processing.bundles.manager import DagBundlesManager

    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(bag, "dags-folder", None)
    dag = bag.dags["simjoin_toy"]
    assert dag.dag_id == "simjoin_toy" and [t.task_id for t in dag.topological_sort()] == ["scale", "select",
                                                                                                 "maintain"]
    assert all(t.retries == 2 for t in dag.tasks) and dag.doc_md.startswith("A toy pipeline")
    schema = dag.params.get_param("factor").schema
    assert (schema["minimum"], schema["maximum"], schema["type"]) == (1, 10, "integer")
    with pytest.raises(ParamValidationError):
        dag.params.get_param("keep").resolve("odd")
    outlets = dag.get_task("select").outlets  # an AssetAlias announcing the table really written
    assert len(outlets) == 1 and outlets[0].name.startswith("simjoin_toy.")
    out = str(tmp_path / "dag_out")
    run = dag.test(run_conf={"input": toy_input, "output": out, "factor": 2, "high": 10})
    assert "success" in str(run.state).lower()
    assert sorted(x.x for x in delta.read_table(spark, out).collect()) == [0, 2, 4, 6, 8, 10]
    # a cross-field violation fails the first task with one line, and is not retried
    run = dag.test(run_conf={"input": toy_input, "output": str(tmp_path / "bad"), "low": 9, "high": 1})
    assert "failed" in str(run.state).lower()
    assert not delta.table_exists(spark, str(tmp_path / "bad"))
