"""The commands of the README and of ``docs/*.md``, as the docs-as-tests harness reads them
(``tests/reliability/test_docs_commands.py``, issue 63).

Every ``simjoin`` line of a fenced code block is a documented command: a concrete example
(``simjoin show warehouse/demo/ssj_pairs --limit 10``) or a synopsis with placeholders in
capitals, optional ``[...]`` parts, alternatives ``a|b|c`` and groups ``(x | y)``. Lines ending
in ``\\`` and indented ``[``/``--``/``(`` lines continue the command above; ``# ...`` is a comment;
``VAR=value`` before the command and ``export VAR=value`` lines above it are its environment.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```(\w*)\s*\n(.*?)^```", re.S | re.M)
_ENV = re.compile(r"^([A-Z][A-Z0-9_]*)=(\S+)\s+")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(?:[:,][A-Z0-9_ ]+)*$")


@dataclass
class Command:
    """One documented command: where it is, its text, the environment it is shown with."""

    file: str
    line: int
    text: str  # the command without its comment, continuation lines joined, env prefixes removed
    env: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def tokens(self) -> list[str]:
        return shlex.split(self.text)

    @property
    def synopsis(self) -> bool:
        """A synopsis (placeholders, optional parts, alternatives or ``...``), not a runnable example."""
        return any(t == "..." or PLACEHOLDER.match(t.strip("[]()")) or "|" in t or t.startswith(("[", "("))
                   for t in self.tokens[1:])


def _strip_comment(line: str) -> str:
    out, quote = [], None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            break
        out.append(ch)
    return "".join(out).rstrip()


def commands() -> list[Command]:
    """Every ``simjoin`` command of the README's and docs' code blocks, in document order."""
    found: list[Command] = []
    for path in DOCS:
        text = path.read_text()
        for m in _FENCE.finditer(text):
            first = text[:m.start(2)].count("\n") + 1
            env: dict[str, str] = {}
            cur: Command | None = None
            cont = False
            for k, raw in enumerate(m.group(2).splitlines()):
                line = _strip_comment(raw)
                stripped = line.strip()
                if cur is not None and (cont or (raw[:1].isspace() and stripped[:1] in ("[", "-", "("))):
                    cur.text += " " + stripped.rstrip("\\").strip()
                    cont = stripped.endswith("\\")
                    continue
                cur, cont = None, False
                if stripped.startswith("export "):
                    k_, _, v = stripped[len("export "):].partition("=")
                    env[k_.strip()] = v.strip()
                    continue
                own = dict(env)
                while (e := _ENV.match(stripped)) is not None:
                    own[e[1]] = e[2]
                    stripped = stripped[e.end():]
                if stripped.startswith(".venv/bin/simjoin "):
                    stripped = stripped[len(".venv/bin/"):]
                if not stripped.startswith("simjoin "):
                    continue
                cur = Command(path.name if path.parent == ROOT else f"docs/{path.name}", first + k,
                              stripped.rstrip("\\").strip(), own)
                cont = stripped.endswith("\\")
                found.append(cur)
    return found


def flags_and_choices(tokens: list[str]) -> list[tuple[str, list[str] | None]]:
    """(flag, the alternatives written after it or None) for every ``--flag`` of a command."""
    out: list[tuple[str, list[str] | None]] = []
    clean = [t.strip("[]()") for t in tokens]
    for i, t in enumerate(clean):
        if not t.startswith("--"):
            continue
        flag = t.split("=", 1)[0]
        nxt = clean[i + 1] if i + 1 < len(clean) else ""
        alts = nxt.split("|") if "|" in nxt and not nxt.startswith("-") else None
        out.append((flag, alts))
    return out


def required_form(tokens: list[str], alt: int = 0) -> list[str]:
    """A synopsis reduced to what it requires: ``[...]`` parts dropped, alternative number ``alt``
    of each ``(x | y)`` group (its last when it has fewer), the first of each ``a|b`` value,
    ``...`` dropped."""
    out: list[str] = []
    stack: list[list[int]] = []  # open groups: [0] optional "[", or ["(" alternative now, alternatives seen]
    for tok in tokens:
        t = tok
        while t[:1] in ("[", "("):
            stack.append([0] if t[0] == "[" else [1, 0])
            t = t[1:]
        closes = 0
        while t[-1:] in ("]", ")") and t.count("(") < t.count(")") + (1 if t[-1:] == "]" else 0):
            closes += 1
            t = t[:-1]
        if t == "|" and stack and len(stack[-1]) == 2:
            stack[-1][1] += 1
        elif t and t != "..." and all(len(g) == 2 and g[1] == min(alt, _alts(tokens) - 1) for g in stack):
            out.append(t.split("|")[0] if "|" in t and not t.startswith("-") else t)
        for _ in range(closes):
            if stack:
                stack.pop()
    return out


def _alts(tokens: list[str]) -> int:
    return 1 + sum(1 for t in tokens if t == "|")


def variants(tokens: list[str]) -> list[list[str]]:
    """The required form of each alternative of a synopsis's ``(x | y)`` groups."""
    return [required_form(tokens, k) for k in range(_alts(tokens))]


def resolve_command(tokens: list[str]) -> tuple[list[object], list[str]]:
    """The click commands a documented line names (one; every sub-command for ``generate ...``),
    and the words of its command path."""
    import click

    from simjoin.cli import cli_group

    cmd: click.Command = cli_group()
    path: list[str] = []
    for t in tokens[1:]:
        if not isinstance(cmd, click.Group):
            break
        if t == "...":
            return list(cmd.commands.values()), path
        if t not in cmd.commands:
            raise KeyError(f"simjoin {' '.join([*path, t])}: no such command")
        cmd = cmd.commands[t]
        path.append(t)
    return [cmd], path
