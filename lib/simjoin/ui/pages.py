"""HTML pages of the Airflow plugin. Every value that comes from a table, a path or a request is
escaped (:func:`e`); links are built with :func:`link`. No JavaScript."""

from __future__ import annotations

import datetime as dt
import html
import json
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlencode

from simjoin.ui.data import MAX_DOWNLOAD_ROWS, Page, RunTables, TableCard

__all__ = ["PREFIX", "e", "link", "layout", "index_page", "table_page", "run_page", "error_page", "size"]

#: Where the plugin's FastAPI app is mounted on Airflow's API server.
PREFIX = "/simjoin"

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:16px;color:#1a202c;font-size:14px}
h1{font-size:20px;margin:0 0 8px}h2{font-size:16px;margin:20px 0 6px}h3{font-size:14px;margin:14px 0 4px}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #cbd5e0;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#edf2f7}td.n{text-align:right;font-variant-numeric:tabular-nums}
a{color:#2b6cb0;text-decoration:none}a:hover{text-decoration:underline}.muted{color:#718096}
.note{background:#fffbea;border:1px solid #f6e05e;padding:4px 8px;margin:6px 0}.err{background:#fff5f5;
border:1px solid #fc8181;padding:8px}section{border-top:1px solid #e2e8f0;margin-top:14px}
code{background:#f7fafc;padding:0 3px}img{max-width:100%;border:1px solid #e2e8f0;margin:4px 0}
form{margin:6px 0}input,select{font-size:13px}nav{margin-bottom:10px}
"""


def e(x: Any) -> str:
    """``x`` as HTML text, escaped (quotes too)."""
    return html.escape("" if x is None else str(x), quote=True)


def link(route: str, text: Any, **params: Any) -> str:
    """An escaped link to the plugin's ``route`` with query ``params`` (None values dropped)."""
    return f'<a href="{e(url(route, **params))}">{e(text)}</a>'


def url(route: str, **params: Any) -> str:
    """The plugin's ``route`` with query ``params`` (None values dropped), not escaped."""
    q = urlencode({k: v for k, v in params.items() if v is not None and v != ""})
    return PREFIX + route + ("?" + q if q else "")


def size(n: int) -> str:
    f = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if f < 1024 or unit == "TiB":
            return f"{f:.0f} {unit}" if unit == "B" else f"{f:.1f} {unit}"
        f /= 1024
    return str(n)


def when(d: dt.datetime | None) -> str:
    return "" if d is None else d.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def layout(title: str, body: str) -> str:
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{e(title)}</title><style>{CSS}</style>'
            f'</head><body><nav>{link("/", "simjoin tables")}</nav><h1>{e(title)}</h1>{body}</body></html>')


def error_page(message: str) -> str:
    return layout("simjoin: cannot show this", f'<div class="err">{e(message)}</div>')


def _grid(header: Sequence[str], rows: Iterable[Sequence[str]], numeric: set[int] | None = None) -> str:
    numeric = numeric or set()
    head = "".join(f"<th>{e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(v: Any) -> str:
    if isinstance(v, bytes):
        return f'<span class="muted">{len(v)} bytes</span>'
    if isinstance(v, float):
        return e(repr(v))
    if isinstance(v, dt.datetime):
        return e(v.isoformat())
    if isinstance(v, (list, dict)):
        s = json.dumps(v, default=str)
        return e(s if len(s) <= 200 else s[:200] + "...")
    return e(v)


def rows_table(page: Page) -> str:
    t = page.table
    cols = t.column_names
    data = t.to_pydict()
    import pyarrow as pa

    numeric = {i for i, c in enumerate(cols) if pa.types.is_integer(t.schema.field(c).type)
               or pa.types.is_floating(t.schema.field(c).type)}
    body = [[_cell(data[c][r]) for c in cols] for r in range(t.num_rows)]
    return _grid(cols, body, numeric) if body else '<p class="muted">no rows</p>'


def _schema(c: TableCard) -> str:
    return _grid(["column", "type"], [[e(n), f"<code>{e(tp)}</code>"] for n, tp in c.schema])


def _pager(page: Page, route: str, **params: Any) -> str:
    shown = f"rows {page.offset + 1}-{page.offset + page.table.num_rows}" if page.table.num_rows else "no rows"
    total = f" of {page.total:,}" if page.total is not None else ""
    parts = [f"<span>{e(shown + total)}</span>"]
    if page.offset > 0:
        parts.append(link(route, "previous", offset=max(0, page.offset - page.limit), limit=page.limit, **params))
    if page.more:
        parts.append(link(route, "next", offset=page.offset + page.limit, limit=page.limit, **params))
    note = f'<div class="note">{e(page.note)}</div>' if page.note else ""
    return note + "<p>" + " &middot; ".join(parts) + "</p>"


def index_page(groups: dict[str, list[tuple[TableCard, str, tuple[str, dt.datetime] | None]]], root: str,
               dag_of: dict[str, str]) -> str:
    """The warehouse's tables by pipeline: latest version, rows, size, last change and last run."""
    if not groups:
        return layout("simjoin tables", f'<p class="muted">no Delta table under the warehouse {e(root)} yet</p>')
    out = [f'<p class="muted">warehouse <code>{e(root)}</code></p>']
    for owner, items in groups.items():
        rows = []
        for c, rel, run in items:
            last = ""
            if run is not None:
                rid, started = run
                dag = dag_of.get(owner)
                last = (link("/run", rid, dag_id=dag, run_id=rid) if dag else e(rid)) + \
                    f' <span class="muted">{e(when(started))}</span>'
            rows.append([link("/table", rel, path=rel), e(c.version), e(f"{c.rows:,}"), e(size(c.bytes)),
                         e(when(c.updated)), last])
        out.append(f"<h2>{e(owner)}</h2>" + _grid(["table", "version", "rows", "size", "last commit", "last run"],
                                                   rows, {1, 2, 3}))
    return layout("simjoin tables", "".join(out))


def _history(hist: list[dict[str, Any]], rel: str, current: int | None, marked: set[int] | None = None) -> str:
    rows = []
    for h in hist:
        v = h["version"]
        params = {k: v2 for k, v2 in h["parameters"].items() if v2 not in (None, "", "[]", "{}")}
        metrics = {k: h["metrics"][k] for k in ("num_added_rows", "num_added_files", "numOutputRows",
                                                "numAddedFiles", "num_removed_files", "numRemovedFiles",
                                                "numDeletedRows", "num_deleted_rows") if k in h["metrics"]}
        ver = e(v) if v == current else link("/table", v, path=rel, version=v)
        if marked and v in marked:
            ver += ' <span class="muted">(this run)</span>'
        rows.append([ver, e(when(h["timestamp"])), e(h["operation"]),
                     f"<code>{e(h['user_metadata'])}</code>" if h["user_metadata"] else "",
                     e(json.dumps(params, default=str)) if params else "",
                     e(json.dumps(metrics)) if metrics else ""])
    return _grid(["version", "time", "operation", "userMetadata", "parameters", "metrics"], rows)


def table_page(c: TableCard, rel: str, hist: list[dict[str, Any]], page: Page, version: int | None,
               column: str | None, value: str | None, versions: list[int] | None = None) -> str:
    """One table: schema, time travel, a filter, a page of rows, downloads and the history."""
    at = f"version {c.version}" + (" (latest)" if c.version == c.latest else f" of 0..{c.latest}")
    vs = ",".join(map(str, versions)) if versions else None
    sel = dict(path=rel, version=version, column=column, value=value, versions=vs)
    opts = "".join(f'<option value="{e(n)}"{" selected" if n == column else ""}>{e(n)}</option>' for n, _ in c.schema)
    hidden = "".join(f'<input type="hidden" name="{e(k)}" value="{e(v)}">' for k, v in
                     (("path", rel), ("version", version), ("versions", vs)) if v is not None)
    form = (f'<form method="get" action="{e(PREFIX)}/table" id="filter">{hidden}filter: <select name="column">'
            f'{opts}</select> = <input name="value" value="{e(value or "")}" size="24"> '
            f'<button type="submit">show</button> {link("/table", "clear", path=rel, version=version, versions=vs)}'
            "</form>")
    what = "rows" if not versions else f"rows the commits {vs} added"
    if column:
        what += f" where {column} = {value}"
    dl = " &middot; ".join(link("/download", f"download {fmt.upper()}", format=fmt, **sel)
                           for fmt in ("csv", "parquet"))
    body = (f'<p><code>{e(c.path)}</code><br>{e(at)} &middot; {e(f"{c.rows:,}")} rows in {e(c.files)} files, '
            f'{e(size(c.bytes))} &middot; owner {e(c.owner or "-")}</p>'
            f"<h2>Schema</h2>{_schema(c)}<h2>Rows</h2><p>{e(what)}</p>{form}{_pager(page, '/table', **sel)}"
            f'<div id="rows">{rows_table(page)}</div>'
            f'<p>{dl} <span class="muted">(at most {MAX_DOWNLOAD_ROWS:,} rows; add &amp;limit=N)</span></p>'
            f'<h2>History</h2><div id="history">{_history(hist, rel, c.version, set(versions or []))}</div>')
    return layout(f"table {rel}", body)


def run_page(dag_id: str, run_id: str, state: str, output: str, tables: list[tuple[RunTables, str, Page | None]],
             plots: list[str], plot_error: str | None, start: dt.datetime | None, end: dt.datetime | None) -> str:
    """What one DAG run wrote: per table its schema, the versions the run committed, rows, and a
    page of the rows those commits added; then the run's report plots."""
    wrote = [t for t in tables if t[0].versions]
    head = (f'<p>DAG <code>{e(dag_id)}</code> &middot; run <code>{e(run_id)}</code> &middot; {e(state)} &middot; '
            f'{e(when(start))} &ndash; {e(when(end) or "running")}<br>output <code>{e(output)}</code></p>'
            f'<p>{len(wrote)} of the {len(tables)} tables of this output got commits from this run.</p>')
    summary = _grid(["table", "role", "versions this run committed", "rows now", "rows this run added"],
                    [[link("/table", rel, path=rel), e(rt.role),
                      ", ".join(link("/table", v, path=rel, version=v) for v in rt.versions) or
                      '<span class="muted">none</span>',
                      e(f"{rt.card.rows:,}") if rt.card else "",
                      e(f"{p.total:,}") if p is not None and p.total is not None else ""]
                     for rt, rel, p in tables], {3, 4})
    sections = []
    for rt, rel, page in wrote_first(tables):
        if page is None or rt.card is None:
            continue
        vs = ",".join(map(str, rt.versions))
        sections.append(
            f'<section id="{e("t-" + rt.role)}"><h2>{e(rt.role)}: {link("/table", rel, path=rel)}</h2>'
            f"<p>versions {e(vs)} &middot; "
            f"{link('/table', 'all rows these commits added, filter, download', path=rel, versions=vs)}"
            f"</p><h3>Schema</h3>{_schema(rt.card)}<h3>Rows this run added</h3>"
            f"{_pager(page, '/table', path=rel, versions=vs)}{rows_table(page)}</section>")
    pics = "".join(f'<img alt="{e(p)}" src="{e(url("/plot", dag_id=dag_id, run_id=run_id, name=p))}">' for p in plots)
    if plot_error:
        pics = f'<p class="muted">{e(plot_error)}</p>' + pics
    body = head + summary + "".join(sections) + f'<section id="report"><h2>Report</h2>{pics}</section>'
    return layout(f"outputs of {dag_id} / {run_id}", body)


def wrote_first(tables: list[tuple[RunTables, str, Page | None]]) -> list[tuple[RunTables, str, Page | None]]:
    return [t for t in tables if t[0].versions]
