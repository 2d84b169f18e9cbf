"""The run report in a real headless browser: Debian's Chromium (installed by `make test` where it
is missing) loads the page `simjoin report --output` wrote, and every plot on it has loaded."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from simjoin.cli import app
from tests.helpers import chromium, make_ssj_run


@pytest.mark.slow
def test_report_page_renders_every_plot_in_chromium(spark, tmp_path):
    out, run_id = make_ssj_run(spark, str(tmp_path))
    res = CliRunner().invoke(app, ["report", "--output", out, "--run-id", run_id])
    assert res.exit_code == 0, res.output
    page = res.output.strip().splitlines()[-1].removeprefix("report: ")

    d = chromium(tmp_path / "chromium-profile")
    try:
        d.get("file://" + page)
        images = d.execute_script(
            "return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, i.naturalWidth,"
            " i.naturalHeight])")
        title = d.title
        body = d.find_element("tag name", "body").text
        d.set_window_size(1200, 3000)
        d.save_screenshot(str(tmp_path / "report.png"))
    finally:
        d.quit()
    assert len(images) >= 4, images
    broken = [src for src, done, w, h in images if not (done and w > 0 and h > 0)]
    assert not broken, f"plots that did not load: {broken}"
    assert "ssj" in title and run_id in title and "a&b<c>" in title  # the escaped path reads back as text
    assert "key figures" in body and "output rows of this run" in body
