"""The simjoin Airflow plugin (Airflow 3.1+): pages on the API server, in the UI.

- ``fastapi_apps``: :data:`app`, mounted at ``/simjoin`` on Airflow's API server;
- ``external_views``: a **simjoin outputs** tab on every DAG run (``dag_run``: what that run
  wrote), and a **simjoin tables** entry in the navigation (the warehouse's tables by pipeline).

Every page and endpoint takes Airflow's own authentication (``get_user``: the UI's session cookie
or an ``Authorization: Bearer`` JWT from ``/auth/token``). Without it a browser is sent to
Airflow's login page and any other client gets 401. Reads only, with ``deltalake``
(:mod:`simjoin.ui.data`), confined to the warehouse.

Installed with the package: the entry point ``airflow.plugins`` names :class:`SimjoinPlugin`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import tempfile
import threading
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from simjoin.ui import data, pages

__all__ = ["app", "SimjoinPlugin", "RUN_VIEW", "NAV_VIEW"]

_bearer = HTTPBearer(auto_error=False)


async def _user(request: Request, creds: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> Any:
    """Airflow's user of this request (its JWT, or the UI's session cookie); raises 401/403."""
    from airflow.api_fastapi.core_api.security import get_user

    return await get_user(request, None, creds)


#: Who may read a table no simjoin pipeline owns (an input, the task-timing table): ``admin``
#: (the default: users with Airflow's Admin role) or ``login`` (any logged-in user).
UNOWNED_ENV = "SIMJOIN_UI_UNOWNED_TABLES"


def _may_read(user: Any, pipeline: str | None) -> None:
    """Refuses (403) a user Airflow's auth manager does not let read the DAG of ``pipeline`` (its
    runs and the tables it owns, by the owner its table records). A table no pipeline owns (an
    input, the task-timing table) is an admin's, unless ``SIMJOIN_UI_UNOWNED_TABLES=login``."""
    from airflow.api_fastapi.app import get_auth_manager

    from simjoin.pipeline import specs

    if not pipeline or pipeline not in specs():
        setting = os.environ.get(UNOWNED_ENV, "admin").strip().lower() or "admin"
        if setting not in ("admin", "login"):
            raise data.Refused(f"invalid {UNOWNED_ENV}={setting!r}: allowed admin or login", 500)
        if setting == "login" or _is_admin(get_auth_manager(), user):
            return
        raise data.Refused("not allowed: a table no simjoin DAG owns (an input, the task timings) is shown to "
                           f"admins only ({UNOWNED_ENV}=login shows it to every login)", 403)
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    dag_id = f"simjoin_{pipeline}"
    if not get_auth_manager().is_authorized_dag(method="GET", user=user, access_entity=DagAccessEntity.RUN,
                                                 details=DagDetails(id=dag_id)):
        raise data.Refused(f"not allowed: your Airflow user may not read the DAG {dag_id} and its outputs", 403)


def _is_admin(manager: Any, user: Any) -> bool:
    """Airflow's Admin role: the simple auth manager's own test, else what only admins may do in
    any auth manager (change the configuration)."""
    test = getattr(manager, "_is_admin", None)
    if callable(test):
        return bool(test(user))
    return bool(manager.is_authorized_configuration(method="PUT", user=user))


app = FastAPI(title="simjoin", docs_url=None, redoc_url=None, openapi_url=None,
              dependencies=[Depends(_user)])


@app.exception_handler(HTTPException)
async def _refused(request: Request, exc: HTTPException) -> Response:
    """No or a bad credential: a browser goes to Airflow's login page (and back here after it),
    any other client gets the status."""
    if exc.status_code in (401, 403) and "text/html" in request.headers.get("accept", ""):
        try:
            from airflow.api_fastapi.app import get_auth_manager

            return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)
        except Exception:  # no auth manager to send the browser to: the status alone
            pass
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


@app.exception_handler(data.Refused)
async def _bad(request: Request, exc: data.Refused) -> Response:
    if "text/html" in request.headers.get("accept", ""):
        return HTMLResponse(pages.error_page(str(exc)), status_code=exc.status)
    return JSONResponse({"detail": str(exc)}, status_code=exc.status)


@app.middleware("http")
async def _headers(request: Request, call_next: Any) -> Response:
    resp: Response = await call_next(request)
    resp.headers.setdefault("X-Content-Type-Options", "nosniff")
    resp.headers.setdefault("Cache-Control", "no-store")
    resp.headers.setdefault("Content-Security-Policy", "default-src 'self'; style-src 'unsafe-inline'; "
                                                       "script-src 'none'; frame-ancestors 'self'")
    return resp


