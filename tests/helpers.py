"""Helpers for tests: run a pipeline in this process as its CLI command does."""


def commit_engines(path) -> list[str]:
    """Which engine wrote each commit of a local Delta table: ``spark`` or ``deltalake``."""
    import glob
    import json

    out = []
    for f in sorted(glob.glob(f"{path}/_delta_log/*.json")):
        info = next(json.loads(line)["commitInfo"] for line in open(f) if '"commitInfo"' in line)
        out.append("spark" if "Apache-Spark" in str(info.get("engineInfo")) else "deltalake")
    return out


def run_named(spark, name: str, reset: bool = False, run_id: str = "cli", **values):
    """Run a pipeline in this process, as its CLI command does; returns (run, results)."""
    from simjoin.pipeline import get_spec
    from simjoin.pipeline.runner import run_pipeline

    run = get_spec(name).make_run(values, run_id=run_id, reset=reset)
    return run, run_pipeline(spark, run)


class S3JResult:
    def __init__(self, results):
        from jobs.s3j.spec import totals

        t = totals(results)
        self.pairs, self.windows, self.quarantined = t["pairs"], t["windows"], t["quarantined"]
        self.results = results


def run_s3j(spark, left, output, right=None, **cfg):
    """``simjoin s3j`` in this process; returns the totals (pairs, windows, quarantined)."""
    _, res = run_named(spark, "s3j", left=left, right=right, output=output, **cfg)
    return S3JResult(res)


class SSJResult:
    def __init__(self, results):
        r = results["rounds"][-1]
        self.pairs, self.records = r["publish"]["pairs"], r["tokenize"]["records"]
        self.quarantined, self.results = r["tokenize"]["quarantined"], results


def run_ssj(spark, **values):
    """``simjoin ssj`` in this process; returns pairs, records and quarantined."""
    _, res = run_named(spark, "ssj", **values)
    return SSJResult(res)


def load_dag(pipeline: str, fail_fast: bool = False):
    """The ``simjoin_<pipeline>`` DAG from its file in ``dags/``, through a real DagBag. With
    ``fail_fast``, tasks do not retry: a failing ``dag.test()`` run ends failed at once."""
    from pathlib import Path

    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(Path(__file__).resolve().parents[1] / "dags" / f"simjoin_{pipeline}.py"))
    assert bag.import_errors == {}
    d = bag.dags[f"simjoin_{pipeline}"]
    if fail_fast:
        for t in d.tasks:
            t.retries = 0
    return d


def outlet_uris(dag) -> dict[str, list[str]]:
    """``{task_id: [file://<path>]}``: the tables each task announces (through its AssetAlias
    ``simjoin_<pipeline>.<table>``) at the DAG's default paths."""
    from simjoin.pipeline.dags import _uri, dag_defaults
    from simjoin.pipeline.registry import get_spec

    spec = get_spec(dag.dag_id.removeprefix("simjoin_"))
    paths = spec.make_run(dag_defaults(spec)).table_paths()
    return {t.task_id: [_uri(paths[o.name.rsplit(".", 1)[1]]) for o in t.outlets] for t in dag.tasks}


def make_ssj_run(spark, folder: str) -> tuple[str, str]:
    """A small ssj run (with one bad row) whose output path needs escaping; (output, run_id)."""
    import os

    from simjoin.spark import delta

    src, out = os.path.join(folder, "sets"), os.path.join(folder, "a&b<c>'pairs")
    rows = [(i, f"t{i % 5} t{i % 7} t{i % 3} common") for i in range(200)] + [(999, None)]
    delta.overwrite(spark.createDataFrame(rows, "id long, text string"), src)
    run_named(spark, "ssj", run_id="report-run", input=src, output=out, threshold=0.6)
    return out, "report-run"


def chromium(profile_dir, width: int = 1400, height: int = 1000):
    """A headless Debian Chromium under Selenium (``make test`` installs chromium and
    chromium-driver as root where they are missing): fails under CI, skips elsewhere, when absent."""
    import os
    import shutil

    import pytest
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (browser and driver):
        msg = "Debian's chromium and chromium-driver are not installed (make test installs them as root)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              f"--user-data-dir={profile_dir}", f"--window-size={width},{height}"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service(driver), options=opts)
    d.set_page_load_timeout(60)
    return d
