"""Issue 63 point 8: help that shows the essentials, and errors that name what the user typed.

``simjoin generate <kind> --help`` describes that kind and lists only its options; a stream
command lists its tables first and its timing options last, without click's internals in the
defaults; an error names the flag typed on the command line (``--window``), the environment
variable or the YAML file a value came from, never a config key the user never wrote."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from simjoin.cli import cli_group


def _help(*args: str) -> str:
    r = CliRunner().invoke(cli_group(), [*args, "--help"])
    assert r.exit_code == 0, r.output
    return r.output


def _options(text: str) -> list[str]:
    return re.findall(r"^\s{2}(--[a-z-]+)", text, re.M)


def _error(*args: str, env: dict[str, str] | None = None) -> str:
    r = CliRunner().invoke(cli_group(), list(args), env=env)
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error: ")]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    return lines[0]


KIND_OPTIONS = {
    "sets": {"--universe", "--dup-frac", "--lengths", "--dist"},
    "vectors": {"--dim", "--dist", "--rate", "--drift", "--drift-period", "--drift-after"},
    "ineq": {"--dist", "--rate"},
    "keys": {"--alpha", "--domain", "--rate"},
    "aqi": {"--domain", "--rate"},
}
COMMON = {"--out", "--overwrite", "--rows", "--seed", "--master", "--config", "--help"}


def test_each_generate_kind_has_its_own_description_and_only_its_options():
    group = _help("generate")
    lines = {k: re.search(rf"^\s+{k}\s+(.+)$", group, re.M)[1] for k in KIND_OPTIONS}
    assert len(set(lines.values())) == len(KIND_OPTIONS), lines  # five descriptions, not one
    every = set().union(*KIND_OPTIONS.values())
    for kind, own in KIND_OPTIONS.items():
        text = _help("generate", kind)
        opts = set(_options(text))
        assert own <= opts and not (opts - own - COMMON), (kind, sorted(opts))
        assert not (every - own) & opts, (kind, sorted((every - own) & opts))
    # a kind's own choices: ineq's dist offers ineq's distributions only
    ineq = _help("generate", "ineq")
    assert "[uniform|pareto|correlated]" in ineq and "gaussian" not in ineq


@pytest.mark.parametrize("cmd", ["ineq", "s3j", "hypercube", "s2j run"])
def test_a_stream_command_lists_its_tables_first_and_no_click_internals(cmd):
    text = _help(*cmd.split())
    opts = _options(text)
    first_timing = opts.index("--ts-unit")
    for table in ("--left", "--output"):
        assert opts.index(table) < first_timing, (table, opts)
    assert "(maintain_every)" not in text and "x>=0" not in text, text


def test_errors_name_the_flag_the_variable_or_the_file_the_user_wrote(tmp_path):
    base = ["ineq", "--left", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--where", "l.a < r.a"]
    assert _error(*base) == ("error: missing --window: allowed exactly one of --window (a duration) and "
                             "--window-count (tuples)")
    assert _error(*base, "--window", "10s", "--window-count", "5").startswith("error: invalid --window '10s': "
                                                                              "allowed exactly one of --window")
    assert _error(*base, "--window", "10s", "--maintain-every", "-1") == (
        "error: invalid --maintain-every -1: allowed an integer >= 0 (0: never)")
    ssj = ["ssj", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")]
    assert _error(*ssj, "--threshold", "2") == "error: invalid --threshold 2.0: allowed 0 < threshold <= 1"
    assert _error(*ssj, env={"SIMJOIN_SSJ_THRESHOLD": "5"}) == (
        "error: invalid SIMJOIN_SSJ_THRESHOLD=5.0: allowed 0 < threshold <= 1 (config ssj.threshold)")
    y = tmp_path / "my.yaml"
    y.write_text("ssj:\n  threshold: 3\n")
    assert _error(*ssj, "--config", str(y)) == (
        f"error: invalid config ssj.threshold=3.0 in {y}: allowed 0 < threshold <= 1")
    y.write_text("ssj:\n  thresh: 0.5\n")
    line = _error(*ssj, "--config", str(y))
    assert f"ssj.thresh=0.5 in {y}" in line and "id_col" in line and "--id-col" not in line  # YAML keys
    assert _error("hypercube", "--left", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--key", "k") == (
        "error: missing --right: allowed a Delta table path (required)")