def _int(v: str | None, name: str, lo: int = 0) -> int | None:
    if v is None or v == "":
        return None
    try:
        n = int(v)
    except ValueError:
        raise data.Refused(f"invalid {name} {v!r}: allowed an integer >= {lo}") from None
    if n < lo:
        raise data.Refused(f"invalid {name} {v!r}: allowed an integer >= {lo}")
    return n


def _versions(v: str | None) -> list[int] | None:
    if not v:
        return None
    out = [_int(x.strip(), "versions") for x in v.split(",") if x.strip()]
    return sorted({x for x in out if x is not None}) or None


@app.get("/", response_class=HTMLResponse)
def index(user: Any = Depends(_user)) -> str:
    """The warehouse's tables by pipeline, each with its latest version, size and last run."""
    from simjoin.pipeline import specs

    root = data.warehouse_root()
    dag_of = {n: f"simjoin_{n}" for n in specs()}
    shown: list[tuple[str, Any]] = []
    for p in data.find_tables(root):
        try:
            c = data.card(p)
            _may_read(user, c.owner)
        except data.Refused:
            continue  # unreadable, or a table of a DAG this user may not read: not listed
        shown.append((p, c))
    last = data.runs_of(sorted({c.output or p for p, c in shown}))  # the timing rows of these outputs only
    groups: dict[str, list[Any]] = {}
    for p, c in shown:
        # the last run of the output whose manifest owns the table (never told by the table's name)
        run = last.get(os.path.realpath(c.output)) if c.output else None
        owner = c.owner or ("simjoin" if data.relative(p, root).startswith("_simjoin") else "other tables (inputs)")
        groups.setdefault(owner, []).append((c, data.relative(p, root), run))
    return pages.index_page(dict(sorted(groups.items())), root, dag_of)


@app.get("/table", response_class=HTMLResponse)
def table(path: str, version: str | None = None, offset: str | None = None, limit: str | None = None,
          column: str | None = None, value: str | None = None, versions: str | None = None,
          user: Any = Depends(_user)) -> str:
    """One table: schema, a page of rows (at a version, of some commits, under a filter), history."""
    root = data.warehouse_root()
    p = data.confine(path, root)
    _may_read(user, data.card(p).owner)
    v, vs = _int(version, "version"), _versions(versions)
    page = data.rows(p, v, _int(offset, "offset") or 0, _int(limit, "limit", 1) or data.PAGE_ROWS,
                     column or None, value, vs)
    return pages.table_page(data.card(p, v), data.relative(p, root), data.history(p), page, v, column or None,
                            value, vs)


@app.get("/download")
def download(path: str, format: str = "csv", version: str | None = None, column: str | None = None,
             value: str | None = None, limit: str | None = None, versions: str | None = None,
             user: Any = Depends(_user)) -> Response:
    """At most ``limit`` rows (default 100,000, at most 1,000,000) and ``SIMJOIN_UI_DOWNLOAD_MAX_BYTES``
    bytes (default 256 MiB) as CSV or Parquet, streamed in bounded memory."""
    p = data.confine(path)
    _may_read(user, data.card(p).owner)
    cap = data.download_max_bytes()
    chunks, media = data.download(p, format, _int(version, "version"), column or None, value,
                                  _int(limit, "limit", 1) or data.DOWNLOAD_ROWS, _versions(versions), cap)
    name = os.path.basename(p.rstrip("/")) or "table"
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
    return StreamingResponse(chunks, media_type=media, headers={
        "Content-Disposition": f'attachment; filename="{safe}.{format}"', "X-Simjoin-Max-Bytes": str(cap)})


def _dag_run(dag_id: str, run_id: str) -> tuple[dict[str, Any], str, dt.datetime | None, dt.datetime | None]:
    """(conf, state, start, end) of a DAG run, from Airflow's metadata database."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as s:
        r = s.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        if r is None:
            raise data.Refused(f"no run {run_id!r} of the DAG {dag_id!r}", 404)
        return dict(r.conf or {}), str(r.state), r.start_date, r.end_date


def _pipeline(dag_id: str) -> str:
    from simjoin.pipeline import specs

    name = dag_id.removeprefix("simjoin_")
    if not dag_id.startswith("simjoin_") or name not in specs():
        raise data.Refused(f"invalid DAG {dag_id!r}: allowed a simjoin DAG (simjoin_<pipeline>)", 404)
    return name


def _params(pipeline: str, conf: dict[str, Any]) -> dict[str, Any]:
    """The run's parameters: the DAG's defaults, then the run's conf (as its tasks get them)."""
    from simjoin.pipeline import get_spec
    from simjoin.pipeline.dags import dag_defaults

    spec = get_spec(pipeline)
    known = {f.name for f in spec.fields()}
    return {**dag_defaults(spec), **{k: v for k, v in conf.items() if k in known}}


