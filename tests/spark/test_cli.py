"""The `simjoin` CLI in-process (the session fixture's Spark is reused): generate, show, history."""

import pytest
from click.testing import CliRunner

from simjoin.cli import cli_group

app = cli_group()
runner = CliRunner()


def _last_line(result):
    return [line for line in result.output.strip().splitlines() if line.strip()][-1]


def test_generate_vectors_reads_back_with_deltalake(spark, tmp_path):
    from deltalake import DeltaTable

    out = str(tmp_path / "x")
    r = runner.invoke(app, ["generate", "vectors", "--out", out, "--rows", "1000", "--dim", "8",
                            "--dist", "gaussian", "--rate", "100", "--seed", "1"])
    assert r.exit_code == 0, r.output
    assert _last_line(r).startswith(f"generate vectors: wrote 1000 rows to {out}")
    t = DeltaTable(out).to_pyarrow_table()
    assert t.num_rows == 1000 and t.column_names == ["id", "ts", "vector"]
    assert {len(v) for v in t.column("vector").to_pylist()} == {8}
    ts = t.column("ts").to_pylist()
    assert (max(ts) - min(ts)).total_seconds() == 9.99  # 1000 rows at 100 rows/s

    r = runner.invoke(app, ["show", out, "--limit", "3"])
    assert r.exit_code == 0 and _last_line(r) == f"show {out}: 1000 rows at version 0, columns id, ts, vector"
    r = runner.invoke(app, ["generate", "vectors", "--out", out, "--rows", "10", "--seed", "2"])
    assert r.exit_code == 2 and f"error: --out {out} already holds a Delta table" in r.output, r.output
    r = runner.invoke(app, ["generate", "vectors", "--out", out, "--rows", "10", "--seed", "2", "--overwrite"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["show", out, "--version", "0", "--limit", "1"])
    assert "1000 rows at version 0" in _last_line(r)
    r = runner.invoke(app, ["history", out])
    assert r.exit_code == 0 and _last_line(r) == f"history {out}: 2 versions, latest 1"


def test_bad_flags_fail_with_clear_messages(spark, tmp_path):
    r = runner.invoke(app, ["generate", "vectors", "--out", str(tmp_path / "v"), "--dist", "lognormal"])
    assert r.exit_code == 2 and "lognormal" in r.output
    r = runner.invoke(app, ["ssj", "--input", str(tmp_path / "v"), "--output", str(tmp_path / "o"),
                            "--threshold", "1.5"])
    assert r.exit_code == 2 and "0 < threshold <= 1" in r.output
    r = runner.invoke(app, ["show", str(tmp_path / "nothing")])
    assert r.exit_code == 2 and "no Delta table" in r.output


@pytest.mark.parametrize("limit", [20, 2])
def test_show_without_spark_prints_what_spark_prints(spark, tmp_path, limit):
    """``simjoin show`` reads a local table with deltalake; its grid is Spark's ``show`` grid."""
    import datetime as dt

    import pyarrow as pa
    from deltalake import write_deltalake

    from simjoin.inspect_table import show

    p = str(tmp_path / "t")
    t = pa.table({"id": pa.array([1, -2, 3, 4], pa.int64()),
                  "name": pa.array(["a", None, "c" * 100, "ü"]),
                  "x": pa.array([0.5, 1e-5, float("nan"), 12345678.9]),
                  "ok": pa.array([True, False, None, True]),
                  "ts": pa.array([dt.datetime(2026, 1, 2, 3, 4, 5, 600000), dt.datetime(2026, 1, 2, 3, 4, 5),
                                  None, dt.datetime(1999, 12, 31, 23, 59, 59, 123)], pa.timestamp("us", tz="UTC")),
                  "v": pa.array([[1.0, 2.0], [], None, [0.25]], pa.list_(pa.float64()))})
    write_deltalake(p, t, mode="append")
    want = spark.read.format("delta").load(p)._jdf.showString(limit, 80, False).rstrip("\n")
    got, n, v, cols = show(p, limit)
    assert (got, n, v) == (want, 4, 0), f"\n{got}\n{want}"
