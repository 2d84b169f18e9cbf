"""The docs are tests (issue 63): every ``simjoin`` command of the README's and ``docs/*.md``'s
code blocks runs on small data in a scratch warehouse, in document order, and must exit 0 with
its one-line summary naming the command as its last line.

A concrete example runs as written (relative paths under the scratch folder, ``/shared/...``
inside it, ``conf/`` the project's). A synopsis runs in its required form, once per alternative
of its ``(x | y)`` groups (``--window`` and ``--window-count``; ``--task`` and ``--config``):
optional ``[...]`` parts dropped, the first of each ``a|b`` value, each placeholder (``PATH``,
``N``...) the small value :data:`VALUES` gives it for that command and flag; every flag and
choice it shows, optional or not, is checked by ``tests/unit/test_docs_flags.py``. Not run,
each for the reason :func:`_not_run` gives: lines that stand for a part of a command (``...``),
commands that run until stopped (``--follow``, ``s2j follow``), and ``cache-jvm`` (a fresh
process and a minute; ``make test``'s set-up runs it). A run is in this process (the tests'
Spark session), so the whole set takes seconds, not a JVM each.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

import pytest
from click.testing import CliRunner

from tests.docs_commands import PLACEHOLDER, ROOT, Command, commands, variants

pytestmark = pytest.mark.slow

#: What the docs' concrete examples read, made before the documented lines run.
SETUP = [
    "generate sets --out inputs/sets --rows 300 --seed 1",
    "generate vectors --out inputs/vectors --rows 200 --dim 4 --seed 1",
    "generate ineq --out inputs/ineq --rows 200 --seed 1",
    "generate keys --out inputs/keys --rows 200 --domain 20 --seed 1",
    "generate keys --out inputs/keys2 --rows 200 --domain 20 --seed 2",
    "generate aqi --out inputs/aqi --rows 200 --domain 5 --seed 1",
    "generate sets --out shared/warehouse/sets --rows 300 --seed 2",  # docs/operations.md's /shared/warehouse
    "ssj --input inputs/sets --output warehouse/demo/ssj_pairs --threshold 0.5",  # the README's demo tables
    "ssj --input inputs/sets --output warehouse/ssj_pairs --threshold 0.5 --run-id manual__2026-03-01T00:00:00+00:00",
    "ssj --input inputs/sets --output warehouse/ssj_pairs --threshold 0.5 --run-id manual__2026-03-02T00:00:00+00:00",
]

S2J_TASK = "near: abs(l.pm25 - r.pm25) <= 1"

#: A placeholder's value by (command, flag), then by flag, then by placeholder; a callable gets
#: the outputs the lines before wrote (by command) and a fresh folder.
VALUES: dict[tuple[str, str] | str, str | Callable[[dict[str, str], Callable[[str], str]], str]] = {
    ("generate", "--out"): lambda out, new: new("generated"),
    ("show", ""): "inputs/sets", ("history", ""): "inputs/sets",
    ("ssj", "--input"): "inputs/sets", ("ssj", "--threshold"): "0.5",
    ("s3j", "--left"): "inputs/vectors", ("s3j", "--threshold"): "0.05",
    ("ineq", "--left"): "inputs/ineq",
    ("hypercube", "--left"): "inputs/keys", ("hypercube", "--right"): "inputs/keys2",
    ("s2j run", "--left"): "inputs/aqi", ("s2j run", "--task"): S2J_TASK, ("s2j run", "--window"): "10m",
    ("s2j query", "--output"): lambda out, new: out["s2j run"], ("s2j query", "--task"): "near",
    ("report", "--output"): lambda out, new: out["ssj"],
    ("report", "--stats"): lambda out, new: out["ssj"] + "_stats",
    ("report", "--out"): lambda out, new: new("report"),
    ("maintain", "--output"): lambda out, new: out["ssj"],
    "--output": lambda out, new: new("out"),
    "N": "200", "S": "1", "D": "4", "R": "100", "A": "1.2", "K": "20", "STATIONS": "5", "COL": "k", "P": "2",
    "DUR": "60s", "W": "10",
}


def _partial(tokens: list[str]) -> bool:
    """A line that stands for a part of a command: ``...`` right after the command's words (the
    line above has the rest) or at its end (``simjoin ssj ...``); elsewhere ``...`` repeats the
    flag before it (``--task "NAME: PREDICATE" ...``)."""
    if "..." not in tokens:
        return False
    i = tokens.index("...")
    return i == len(tokens) - 1 or all(not t.startswith("-") for t in tokens[:i])


def _not_run(c: Command, argv: list[str]) -> str | None:
    if _partial(c.tokens):
        return "a part of a command (the line above has the rest)"
    if "--follow" in argv or argv[:2] == ["s2j", "follow"]:
        return "runs until stopped (follow mode has its own tests: test_soak, test_follow*)"
    if argv[:1] == ["cache-jvm"]:
        return "needs a fresh process and a minute; make test's set-up runs it"
    return None


def _concrete(c: Command, toks: list[str], outputs: dict[str, str], new: Callable[[str], str]) -> list[str]:
    """The argv (after ``simjoin``) of a documented line's form ``toks``, placeholders replaced."""
    argv = [t.replace("/shared/warehouse", "shared/warehouse") for t in toks[1:]]
    words = [t for t in argv if not t.startswith("-")]
    name = " ".join(words[:2]) if words[:1] in (["s2j"], ["generate"]) else words[0]
    base = name.split()[0]
    out: list[str] = []
    prev = ""
    for t in argv:
        v: object = t
        if c.synopsis and (PLACEHOLDER.match(t) or t == "NAME: PREDICATE"):
            flag = prev if prev.startswith("--") else ""
            for key in ((name, flag), (base, flag), flag, t):
                if key in VALUES:
                    v = VALUES[key]  # type: ignore[index]
                    break
            if callable(v):
                v = v(outputs, new)
            assert v not in ("PATH", "DIR", "NAME", "NAME: PREDICATE"), f"{c.where}: no value for {t} after {prev!r}"
        if t.startswith("conf/"):
            v = str(ROOT / t)
        out.append(str(v))
        prev = t
    return out