_plot_lock = threading.Lock()


def _plot_dir(output: str, run_id: str) -> str:
    base = os.path.join(tempfile.gettempdir(), f"simjoin-ui-{os.getuid()}")
    os.makedirs(base, mode=0o700, exist_ok=True)
    os.chmod(base, 0o700)
    return os.path.join(base, hashlib.sha256(f"{output}\0{run_id}".encode()).hexdigest()[:32])


def _plots(output: str, run_id: str, finished: bool) -> tuple[list[str], str | None]:
    """The run's report plots (``simjoin report``), rendered once into a private cache folder."""
    from simjoin.report import render_run

    d = _plot_dir(output, run_id)
    with _plot_lock:
        if not (finished and os.path.isdir(d)):
            try:
                render_run(output, d, run_id)
            except (FileNotFoundError, ValueError) as exc:
                return [], f"no report for this run: {exc}"
    return sorted(f for f in os.listdir(d) if f.endswith(".png")), None


@app.get("/run", response_class=HTMLResponse)
def run(dag_id: str, run_id: str, limit: str | None = None, user: Any = Depends(_user)) -> str:
    """What one run of a simjoin DAG wrote: every table of its output, the versions the run
    committed, a page of the rows they added (pairs, quarantined rows with reasons), and the plots."""
    pipeline = _pipeline(dag_id)
    _may_read(user, pipeline)
    conf, state, start, end = _dag_run(dag_id, run_id)
    root = data.warehouse_root()
    try:
        output, tables = data.run_tables(pipeline, _params(pipeline, conf), run_id, start, end, root)
    except data.Refused:
        raise
    except Exception as exc:  # a conf the pipeline refuses: the run wrote nothing of it
        from simjoin.pipeline.runner import one_line

        raise data.Refused(f"the run's parameters name no output: {one_line(exc)}") from exc
    n = _int(limit, "limit", 1) or 20
    shown = []
    for rt in tables:
        rt.card = data.card(rt.path)
        try:  # each table by its own owner: a conf may name another DAG's table, or an input
            _may_read(user, rt.card.owner)
        except data.Refused:
            continue
        page = data.rows(rt.path, limit=min(n, data.MAX_PAGE_ROWS), versions=rt.versions) if rt.versions else None
        shown.append((rt, data.relative(rt.path, root), page))
    finished = end is not None
    plots, err = _plots(output, run_id, finished) if output and any(t.versions for t in tables) else \
        ([], "no report: this run committed nothing")
    return pages.run_page(dag_id, run_id, state, output, shown, plots, err, start, end)


@app.get("/plot")
def plot(dag_id: str, run_id: str, name: str, user: Any = Depends(_user)) -> Response:
    """One PNG of the run's report (rendered by :func:`run`)."""
    from simjoin.pipeline import get_spec

    pipeline = _pipeline(dag_id)
    _may_read(user, pipeline)
    conf = _dag_run(dag_id, run_id)[0]
    output = str(getattr(get_spec(pipeline).make_run(_params(pipeline, conf), run_id).cfg, "output", "") or "")
    d = _plot_dir(output, run_id)
    if os.path.basename(name) != name or not name.endswith(".png") or not os.path.isfile(os.path.join(d, name)):
        raise data.Refused(f"no plot {name!r} of this run: allowed a plot the run's page lists", 404)
    return FileResponse(os.path.join(d, name), media_type="image/png")


#: The DAG run tab: what this run wrote.
RUN_VIEW = {"name": "simjoin outputs", "href": f"{pages.PREFIX}/run?dag_id={{DAG_ID}}&run_id={{RUN_ID}}",
            "destination": "dag_run", "url_route": "simjoin-outputs", "icon": None}
#: The navigation entry: the warehouse's tables.
NAV_VIEW = {"name": "simjoin tables", "href": f"{pages.PREFIX}/", "destination": "nav",
            "url_route": "simjoin-tables", "category": "browse"}


try:
    from airflow.plugins_manager import AirflowPlugin
except ImportError:  # pragma: no cover - Airflow is a dependency
    AirflowPlugin = object  # type: ignore[misc,assignment]


class SimjoinPlugin(AirflowPlugin):  # type: ignore[misc,valid-type]
    name = "simjoin"
    fastapi_apps = [{"app": app, "url_prefix": pages.PREFIX, "name": "simjoin outputs"}]  # noqa: RUF012
    external_views = [RUN_VIEW, NAV_VIEW]  # noqa: RUF012
