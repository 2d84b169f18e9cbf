"""`simjoin report --output PATH [--run-id ID]`: one HTML page per run, from any pipeline's tables.

The page shows the run's real numbers (key figures, stage durations, rows in/out/quarantined per
stage, quarantine reasons, load balance, the pipeline's plots); user paths are HTML-escaped. A
headless Chromium check of the same page lives in tests/e2e/test_report_browser.py.
"""

from __future__ import annotations

import os
import re

from click.testing import CliRunner

from simjoin.cli import app
from tests.helpers import make_ssj_run


def test_one_page_per_run_with_real_numbers(spark, tmp_path):
    from deltalake import DeltaTable

    out, run_id = make_ssj_run(spark, str(tmp_path))
    res = CliRunner().invoke(app, ["report", "--output", out, "--run-id", run_id])
    assert res.exit_code == 0, res.output
    page = res.output.strip().splitlines()[-1].removeprefix("report: ")
    assert page.endswith("index.html") and os.path.isfile(page)
    with open(page) as fh:
        text = fh.read()
    # every picture is inlined (the page stands alone, issue 63 point 9), a PNG, and its file beside it
    import base64

    imgs = re.findall(r'<img src="data:image/png;base64,([^"]+)" alt="([^"]+)"', text)
    assert len(imgs) >= 4 and len(imgs) == text.count("<img "), text.count("<img ")
    for data, name in imgs:
        assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n", name
    assert {"stage_durations.png", "stage_rows.png"} <= {name for _, name in imgs}
    # load balance: a plot of the units with measurable work; a toy run's units take milliseconds,
    # which the page says instead of a max/mean of timer noise
    if "balance.png" in {name for _, name in imgs}:
        assert os.path.isfile(os.path.join(os.path.dirname(page), "balance.png"))
    else:
        assert "load balance: units not measured" in text and "max/mean per worker (worst)" not in text
    # user paths are escaped; the raw path never appears as markup
    assert "a&amp;b&lt;c&gt;" in text and "a&b<c>" not in text
    # real numbers: the run's pairs and its one quarantined row
    pairs = DeltaTable(out).to_pandas()
    n = int((pairs["run_id"] == run_id).sum())
    assert n > 0
    assert re.search(rf"<td>output rows of this run</td>\s*<td>{n}</td>", text), text[:3000]
    assert re.search(r"<td>quarantined rows of this run</td>\s*<td>1</td>", text)
    assert "null or empty" in text or "reason" in text
    for stage in ("tokenize", "optimize", "join", "publish"):
        assert f"<td>{stage}</td>" in text


def test_bad_report_arguments_are_one_line(spark, tmp_path):
    r = CliRunner().invoke(app, ["report", "--output", str(tmp_path / "nothing_here")])
    assert r.exit_code == 2 and "no run recorded for output" in r.output and "Traceback" not in r.output
    out, _ = make_ssj_run(spark, str(tmp_path))
    r = CliRunner().invoke(app, ["report", "--output", out, "--run-id", "no-such-run"])
    assert r.exit_code == 2 and "no run 'no-such-run' recorded" in r.output and "report-run" in r.output


def test_an_s2j_page_finds_its_stats_and_quarantine_inside_the_output_folder(spark, tmp_path):
    """S2J keeps its stats and quarantine inside its output folder (``DIR/_stats``), not beside it
    as the other pipelines do (``<output>_stats``): the page names them as the run class does, so
    its plots and quarantined rows show (they were missing: "no quarantine table")."""
    import datetime as dt

    from tests.helpers import run_named

    t0 = dt.datetime(2026, 8, 1, tzinfo=dt.UTC)
    rows = [(i, t0 + dt.timedelta(seconds=i), float(i % 7)) for i in range(1, 41)] + [(41, t0, None)]
    left, out = str(tmp_path / "s"), str(tmp_path / "out")
    spark.createDataFrame(rows, "id long, ts timestamp, a double").write.format("delta").save(left)
    run_named(spark, "s2j", left=left, output=out, window="10m", tasks="near: abs(l.a - r.a) <= 1")
    res = CliRunner().invoke(app, ["report", "--output", out])
    assert res.exit_code == 0, res.output
    page = res.output.strip().splitlines()[-1].removeprefix("report: ")
    with open(page) as fh:
        text = fh.read()
    assert "no quarantine table" not in text
    assert re.search(r"<td>quarantined rows[^<]*</td>\s*<td>1</td>", text), text[:3000]
    assert 'alt="s2j_tasks.png"' in text, "the pipeline's own plots of its stats, inlined"
    assert os.path.isfile(os.path.join(os.path.dirname(page), "stats", "s2j_tasks.png"))