def test_every_documented_command_runs(spark, tmp_path, monkeypatch):
    from simjoin.cli import cli_group

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SIMJOIN_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("SIMJOIN_RETENTION_CHECK", "0")
    n = [0]

    def new(kind: str) -> str:
        n[0] += 1
        return f"scratch/{kind}-{n[0]}"

    def run(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
        r = CliRunner().invoke(cli_group(), argv, prog_name="simjoin", env=env)
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            raise r.exception
        lines = [ln for ln in r.stdout.strip().splitlines() if ln.strip()]
        return r.exit_code, (lines[-1] if lines else ""), r.stderr

    for line in SETUP:
        code, last, err = run(shlex.split(line), {})
        assert code == 0, (line, err[-2000:])
    outputs: dict[str, str] = {}
    failed, ran, skipped = [], [], []
    forms = [(c, toks) for c in commands() for toks in (variants(c.tokens) if c.synopsis else [c.tokens])]
    for c, toks in forms:  # a synopsis with alternatives (x | y): each of them
        why = _not_run(c, toks[1:])
        if why:
            skipped.append(f"{c.where}: {why}")
            continue
        try:
            argv = _concrete(c, toks, outputs, new)
        except KeyError as e:  # the line it builds on failed (reported there)
            failed.append(f"{c.where}: needs the output of an earlier documented {e} line")
            continue
        # a documented cluster master is not here: the same line runs on local Spark
        env = {k: v.replace("/shared/warehouse", str(tmp_path / "shared/warehouse")) for k, v in c.env.items()
               if not (k == "SIMJOIN_SPARK_MASTER" and "://" in v)}
        code, last, err = run(argv, env)
        ran.append(c.where)
        name = argv[0]
        if code != 0 or name not in last:
            failed.append(f"{c.where}: simjoin {shlex.join(argv)} -> exit {code}, last line {last!r}, "
                          f"{[ln for ln in err.splitlines() if ln.startswith('error:')]}")
            continue
        words = [t for t in argv if not t.startswith("-")]
        key = " ".join(words[:2]) if words[0] == "s2j" else words[0]
        if "--output" in argv:  # what later lines of that command's tools read: its first documented run
            outputs.setdefault(key, argv[argv.index("--output") + 1])
    print(f"ran {len(ran)} documented commands; not run: " + "; ".join(skipped))
    assert len(ran) >= 24, ran
    assert not failed, "\n".join(failed)
