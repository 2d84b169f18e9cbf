"""Every command of the README's and docs' code blocks names a real command, real flags and real
choices (``tests/docs_commands.py``); the runs themselves are ``tests/reliability/test_docs_commands.py``."""

from __future__ import annotations

import click

from tests.docs_commands import commands, flags_and_choices, resolve_command


def test_the_harness_finds_the_documented_commands():
    found = commands()
    where = {c.where.split(":")[0] for c in found}
    assert {"README.md", "docs/operations.md"} <= where and len(found) >= 25, [c.where for c in found]
    names = {c.tokens[1] for c in found}
    assert {"generate", "ssj", "s3j", "ineq", "hypercube", "s2j", "show", "history", "report", "maintain"} <= names


def test_every_documented_flag_and_choice_exists():
    wrong: list[str] = []
    for c in commands():
        try:
            cmds, path = resolve_command(c.tokens)
        except KeyError as e:
            wrong.append(f"{c.where}: {e}")
            continue
        for flag, alts in flags_and_choices(c.tokens):
            for cmd in cmds:
                opts = {o: p for p in cmd.params for o in (*p.opts, *p.secondary_opts)}  # type: ignore[attr-defined]
                p = opts.get(flag)
                if p is None:
                    wrong.append(f"{c.where}: simjoin {' '.join(path)} {cmd.name}: no flag {flag}")
                elif alts and isinstance(p.type, click.Choice):
                    extra = set(alts) - set(p.type.choices)
                    if extra:
                        wrong.append(f"{c.where}: {flag} {'|'.join(alts)}: {sorted(extra)} not among "
                                     f"{list(p.type.choices)}")
    assert not wrong, "\n".join(wrong)
