"""A stage logs how it ended: ``done in`` when it finished, ``failed after`` when it raised."""

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
