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
    assert {"stage_durations.png", "stage_rows.png", "balance.png"} <= {name for _, name in imgs}
    assert os.path.isfile(os.path.join(os.path.dirname(page), "balance.png"))
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
