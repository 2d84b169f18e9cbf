"""The Airflow plugin against hostile requests (issue 57), on its real FastAPI app, real Delta
tables, Airflow's real metadata database and Airflow's simple auth manager deciding who may read
what (a viewer, an admin). Airflow's own login in front of it is tested in
tests/e2e/test_airflow_ui.py.

- **Authorization per table:** a table is shown to a user who may read the DAG that owns it (the
  owner its table records); a table no simjoin DAG owns (an input, the task timings) to admins only,
  unless ``SIMJOIN_UI_UNOWNED_TABLES=login``. The nav page and a run's page list only those.
- **A fuzz pass** over every parameter of every route (paths, filters, versions, limits, formats,
  DAG and run ids, plot names) with random and hostile values: every answer is 2xx, 3xx or 4xx,
  never 500, and no byte of a file planted outside the warehouse (or reached through a table's
  log) is ever returned.
"""

from __future__ import annotations

import json
import os
import random
import urllib.parse

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

SECRET = "s3cr3t-outside-the-warehouse"


@pytest.fixture(scope="module")
def plugin(airflow_db, tmp_path_factory):
    """The plugin's app over a warehouse with an owned output, an input no DAG owns, a table whose
    log adds a file outside it, a symlink out, and a DAG run of simjoin_hypercube naming them."""
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    root = tmp_path_factory.mktemp("ui-sec")
    wh, outside = root / "warehouse", root / "outside"
    wh.mkdir()
    outside.mkdir()
    pq.write_table(pa.table({"left_id": pa.array([7], pa.int64()), "note": [SECRET]}), outside / "s.parquet")
    (outside / "plain.txt").write_text(SECRET)
    ids = np.arange(50, dtype=np.int64)
    write_deltalake(wh / "hc" / "pairs", pa.table({"left_id": ids, "right_id": ids, "note": ["x"] * 50}),
                    description="simjoin.owner=hypercube")
    for side in ("left", "right"):  # no owner: inputs
        write_deltalake(wh / "inputs" / side, pa.table({"id": ids, "k": ids % 3}))
    evil = wh / "evil"
    write_deltalake(evil, pa.table({"left_id": ids}), description="simjoin.owner=hypercube")
    with open(evil / "_delta_log" / f"{1:020d}.json", "x") as fh:
        fh.write(json.dumps({"add": {"path": os.path.relpath(outside / "s.parquet", evil), "partitionValues": {},
                                     "size": 1, "modificationTime": 0, "dataChange": True}}) + "\n")
    os.symlink(outside, wh / "link")

    mp = pytest.MonkeyPatch()
    mp.setenv("SIMJOIN_WAREHOUSE", str(wh))
    mp.delenv("SIMJOIN_UI_UNOWNED_TABLES", raising=False)
    manager = SimpleAuthManager()
    import airflow.api_fastapi.app as airflow_app

    mp.setattr(airflow_app, "get_auth_manager", lambda: manager)
    _dag_run("simjoin_hypercube", "r1", {"left": f"{wh}/inputs/left", "right": f"{wh}/inputs/right",
                                         "output": f"{wh}/hc/pairs", "key": "k"})
    yield {"wh": str(wh), "outside": str(outside)}
    mp.undo()


def _dag_run(dag_id: str, run_id: str, conf: dict) -> None:
    import datetime as dt

    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    with create_session() as s:
        s.execute(delete(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        now = dt.datetime.now(dt.UTC)
        r = DagRun(dag_id=dag_id, run_id=run_id, run_type="manual", conf=conf, state="success",
                   logical_date=None, start_date=now - dt.timedelta(hours=1))
        r.end_date = now
        s.add(r)


def _client(role: str):
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    from simjoin.ui import plugin as ui

    ui.app.dependency_overrides[ui._user] = lambda: SimpleAuthManagerUser(username=role, role=role)
    return TestClient(ui.app, raise_server_exceptions=False)


def test_each_table_is_shown_to_those_who_may_read_its_owner(plugin, monkeypatch):
    viewer, admin = _client("viewer"), None
    r = viewer.get("/table", params={"path": "hc/pairs"})
    assert r.status_code == 200  # an owned output: the viewer may read simjoin_hypercube
    r = viewer.get("/table", params={"path": "inputs/left"})
    assert r.status_code == 403 and "admins only" in r.json()["detail"]
    assert viewer.get("/download", params={"path": "inputs/left"}).status_code == 403
    nav = viewer.get("/").text
    assert "hc/pairs" in nav and "inputs/left" not in nav
    page = viewer.get("/run", params={"dag_id": "simjoin_hypercube", "run_id": "r1"})
    assert page.status_code == 200 and "inputs/left" not in page.text, page.text[-800:]
    admin = _client("admin")
    assert admin.get("/table", params={"path": "inputs/left"}).status_code == 200
    assert "inputs/left" in admin.get("/").text
    monkeypatch.setenv("SIMJOIN_UI_UNOWNED_TABLES", "login")
    viewer = _client("viewer")
    assert viewer.get("/table", params={"path": "inputs/left"}).status_code == 200


HOSTILE = ["", " ", "..", "../", "../../outside/s.parquet", "/etc/passwd", "/", "//", "\\..\\", "%2e%2e%2f",
           "file:///etc/passwd", "link", "link/s.parquet", "evil", "evil/_delta_log", "hc/pairs/../../outside",
           "a\x00b", "\u202e", "hc/pairs\n", "<script>", "' OR 1=1", "-1", "0", "1", "2", "99999999999999999999",
           "1e9", "NaN", "inf", "1,2,x", ",,,", "0,1", "-5,3", "csv", "parquet", "xlsx", "left_id", "note",
           "__class__", "simjoin_hypercube", "simjoin_x", "r1", "r1' --", "x.png", "../x.png", "a" * 5000,
           "\udcff".encode("utf-8", "surrogatepass").decode("latin-1")]
ROUTES = {
    "/": [],
    "/table": ["path", "version", "offset", "limit", "column", "value", "versions"],
    "/download": ["path", "format", "version", "column", "value", "limit", "versions"],
    "/run": ["dag_id", "run_id", "limit"],
    "/plot": ["dag_id", "run_id", "name"],
}
GOOD = {"path": "hc/pairs", "dag_id": "simjoin_hypercube", "run_id": "r1", "format": "csv", "name": "x.png"}


@pytest.mark.parametrize("seed", range(3))
def test_a_fuzz_pass_over_every_parameter_never_fails_and_never_leaks(plugin, seed):
    rng = random.Random(seed)
    client = _client("admin")
    for _ in range(200):
        route = rng.choice(list(ROUTES))
        params = {}
        for name in ROUTES[route]:
            roll = rng.random()
            if roll < 0.4:
                params[name] = rng.choice(HOSTILE)
            elif roll < 0.6:
                params[name] = "".join(chr(rng.randrange(1, 0x2FF)) for _ in range(rng.randrange(0, 12)))
            elif roll < 0.8 and name in GOOD:
                params[name] = GOOD[name]
        query = urllib.parse.urlencode(params)
        r = client.get(f"{route}?{query}")
        assert r.status_code < 500, (route, params, r.status_code, r.text[:500])
        assert SECRET.encode() not in r.content, (route, params)
        if r.status_code >= 400 and r.headers.get("content-type", "").startswith("application/json"):
            assert "\n" not in r.json()["detail"], (route, params)
