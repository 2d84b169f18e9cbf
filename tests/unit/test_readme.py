"""The README stays a five-minute read (issue 58, point 5) and no link of the docs is broken.

A relative link of ``README.md`` or ``docs/*.md`` (``[text](path)``, ``![alt](path)``, outside
code) must name a file that exists, and its ``#anchor``, if any, a heading of that file, as
GitHub makes the anchor: lower case, punctuation dropped, spaces to hyphens, ``-1`` on a
repeated heading.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MAX_LINES = 200

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The text without fenced code blocks (their lines blanked, so line numbers stay)."""
    return _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = heading.replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for h in _HEADING.findall(_prose(path.read_text())):
        s = slug(h)
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every relative link of a Markdown file, outside code."""
    found = []
    for no, line in enumerate(_prose(path.read_text()).splitlines(), 1):
        for m in _LINK.finditer(_CODE.sub("", line)):
            target = m.group(1)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: are not checked
                found.append((no, target))
    return found


def test_the_readme_is_a_five_minute_read():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines: allowed at most {MAX_LINES}; move the detail to docs/"


def test_the_readme_links_every_doc():
    linked = {t.split("#")[0] for _, t in links(ROOT / "README.md")}
    missing = [p.name for p in DOCS[1:] if f"docs/{p.name}" not in linked]
    assert not missing, f"README.md does not link {missing}"


def test_every_relative_link_points_at_a_file_and_heading_that_exist():
    broken = []
    for doc in DOCS:
        for no, target in links(doc):
            where = f"{doc.relative_to(ROOT)}:{no}: {target}"
            file, _, anchor = target.partition("#")
            dest = (doc.parent / file).resolve() if file else doc
            if not dest.exists():
                broken.append(f"{where}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{where}: no heading with anchor #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


def test_the_anchor_rule():
    assert slug("The Airflow stack's processes") == "the-airflow-stacks-processes"
    assert slug("The Airflow UI: `make airflow`") == "the-airflow-ui-make-airflow"
    assert slug("Maintenance: runs that last weeks") == "maintenance-runs-that-last-weeks"
    assert slug("Schedules, Assets, backfills") == "schedules-assets-backfills"
