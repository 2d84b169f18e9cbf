"""A stage logs how it ended (``done in``, or ``failed after`` when it raised); a run summary says
only what its numbers support."""

from __future__ import annotations

import logging

import pytest

from simjoin.log import stage


def test_a_failed_stage_says_it_failed(caplog):
    log = logging.getLogger("stagetest")
    with caplog.at_level(logging.INFO, logger="stagetest"):
        with stage("ok", log) as info:
            pass
        assert info["seconds"] >= 0
        with pytest.raises(ValueError), stage("bad", log) as info:
            raise ValueError("x")
        assert info["seconds"] >= 0
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs[:2] == ["stage ok: start", msgs[1]] and msgs[1].startswith("stage ok: done in ")
    assert msgs[2] == "stage bad: start" and msgs[3].startswith("stage bad: failed after ")
    assert not any(m.startswith("stage bad: done") for m in msgs)


def test_an_empty_ssj_run_summary_has_no_nan():
    """An empty input: no unit did measurable work, so no balance ratio (was ``slowest/fastest nan``)."""
    from types import SimpleNamespace

    from jobs.ssj.spec import summary

    rounds = {"tokenize": {"records": 0, "quarantined": 0, "executor": "in_process"},
              "optimize": {"n": 1, "m": 1}, "join": {"units": 0}, "publish": {"pairs": 0}}
    line = summary(SimpleNamespace(output="/w/out"), {"rounds": [rounds]})
    assert "nan" not in line and line == "ssj: 0 pairs from 0 records (0 quarantined), 0 units (n=1, m=1) " \
                                         "in process -> /w/out"
    rounds["join"] = {"units": 2, "fastest_unit_cpu_s": 0.5, "slowest_unit_cpu_s": 1.0}
    assert "unit CPU slowest/fastest 2.0)" in summary(SimpleNamespace(output="/w/out"), {"rounds": [rounds]})
