"""A micro-batch staged through the driver (the engine's Arrow rules and S3J's Arrow prepare hook)
quarantines the same rows with the same reasons, and stages the same window copies, as the Spark
rules: two outputs read the same two appends of bad and good rows, one with
``SIMJOIN_LOCAL_INGEST=0``. The rows cover every rule: a null or unreadable ts, a null id, a
future ts, a null vector, null/NaN/inf elements, a wrong dimension, a zero vector, a duplicate id
in the batch (ties in ts broken by the vector), an id seen in an open window, and late rows."""

from __future__ import annotations

import datetime as dt

import pytest

from simjoin.spark import delta
from tests.helpers import run_s3j

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SCHEMA = "id long, ts string, vector array<double>"


def _ts(s: float) -> str:
    return (T0 + dt.timedelta(seconds=s)).strftime("%Y-%m-%d %H:%M:%S.%f")


FIRST = [
    (1, _ts(1), [1.0, 0.0]), (2, _ts(2), [0.999, 0.01]), (3, _ts(3), [0.0, 0.0]), (4, _ts(4), [1.0, 0.0, 0.0]),
    (5, _ts(5), [float("nan"), 1.0]), (6, _ts(6), None), (7, _ts(7), [float("inf"), 1.0]), (8, _ts(8), [None, 1.0]),
    (9, _ts(9), [0.5, 0.5]), (9, _ts(9), [0.4, 0.6]), (9, _ts(9.5), [0.3, 0.7]),  # duplicate: ts, then vector
    (10, "not a time", [0.1, 0.9]), (None, _ts(10), [0.2, 0.8]), (11, None, [0.3, 0.3]),
    (12, "2999-01-01 00:00:00", [0.6, 0.4]), (13, _ts(70), [0.7, 0.7]), (14, _ts(130), [0.2, 0.2]),
    (15, _ts(20), []),
]
SECOND = [
    (1, _ts(80), [0.9, 0.1]),  # id 1 again, window 60-120 (its first record's window 0-60 closed): late? no - new
    (13, _ts(75), [0.8, 0.8]),  # id 13 seen in the open window 60-120
    (16, _ts(30), [0.5, 0.1]),  # window 0-60, closed by the watermark (ts 130 committed): late
    (17, _ts(140), [0.3, 0.31]), (18, _ts(141), [0.0, 0.0]),
]


def _tables(spark, out):
    q = sorted(((r.side, r.id, r.reason.split(" past the current time")[0], r.row, r.ts_raw)
                for r in delta.read_table(spark, out + "_quarantine").collect()), key=repr)
    pairs = sorted((r.left_id, r.right_id, r.window_start) for r in delta.read_table(spark, out).collect())
    return q, pairs


@pytest.mark.parametrize("slide", [pytest.param(None, marks=[pytest.mark.slow, pytest.mark.exhaustive]), "30s"])
def test_driver_rules_quarantine_what_the_spark_rules_quarantine(spark, tmp_path, monkeypatch, slide):
    src = str(tmp_path / "in")
    got = {}
    for mode in ("spark", "driver"):
        monkeypatch.setenv("SIMJOIN_LOCAL_INGEST", "0" if mode == "spark" else "1")
        out = str(tmp_path / mode)
        for k, rows in enumerate((FIRST, SECOND)):
            spark.createDataFrame(rows, SCHEMA).write.format("delta").mode("overwrite" if k == 0 else "append") \
                .save(src if mode == "spark" else src)
            run_s3j(spark, src, out, threshold=0.2, metric="angular", window="60s", slide=slide, workers=2)
        got[mode] = _tables(spark, out)
        spark.createDataFrame(FIRST, SCHEMA).write.format("delta").mode("overwrite").save(src)  # reset the input
    q_s, p_s = got["spark"]
    q_d, p_d = got["driver"]
    reasons = {r[2].split(" ")[0] for r in q_s}
    assert {"null", "unreadable", "future:", "zero", "vector", "NaN", "duplicate", "late:"} <= reasons, reasons
    assert q_d == q_s
    assert p_d == p_s and p_s
