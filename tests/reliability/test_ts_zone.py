"""Time zones (issue 37, item 9): a ``TIMESTAMP_NTZ`` ts, or a ts string without a zone, is wall
time in the zone ``--ts-zone`` names (default UTC); a ``TIMESTAMP`` or a string with its own zone or
offset is an instant whatever ``--ts-zone`` says. The same rule on the Spark shaping (ineq) and on
S3J's direct ingest, which leaves a non-UTC wall time to Spark."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.helpers import run_named, run_s3j

UTC = dt.UTC


def _out(path):
    from deltalake import DeltaTable

    t = DeltaTable(path).to_pyarrow_table()
    return {(a, b): ts.astimezone(UTC) for a, b, ts in zip(
        t.column("left_id").to_pylist(), t.column("right_id").to_pylist(), t.column("ts").to_pylist(), strict=True)}


def test_ntz_and_zone_less_strings_are_wall_time_in_ts_zone(spark, tmp_path):
    ntz = str(tmp_path / "in dir" / "ntz")
    spark.sql("SELECT 1").collect()
    spark.createDataFrame(
        [(1, dt.datetime(2026, 6, 1, 12, 0, 0), 1.0), (2, dt.datetime(2026, 6, 1, 12, 0, 5), 2.0)],
        "id long, ts timestamp_ntz, a double").write.format("delta").save(ntz)
    run_named(spark, "ineq", left=ntz, output=str(tmp_path / "o1"), where="l.a < r.a", window="4h",
              ts_zone="Europe/Berlin")
    # June: Berlin is UTC+2, so 12:00:05 wall time is 10:00:05 UTC
    assert _out(str(tmp_path / "o1")) == {(1, 2): dt.datetime(2026, 6, 1, 10, 0, 5, tzinfo=UTC)}

    strings = str(tmp_path / "strings")
    spark.createDataFrame(
        [(1, "2026-01-15 12:00:00", 1.0), (2, "2026-01-15T12:00:30+00:00", 2.0), (3, "2026-01-15 12:01:00Z", 3.0),
         (4, "2026-01-15 12:02:00", 4.0)],
        "id long, ts string, a double").write.format("delta").save(strings)
    run_named(spark, "ineq", left=strings, output=str(tmp_path / "o2"), where="l.a < r.a", window="8h",
              ts_zone="America/New_York")
    got = _out(str(tmp_path / "o2"))
    # January: New York is UTC-5; zone-less 12:00 and 12:02 are 17:00 and 17:02 UTC; the others keep their zone
    ny = {1: dt.datetime(2026, 1, 15, 17, 0, tzinfo=UTC), 2: dt.datetime(2026, 1, 15, 12, 0, 30, tzinfo=UTC),
          3: dt.datetime(2026, 1, 15, 12, 1, tzinfo=UTC), 4: dt.datetime(2026, 1, 15, 17, 2, tzinfo=UTC)}
    assert got == {(a, b): max(ny[a], ny[b]) for a in ny for b in ny if a < b}

    # the default is UTC: the same NTZ rows at their wall time
    run_named(spark, "ineq", left=ntz, output=str(tmp_path / "o3"), where="l.a < r.a", window="4h")
    assert _out(str(tmp_path / "o3")) == {(1, 2): dt.datetime(2026, 6, 1, 12, 0, 5, tzinfo=UTC)}


def test_s3j_direct_ingest_reads_ntz_in_ts_zone(spark, tmp_path):
    left = str(tmp_path / "vec")
    spark.createDataFrame(
        [(1, dt.datetime(2026, 6, 1, 12, 0, 10), [1.0, 0.0]), (2, dt.datetime(2026, 6, 1, 12, 0, 20), [1.0, 0.001])],
        "id long, ts timestamp_ntz, vector array<double>").write.format("delta").save(left)
    out = str(tmp_path / "pairs")
    r = run_s3j(spark, left, out, window="60s", ts_zone="Asia/Tokyo")
    assert r.pairs == 1 and r.quarantined == 0
    from deltalake import DeltaTable

    t = DeltaTable(out).to_pyarrow_table()
    # Tokyo is UTC+9: the window of 12:00:10 wall time starts at 03:00:00 UTC
    assert [w.astimezone(UTC) for w in t.column("window_start").to_pylist()] == [
        dt.datetime(2026, 6, 1, 3, 0, tzinfo=UTC)]


def test_a_bad_zone_fails_with_one_line():
    from simjoin.config import ConfigError
    from simjoin.pipeline import get_spec

    with pytest.raises(ConfigError, match="ts_zone.*Mars/Olympus.*IANA time zone"):
        get_spec("ineq").make_run({"left": "/tmp/x", "output": "/tmp/y", "where": "l.a < r.a",
                                   "ts_zone": "Mars/Olympus"})
