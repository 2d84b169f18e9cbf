"""The simjoin Airflow plugin in a real browser: `airflow standalone` (the plugin installed with
the package, found by its entry point), headless Chromium logging in through Airflow's own login
page, a simjoin_hypercube run triggered from the DAG page's Trigger button, and then its outputs
opened from the run's "simjoin outputs" tab, the second click from the run page. The rows shown
are the Delta table's, the history lists the run's version, a filter by id shows exactly that
id's pairs, the quarantine shows the planted bad row with its reason, and the report's plots load.
Unauthenticated requests are refused; paths outside the warehouse are refused; nothing writes.

``SIMJOIN_UI_SCREENSHOTS=docs/ui`` keeps the screenshots the README shows (default: tmp_path)."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from jobs.tools.airflow_stack import Stack, free_port
from tests.helpers import chromium

T0 = dt.datetime(2026, 11, 29, 8, 0, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    root = tmp_path_factory.mktemp("airflow-ui")
    s = Stack(home=str(root / "home"), api_port=free_port(), warm=False, warehouse=str(root / "warehouse"))
    try:
        s.start(timeout=300, wait_for_dags=("simjoin_hypercube",))
        yield s
    finally:
        s.stop()


def _http(stack: Stack, path: str, token: str | None = None, accept: str | None = None,
          method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    """One request, redirects not followed."""
    headers = {"Accept": accept} if accept else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"

    class Stay(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **k):
            return None

    req = urllib.request.Request(stack.url + path, headers=headers, method=method)
    try:
        with urllib.request.build_opener(Stay).open(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _stream(path: str, ids: list[int], keys: list[int | None]) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    ts = pa.array([T0 + dt.timedelta(seconds=i) for i in ids], pa.timestamp("us", tz="UTC"))
    write_deltalake(path, pa.table({"id": pa.array(ids, pa.int64()), "ts": ts, "k": pa.array(keys, pa.int64())}),
                    mode="append")


def _grid(d) -> list[list[str]]:
    """The rows of the page's table of rows (``#rows``), cells as text."""
    from selenium.webdriver.common.by import By

    rows = d.find_elements(By.CSS_SELECTOR, "#rows tr")
    return [[c.text for c in r.find_elements(By.TAG_NAME, "td")] for r in rows[1:]]


def _pairs_text(t) -> list[list[str]]:
    """A pyarrow table of pairs as the page shows its cells (timestamps in ISO form)."""
    out = []
    for r in t.to_pylist():
        out.append([v.isoformat() if isinstance(v, dt.datetime) else str(v) for v in r.values()])
    return out


