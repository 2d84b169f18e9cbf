"""Test files' measured run times, heaviest first: ``make test``'s workers take whole files
(``--dist loadfile``) in this order, so the long ones start first and the short ones fill the end.

Refresh after a run that wrote a JUnit report::

    .venv/bin/python -m pytest -n 2 --dist loadfile -m "not exhaustive" tests --junitxml=/tmp/t.xml
    .venv/bin/python -m tests.durations /tmp/t.xml
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

FILE = Path(__file__).with_name("durations.json")


def load() -> dict[str, float]:
    """{test file relative to the project root: seconds}; empty without the file."""
    return json.loads(FILE.read_text()) if FILE.exists() else {}


def order_key(weights: dict[str, float], path: str, n_tests: int) -> float:
    """Sort key (lower first): a measured file by its time, a new one at 5 s a test."""
    return -weights.get(path, 5.0 * n_tests)


def from_junit(xml: str) -> dict[str, float]:
    import xml.etree.ElementTree as ET

    out: Counter[str] = Counter()
    for tc in ET.parse(xml).getroot().iter("testcase"):
        parts = tc.get("classname", "").split(".")
        while parts and parts[-1][:1].isupper():  # a test class: its module is the file
            parts.pop()
        out["/".join(parts) + ".py"] += float(tc.get("time") or 0)
    return {k: round(v, 1) for k, v in out.most_common()}


if __name__ == "__main__":  # merge a JUnit report's times into durations.json
    merged = {**load(), **from_junit(sys.argv[1])}
    FILE.write_text(json.dumps(dict(sorted(merged.items(), key=lambda kv: -kv[1])), indent=1) + "\n")
    print(f"{FILE}: {len(merged)} files")