def test_a_jvm_free_run_says_so_and_shows_only_true_labels(tmp_path):
    """Issue 63 point 9: a small HyperCube run on the in-process executor starts no JVM, and its
    page says Spark none (not "local"), shows no ``<NA>`` cell, counts the pairs under publish
    (not under stats), draws no load-balance verdict from units of hundredths of a second, and
    lives in ``<output>_report/<run>/`` (a command-line run: ``cli-<UTC start>``)."""
    import datetime as dt
    import subprocess
    import sys
    from pathlib import Path

    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    t0 = dt.datetime(2026, 8, 1, tzinfo=dt.UTC)
    for name, ids, keys in (("l", [1, 2, 3], [7, 7, 8]), ("r", [101, 102], [7, 8])):
        write_deltalake(str(tmp_path / name), pa.table({
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array([t0 + dt.timedelta(seconds=s) for s in range(len(ids))], pa.timestamp("us", tz="UTC")),
            "k": pa.array(keys, pa.int64())}))
    out = str(tmp_path / "hc")
    env = {**os.environ, "SIMJOIN_WAREHOUSE": str(tmp_path / "wh"), "SIMJOIN_RETENTION_CHECK": "0"}
    bin_ = Path(sys.executable).parent / "simjoin"
    p = subprocess.run([str(bin_), "hypercube", "--left", str(tmp_path / "l"), "--right", str(tmp_path / "r"),
                        "--output", out, "--key", "k", "--window", "10s", "--workers", "2"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    pairs = len(DeltaTable(out).to_pandas())
    assert pairs == 3
    r = subprocess.run([str(bin_), "report", "--output", out], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    page = r.stdout.strip().splitlines()[-1].removeprefix("report: ")
    assert re.fullmatch(re.escape(out) + r"_report/cli-\d{8}T\d{6}/index\.html", page), page
    text = open(page).read()
    assert re.search(r"<td>Spark</td>\s*<td>none \(no JVM started\)</td>", text), text[:3000]
    assert "&lt;NA&gt;" not in text and "<NA>" not in text and ">nan<" not in text
    # rows out per stage: the pairs under publish; stats publishes nothing, so it shows none
    table = re.findall(r"<tr>\s*((?:<td>[^<]*</td>\s*)+)</tr>", text)
    by_stage = {}
    for row in table:
        cells = re.findall(r"<td>([^<]*)</td>", row)
        if len(cells) >= 10 and cells[1] == "cli":
            by_stage[cells[0]] = cells
    assert by_stage["publish"][8] == str(pairs), by_stage["publish"]
    assert by_stage["stats"][8] == "", by_stage["stats"]
    assert all(c[2].startswith("none") for c in by_stage.values()), by_stage


def test_load_balance_is_not_read_from_units_of_hundredths_of_a_second(tmp_path):
    """A ratio of 0.01 s to 0.004 s is timer noise: such units are counted as not measured, and
    only units with real work give the max/mean figure."""
    import pandas as pd

    from simjoin.report import BALANCE_MIN_SECONDS, _balance_plot

    tiny = [{"level": "worker", "unit": u, "worker": w, "probe_seconds": s}
            for u in range(4) for w, s in enumerate((0.01, 0.004, 0.002))]
    files: list[str] = []
    assert _balance_plot(pd.DataFrame(tiny), "ineq", str(tmp_path), files) == (0.0, 0.0, 0, 4)
    real = tiny + [{"level": "worker", "unit": 9, "worker": w, "probe_seconds": s}
                   for w, s in enumerate((0.6, 0.3, 0.3))]
    worst, median, measured, skipped = _balance_plot(pd.DataFrame(real), "ineq", str(tmp_path), files)
    assert (measured, skipped) == (1, 4) and abs(worst - 0.6 / 0.4) < 1e-9 and BALANCE_MIN_SECONDS == 0.05