@pytest.mark.airflow
@pytest.mark.slow
def test_the_ui_plugin_shows_what_a_run_wrote_to_a_logged_in_user_only(stack, tmp_path):
    import pyarrow as pa
    from deltalake import DeltaTable
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.ui import WebDriverWait

    shots = Path(os.environ.get("SIMJOIN_UI_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    wh = stack.env["SIMJOIN_WAREHOUSE"]
    # the DAG's default paths, so that the Trigger button's defaults run it; one bad row (no key)
    left, right, out = f"{wh}/hypercube/left", f"{wh}/hypercube/right", f"{wh}/hypercube/pairs"
    _stream(left, [*range(1, 21), 77], [*(i % 10 for i in range(1, 21)), None])
    _stream(right, list(range(101, 121)), [i % 10 for i in range(101, 121)])
    os.makedirs(f"{wh}/x<b>y", exist_ok=True)  # a folder name that is markup: shown as text
    _stream(f"{wh}/x<b>y/t", [1], [1])

    # -- without Airflow's authentication: 401, or the login page for a browser ---------------------
    quoted = urllib.parse.quote("hypercube/pairs")
    for path in ("/simjoin/", f"/simjoin/table?path={quoted}", f"/simjoin/download?path={quoted}&format=csv",
                 "/simjoin/run?dag_id=simjoin_hypercube&run_id=x"):
        status, _, body = _http(stack, path)
        assert status == 401 and b"pair" not in body, (path, status, body[:200])
        status, headers, _ = _http(stack, path, accept="text/html")
        assert status == 303 and headers["location"].startswith("/auth/login?next="), (path, status, headers)
        status, _, _ = _http(stack, path, token="not.a.jwt")
        assert status in (401, 403)
    token = stack.token()
    # confined to the warehouse, read-only
    for bad in ("../../etc", "/etc", f"{wh}/../home"):
        status, _, body = _http(stack, f"/simjoin/table?path={urllib.parse.quote(bad)}", token=token)
        assert status == 403 and b"outside the warehouse" in body, (bad, status, body)
    for method in ("POST", "PUT", "DELETE"):
        assert _http(stack, f"/simjoin/table?path={quoted}", token=token, method=method)[0] == 405

    # -- a real browser: log in through Airflow's own page, trigger from the DAG page ----------------
    stack.request("PATCH", "/api/v2/dags/simjoin_hypercube", {"is_paused": False})
    d = chromium(tmp_path / "chromium-profile")
    w = WebDriverWait(d, 90)
    try:
        dag_url = f"{stack.url}/dags/simjoin_hypercube"
        d.get(f"{stack.url}/auth/login?" + urllib.parse.urlencode({"next": dag_url}))
        w.until(ec.presence_of_element_located((By.NAME, "username"))).send_keys("admin")
        d.find_element(By.NAME, "password").send_keys(stack.password())
        d.find_element(By.XPATH, "//button[normalize-space()='Sign in']").click()
        w.until(ec.url_to_be(dag_url))
        w.until(ec.element_to_be_clickable((By.XPATH, "//button[normalize-space()='Trigger']"))).click()
        go = w.until(ec.element_to_be_clickable((By.XPATH, "//*[@role='dialog']//button[normalize-space()='Trigger']")))
        d.execute_script("arguments[0].scrollIntoView({block: 'center'})", go)
        go.click()
        deadline = time.monotonic() + 60
        runs: list = []
        while not runs and time.monotonic() < deadline:
            runs = stack.get("/api/v2/dags/simjoin_hypercube/dagRuns")[1]["dag_runs"]
            time.sleep(0.5)
        assert len(runs) == 1, runs
        run_id = runs[0]["dag_run_id"]
        run = stack.wait("simjoin_hypercube", run_id, timeout=600)
        assert run["state"] == "success", stack.task_instances("simjoin_hypercube", run_id)

        # -- the run's page, then its "simjoin outputs" tab ---------------------------------------------
        d.get(f"{dag_url}/runs/{urllib.parse.quote(run_id, safe='')}")
        w.until(ec.element_to_be_clickable((By.LINK_TEXT, "simjoin outputs"))).click()
        frame = w.until(ec.presence_of_element_located((By.CSS_SELECTOR, "iframe[title='simjoin outputs']")))
        d.switch_to.frame(frame)
        w.until(ec.presence_of_element_located((By.ID, "report")))
        w.until(lambda drv: drv.execute_script("return Array.from(document.images).every(i => i.complete)"))
        d.switch_to.default_content()
        d.save_screenshot(str(shots / "run_outputs.png"))
        d.switch_to.frame(frame)
        body = d.find_element(By.TAG_NAME, "body").text
        assert run_id in body and out in body
        pairs = DeltaTable(out)
        ref = pairs.to_pyarrow_table()
        assert ref.num_rows == 40
        # the quarantine: the planted row (id 77, no key) with the reason the Delta table holds
        q = DeltaTable(f"{out}_quarantine").to_pyarrow_table().to_pylist()
        assert len(q) == 1 and q[0]["reason"], q
        section = d.find_element(By.ID, "t-quarantine").text
        assert q[0]["reason"] in section and "77" in section, section
        # the report's plots, embedded and loaded
        images = d.execute_script("return Array.from(document.images).map(i => [i.complete, i.naturalWidth])")
        assert len(images) >= 2 and all(ok and width > 0 for ok, width in images), images

        # -- the rows the run added, in the table view: equal to the Delta table's -----------------------
        d.find_element(By.CSS_SELECTOR, "#t-output").find_element(
            By.PARTIAL_LINK_TEXT, "all rows these commits added").click()
        w.until(ec.presence_of_element_located((By.ID, "rows")))
        shown = _grid(d)
        assert sorted(shown) == sorted(_pairs_text(ref.select(["left_id", "right_id", "k", "ts"])))
        version = pairs.version()
        history = d.find_element(By.ID, "history").text
        assert f"{version} (this run)" in history, history

        # -- a filter on one id: exactly that id's pairs --------------------------------------------------
        one = ref.column("left_id")[0].as_py()
        Select(d.find_element(By.NAME, "column")).select_by_visible_text("left_id")
        box = d.find_element(By.NAME, "value")
        box.clear()
        box.send_keys(str(one))
        d.find_element(By.CSS_SELECTOR, "#filter button[type='submit']").click()
        w.until(lambda drv: "column=left_id" in drv.execute_script("return location.href"))  # in the frame
        got = _grid(d)
        want = [r for r in ref.select(["left_id", "right_id", "k", "ts"]).to_pylist() if r["left_id"] == one]
        assert got and sorted(got) == sorted(_pairs_text(pa.Table.from_pylist(want))), got
        d.save_screenshot(str(shots / "table_filter.png"))

        # -- the navigation entry: the warehouse's tables by pipeline -----------------------------------
        d.switch_to.default_content()
        d.get(f"{stack.url}/plugin/simjoin-tables")
        frame = w.until(ec.presence_of_element_located((By.CSS_SELECTOR, "iframe[title='simjoin tables']")))
        d.switch_to.frame(frame)
        w.until(ec.presence_of_element_located((By.TAG_NAME, "h2")))
        nav = d.find_element(By.TAG_NAME, "body").text
        assert "hypercube/pairs" in nav and "hypercube/pairs_quarantine" in nav and run_id in nav, nav
        assert "x<b>y/t" in nav and not d.find_elements(By.XPATH, "//td//b")  # markup in a name is text
        d.switch_to.default_content()
        d.save_screenshot(str(shots / "tables.png"))
    except Exception:
        d.save_screenshot(str(tmp_path / "failed.png"))
        (tmp_path / "failed.html").write_text(d.page_source)
        raise
    finally:
        d.quit()

    # a bounded download, with the same JWT the REST API takes: the filtered rows as CSV
    q_ = urllib.parse.urlencode({"path": "hypercube/pairs", "format": "csv", "column": "left_id", "value": one,
                                 "limit": 1000})
    status, headers, body = _http(stack, f"/simjoin/download?{q_}", token=token)
    assert status == 200 and headers["content-type"].startswith("text/csv"), (status, headers)
    lines = body.decode().strip().splitlines()
    assert lines[0] == '"left_id","right_id","k","ts"' and len(lines) == 1 + len(want)
    assert json.loads(_http(stack, "/simjoin/table?path=nowhere", token=token)[2])["detail"].startswith(
        "no Delta table at 'nowhere'")
