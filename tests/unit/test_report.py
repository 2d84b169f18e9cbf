"""`simjoin report` renders PNG plots + index.html from either kind of stats table."""

import datetime as dt

import pandas as pd
import pytest

from simjoin.report import render


def test_ssj_stats_plots(tmp_path):
    df = pd.DataFrame({
        "unit": [0, 1, 2, 3], "node": [0, 0, 1, 1], "modgroup": [0, 1, 0, 1], "est_cost": [10.0, 10.0, 4.0, 4.0],
        "candidates": [120, 100, 40, 30], "wall_seconds": [1.2, 1.0, 0.4, 0.3], "records_indexed": [50, 50, 20, 20],
        "records_probed": [25, 25, 10, 10], "results": [3, 2, 1, 0], "run_id": ["r"] * 4,
        "pipeline": ["ssj"] * 4, "seconds": [1.2, 1.0, 0.4, 0.3]})
    files = render(df, str(tmp_path), "ssj")
    assert [f.rsplit("/", 1)[1] for f in files] == ["ssj_r_slice_costs.png", "ssj_r_unit_seconds.png",
                                                    "ssj_r_records.png"]
    assert all((tmp_path / f.rsplit("/", 1)[1]).read_bytes()[:4] == b"\x89PNG" for f in files)
    index = (tmp_path / "index.html").read_text()
    assert "ssj_r_slice_costs.png" in index and index.count("src=\"data:image/png;base64,") == 3  # inlined


def test_s3j_stats_plots(tmp_path):
    w = [dt.datetime(2026, 1, 1, 0, m) for m in (0, 1)]
    rows = []
    for ws in w:
        rows.append({"pipeline": "s3j", "seconds": 0.5, "level": "window", "algorithm": "s3j", "window_start": ws, "worker": None, "load": None,
                     "records": 100, "copies": 190, "distance_computations": 50, "result_pairs": 30,
                     "latency_p50_s": 0.1, "latency_p99_s": 0.3, "latency_max_s": 0.4})
        for k in range(3):
            rows.append({"pipeline": "s3j", "seconds": 0.2, "level": "worker", "algorithm": "s3j", "window_start": ws, "worker": k, "load": 10.0 * (k + 1),
                         "records": 30, "copies": 60, "distance_computations": 15, "result_pairs": 10,
                         "latency_p50_s": None, "latency_p99_s": None, "latency_max_s": None})
    files = render(pd.DataFrame(rows), str(tmp_path), "s3j")
    assert sorted(f.rsplit("/", 1)[1] for f in files) == ["s3j_latency.png", "s3j_load.png", "s3j_ratios.png"]
    assert (tmp_path / "index.html").exists()
    # with the rebalance stage's rows: load before/after each rebalance, workset sizes
    for u in (0, 1):
        rows.append({"pipeline": "s3j", "seconds": 0.0, "level": "rebalance", "algorithm": "s3j", "unit": u,
                     "load_imbalance": 40.0, "imbalance_after": 5.0, "load": 60.0, "load_after": 60.0})
        for k in range(3):
            rows.append({"pipeline": "s3j", "seconds": 0.0, "level": "rebalance_worker", "algorithm": "s3j",
                         "unit": u, "worker": k, "load": 10.0 * (k + 1), "load_after": 20.0})
        for g in range(6):
            rows.append({"pipeline": "s3j", "seconds": 0.01, "level": "workset", "algorithm": "s3j", "unit": u,
                         "window_start": w[u], "worker": g % 3, "partition": 0, "workset_id": g + 1,
                         "records": 5 * (g + 1), "load": 3.0 * g})
    out = tmp_path / "rb"
    files = render(pd.DataFrame(rows), str(out), "s3j")
    assert sorted(f.rsplit("/", 1)[1] for f in files) == ["s3j_latency.png", "s3j_load.png", "s3j_ratios.png",
                                                          "s3j_rebalance_load.png", "s3j_worksets.png"]
    assert all((out / f.rsplit("/", 1)[1]).read_bytes()[:4] == b"\x89PNG" for f in files)


def test_unknown_table_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="not a simjoin stats table"):
        render(pd.DataFrame({"a": [1]}), str(tmp_path), "x")


def test_s2j_stats_plots(tmp_path):
    rows = []
    for u in range(3):
        rows.append({"pipeline": "s2j", "seconds": 1.0, "level": "unit", "unit": u, "worker": None, "task": None,
                     "tau": 0.5 + 0.2 * u, "workers": 2 + u, "shed_ratio": 0.1 * u, "shed": 10 * u, "live": None})
        for w in range(2 + u):
            rows.append({"pipeline": "s2j", "seconds": 0.3, "level": "worker", "unit": u, "worker": w, "task": None,
                         "tau": None, "workers": 2 + u, "shed_ratio": None, "shed": None, "live": 100 + w})
        for t in ("pm25", "pm10"):
            rows.append({"pipeline": "s2j", "seconds": None, "level": "task", "unit": u, "worker": None, "task": t,
                         "tau": None, "workers": None, "shed_ratio": None, "shed": None, "live": None,
                         "pairs": 5, "candidates": 9})
    files = render(pd.DataFrame(rows), str(tmp_path), "s2j")
    assert [f.rsplit("/", 1)[1] for f in files] == ["s2j_adapt.png", "s2j_load.png", "s2j_tasks.png"]
    assert all((tmp_path / f.rsplit("/", 1)[1]).read_bytes()[:4] == b"\x89PNG" for f in files)


def test_task_timing_recorded_and_plotted(tmp_path):
    """Stage runs append to the task-timing table (deltalake, no Spark); the report plots each
    run's process start, Spark start-up and work per stage, and appends them to index.html."""
    from deltalake import DeltaTable

    from simjoin.pipeline.timing import TaskTiming, record
    from simjoin.report import render_task_timing

    path = str(tmp_path / "wh" / "_simjoin" / "task_timing")
    record([TaskTiming("manual__1", "ssj", s, "airflow", "warm", process_s=2.0, startup_s=0.3, work_s=w)
            for s, w in (("tokenize", 3.0), ("join", 5.0))], path)
    record([TaskTiming("manual__1", "ssj", "publish", "airflow", "local", attempt=2, startup_s=9.0, work_s=1.0)], path)
    pdf = DeltaTable(path).to_pandas()
    assert len(pdf) == 3 and set(pdf["spark"]) == {"warm", "local"} and pdf["attempt"].max() == 2
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "index.html").write_text("<html><body><h1>stats</h1></body></html>")
    files = render_task_timing(pdf, str(tmp_path / "out"), append=True)
    assert len(files) == 1 and open(files[0], "rb").read(4) == b"\x89PNG"
    html = (tmp_path / "out" / "index.html").read_text()
    assert html.index("<h1>stats</h1>") < html.index("task timing") and "tokenize" in html
    with pytest.raises(ValueError, match="not a simjoin task-timing table"):
        render_task_timing(pd.DataFrame({"x": [1]}), str(tmp_path / "o2"))


def test_task_timing_never_fails_a_stage(tmp_path, caplog):
    from simjoin.pipeline.timing import TaskTiming, record

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    record([TaskTiming("r", "ssj", "join", "cli")], str(blocker / "task_timing"))  # logs, does not raise
