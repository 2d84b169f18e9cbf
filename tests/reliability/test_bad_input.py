"""Bad input, for every pipeline and its DAG, driven from the pipeline specs.

Every pipeline of ``simjoin.pipeline.registry.specs()`` gets every kind of bad input in ``KINDS``
(or an explicit ``NA`` saying why the kind does not apply): a missing table, a wrong column type,
null, NaN and inf values, a wrong vector dimension, duplicate ids, empty inputs, out-of-range
thresholds, unparsable predicates (or specs), an output equal to the input, an existing table at
the output, and a path outside the warehouse (``SIMJOIN_WAREHOUSE_ONLY``). The valid base of each
case is ``tests/reliability/cases.py`` (``CASES[name].make_inputs``); what to corrupt (the payload
column, the reasons to expect) is ``BAD`` below, keyed by pipeline. A pipeline missing from either
fails ``test_every_pipeline_has_a_case_for_every_kind``.

Expected outcomes:

- ``Error``: the CLI prints one line ``error: ...`` on stderr (naming the value and what is
  allowed) and exits 2; the DAG's task body (``runner.run_task`` of the first stage, what every
  DAG task calls) raises ``AirflowFailException`` (no retry) with the same one line. Nothing is
  written (no file appears under the case's folder).
- ``Quarantine``: row-level problems: the bad rows go to the run's quarantine table with their
  reason, the good rows go on (first stage through the DAG's task body; the whole pipeline through
  the CLI in the slow suite).
- ``Ok``: e.g. an empty input is a run with 0 pairs, not an error.

The fast subset (unmarked) covers every error case through the CLI and the DAG task body and the
row-level cases through the DAG task body; ``-m slow`` adds the whole pipelines through the CLI
(every bad row of a pipeline in one input) and one real ``dag.test()`` per DAG. ``-m exhaustive``
(``make test-exhaustive``) runs each row-level kind on its own as well, through the CLI and the
DAG task body.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import pytest
from click.testing import CliRunner

from simjoin.pipeline.registry import specs
from simjoin.pipeline.spec import PipelineSpec
from simjoin.spark import delta
from tests.reliability import cases as base_cases

Params = dict[str, Any]

KINDS = ("missing_table", "wrong_type", "null", "nan_inf", "wrong_dim", "duplicate_id", "empty",
         "threshold_range", "unparsable", "output_is_input", "existing_out", "warehouse_escape")
ROW_LEVEL = ("null", "nan_inf", "wrong_dim", "duplicate_id")


def _pipelines() -> dict[str, PipelineSpec]:
    """The project's pipelines (``jobs/<name>/spec.py``), not toy specs other tests register."""
    return {n: s for n, s in sorted(specs().items()) if s.stages[0].fn.startswith("jobs.")}


# ------------------------------------------------------------------ what a case is


@dataclass(frozen=True)
class Error:
    """``mutate(spark, folder, params) -> params``; the one-line error contains every ``needles``."""

    mutate: Callable[[Any, str, Params], Params]
    needles: tuple[str, ...]
    #: a config error, raised before Spark is asked anything (the fast path, also without Spark)
    config: bool = False
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Quarantine:
    """Rows appended to a copy of the first input: ``rows(template, column) -> [(row, reason prefix)]``."""

    rows: Callable[[dict[str, Any], str], list[tuple[dict[str, Any], str]]]


@dataclass(frozen=True)
class Ok:
    """A run that succeeds: ``needle`` in the summary line; ``check(spark, folder, params)``."""

    mutate: Callable[[Any, str, Params], Params]
    needle: str
    check: Callable[[Any, str, Params], None] | None = None


@dataclass(frozen=True)
class NA:
    """The kind does not apply to this pipeline; ``why`` says so."""

    why: str


Case = Error | Quarantine | Ok | NA


@dataclass(frozen=True)
class Know:
    """Per-pipeline knowledge the generic cases need."""

    inputs: tuple[str, ...]  # config fields of input tables (first: the one corrupted)
    output: str  # config field of the output
    column: Callable[[Params], str]  # the payload column the row-level cases corrupt
    id_col: str = "id"
    cases: dict[str, list[Case] | NA] = field(default_factory=dict)


# ------------------------------------------------------------------ helpers writing bad inputs


def _df(spark, path):
    return delta.read_table(spark, path)


def _write(spark, df, path):
    df.write.format("delta").mode("overwrite").save(path)
    return path


def _with(field_: str, value: Any) -> Callable[[Any, str, Params], Params]:
    return lambda spark, folder, p: {**p, field_: value}


def _kind_with(kind: str, field_: str, value: Any) -> Callable[[Any, str, Params], Params]:
    """generate's params as kind ``kind`` with ``field_`` set: the options of other kinds dropped
    (``simjoin generate <kind>`` offers only its own)."""
    from jobs.generate.config import GenerateConfig

    def mutate(spark: Any, folder: str, p: Params) -> Params:
        own = {f.name for f in fields(GenerateConfig)
               if kind in (f.metadata.get("by_choice") or {kind: {}}) or f.metadata.get("flag") == ""}
        return {**{k: v for k, v in p.items() if k in own}, "kind": kind, field_: value}

    return mutate


def _missing(field_: str) -> Callable[[Any, str, Params], Params]:
    return lambda spark, folder, p: {**p, field_: os.path.join(folder, "no_such_table")}


def _retyped(field_: str, column: Callable[[Params], str], to: str = "string"):
    """The input ``field_`` copied with ``column`` cast to ``to``."""
    from pyspark.sql import functions as F

    def mutate(spark, folder, p):
        col = column(p)
        df = _df(spark, p[field_]).withColumn(col, F.col(col).cast(to))
        return {**p, field_: _write(spark, df, os.path.join(folder, f"retyped_{field_}"))}

    return mutate


def _emptied(fields_: tuple[str, ...]):
    def mutate(spark, folder, p):
        out = dict(p)
        for f in fields_:
            if not p.get(f):
                continue
            out[f] = _write(spark, _df(spark, p[f]).limit(0), os.path.join(folder, f"empty_{f}"))
        return out

    return mutate


def _same_as(out_field: str, in_field: str, suffix: str = ""):
    return lambda spark, folder, p: {**p, out_field: p[in_field] + suffix}


def _foreign_output(out_field: str):
    def mutate(spark, folder, p):
        path = os.path.join(folder, "foreign")
        spark.createDataFrame([(1, "x")], "id long, note string").write.format("delta").save(path)
        return {**p, out_field: path}

    return mutate


def _escape(field_: str, how: str = "dotdot"):
    """``field_`` outside the warehouse: through ``..``, or through a symlink inside it."""

    def mutate(spark, folder, p):
        wh = os.environ["SIMJOIN_WAREHOUSE"]
        if how == "dotdot":
            return {**p, field_: os.path.join(wh, "..", "escaped", os.path.basename(folder), field_)}
        outside = os.path.join(os.path.dirname(os.path.realpath(wh)), "outside")  # beside the warehouse
        os.makedirs(outside, exist_ok=True)
        link = os.path.join(folder, "link")
        os.symlink(outside, link)
        return {**p, field_: os.path.join(link, field_)}

    return mutate


def _needle_escape(section: str, field_: str) -> tuple[str, ...]:
    wh = os.environ["SIMJOIN_WAREHOUSE"]
    return (f"invalid config {section}.{field_}=", f"allowed a path under {wh} (SIMJOIN_WAREHOUSE_ONLY=1)")


T_LATE = dt.timedelta(milliseconds=1)


def _null(*cols: str, reason: str | None = None):
    """A row whose ``cols`` are null (``column`` stands for the payload column)."""

    def rows(t, column):
        names = [column if c == "column" else c for c in cols]
        why = reason or f"null {names[0]}"
        return [({**t, "id": None if "id" in names else 900_001 + len(names), **{c: None for c in names}}, why)]

    return rows


def _value(value: Any, reason: str | None = None, new_id: int = 900_100):
    """A row whose payload column holds ``value`` (NaN, inf, a vector...)."""

    def rows(t, column):
        return [({**t, "id": new_id, column: value}, reason or f"NaN or inf in {column}")]

    return rows


def _duplicate(t, column):
    """The first row again, a moment later (and for text, a text that sorts after): the copy goes."""
    row = dict(t)
    if "ts" in row and row["ts"] is not None:
        row["ts"] = row["ts"] + T_LATE
    if isinstance(row.get(column), str):
        row[column] = row[column] + " zzz"
    return [(row, f"duplicate id {t['id']}")]


def _combine(*fns):
    return lambda t, column: [r for f in fns for r in f(t, column)]


# ------------------------------------------------------------------ per-pipeline cases


def _ssj() -> Know:
    col = lambda p: p.get("text_col", "text")  # noqa: E731
    return Know(("input", "right"), "output", col, cases={
        "missing_table": [Error(_missing("input"), ("no_such_table: no Delta table there", "allowed the path of"))],
        "wrong_type": [Error(_retyped("input", lambda p: "id"), ("column 'id' has type string",
                                                                 "allowed: bigint, int, smallint, tinyint")),
                       Error(_retyped("input", col, "binary"), ("column 'text' has type binary", "allowed: string"))],
        "null": [Quarantine(_combine(_null("column"), _null("id", reason="null id"),
                                     _value("   ", "empty text", 900_200)))],
        "nan_inf": NA("text records: a NaN or inf cannot be a token set (null and empty texts are the null kind)"),
        "wrong_dim": NA("no vectors"),
        "duplicate_id": [Quarantine(_duplicate)],
        "empty": [Ok(_emptied(("input",)), "ssj: 0 pairs from 0 records (0 quarantined)")],
        "threshold_range": [Error(_with("threshold", 1.5), ("ssj.threshold=1.5", "allowed 0 < threshold <= 1"),
                                  config=True),
                            Error(_with("threshold", 0), ("ssj.threshold=0", "allowed 0 < threshold <= 1"),
                                  config=True)],
        "unparsable": [Error(_with("tokenizer", "qgram:x"), ("ssj.tokenizer='qgram:x'",
                                                            "allowed word or qgram:N with N >= 1"), config=True)],
        "output_is_input": [Error(_same_as("output", "input"), ("ssj.output=", "allowed a path other than the input"),
                                  config=True),
                            Error(_same_as("output", "input", "/"), ("ssj.output=", "other than the input"),
                                  config=True)],
        "existing_out": [Error(_foreign_output("output"), ("holds a Delta table with columns ['id', 'note']",
                                                           "allowed a new path or one written by simjoin ssj"))],
        "warehouse_escape": [Error(_escape("input"), _needle_escape("ssj", "input"), config=True,
                                   env={"SIMJOIN_WAREHOUSE_ONLY": "1"}),
                             Error(_escape("output", "symlink"), (*_needle_escape("ssj", "output"), "resolves to"),
                                   config=True, env={"SIMJOIN_WAREHOUSE_ONLY": "1"})],
    })


def _stream_common(section: str, column_fn: Callable[[Params], str], stream_text: str,
                    out_other: str) -> dict[str, list[Case] | NA]:
    """What every stream pipeline shares: the engine's checks."""
    return {
        "missing_table": [Error(_missing("left"), ("no Delta table at", "no_such_table"))],
        "wrong_type": [Error(_retyped("left", column_fn), ("is string: allowed id <integer>, ts timestamp",
                                                           stream_text)),
                       Error(_retyped("left", lambda p: "id"), ("id is string: allowed an integer type",))],
        "empty": [Ok(_emptied(("left", "right")), "0 pairs")],
        "output_is_input": [Error(_same_as("output", "left"), (f"{section}.output=", f"allowed a {out_other} "
                                                               "other than the left stream"), config=True)],
        "warehouse_escape": [Error(_escape("left"), _needle_escape(section, "left"), config=True,
                                   env={"SIMJOIN_WAREHOUSE_ONLY": "1"}),
                             Error(_escape("output", "symlink"),
                                   (*_needle_escape(section, "output"), "resolves to"),
                                   config=True, env={"SIMJOIN_WAREHOUSE_ONLY": "1"})],
    }


def _s3j() -> Know:
    col = lambda p: "vector"  # noqa: E731
    c = _stream_common("s3j", col, "vector array<double>", "path")
    c.update({
        "null": [Quarantine(_combine(_null("column", reason="null vector"),
                                     _value([0.5, None], "null element in vector", 900_300),
                                     _null("id", reason="null id"), _null("ts", reason="null ts")))],
        "nan_inf": [Quarantine(_combine(_value([float("nan"), 0.5]), _value([0.5, float("inf")], new_id=900_101)))],
        "wrong_dim": [Quarantine(_value([0.1, 0.2, 0.3], "vector dimension 3, expected 2"))],
        "duplicate_id": [Quarantine(_duplicate)],
        "threshold_range": [
            Error(_with("threshold", 1.5), ("s3j.threshold=1.5", "allowed 0 < threshold <= 1.0 for metric angular"),
                  config=True),
            Error(_with("threshold", -0.1), ("s3j.threshold=-0.1", "allowed a number > 0"), config=True)],
        "unparsable": [Error(_with("window", "soon"), ("s3j.window='soon'", "allowed a positive duration"),
                             config=True)],
        "existing_out": [Error(_foreign_output("output"), ("holds a Delta table with columns ['id', 'note']",
                                                           "allowed a new path or one written by simjoin s3j"))],
    })
    # the threshold case runs with the angular metric
    c["threshold_range"][0] = Error(lambda s, f, p: {**p, "metric": "angular", "threshold": 1.5},
                                    ("s3j.threshold=1.5", "allowed 0 < threshold <= 1.0 for metric angular"),
                                    config=True)
    return Know(("left", "right"), "output", col, cases=c)


def _ineq() -> Know:
    col = lambda p: "a"  # noqa: E731
    c = _stream_common("ineq", col, "<numeric predicate columns>", "path")
    c.update({
        "null": [Quarantine(_combine(_null("column"), _null("id", reason="null id")))],
        "nan_inf": [Quarantine(_combine(_value(float("nan")), _value(float("-inf"), new_id=900_101)))],
        "wrong_dim": NA("no vectors: scalar predicate columns"),
        "duplicate_id": [Quarantine(_duplicate)],
        "threshold_range": [
            Error(_with("window_count", 0), ("ineq.window_count=0", "allowed 1 <= window_count <= 1000000000"),
                  config=True),
            Error(_with("where", "abs(l.a - r.a) < -1"), ("unexpected token '-'", "abs(l.<col> - r.<col>) (< | <=) "
                                                                                   "number"), config=True)],
        "unparsable": [Error(_with("where", "l.a <> r.a"), ("invalid --where 'l.a <> r.a'", "unexpected token '<>'",
                                                             "allowed"), config=True),
                       Error(_with("where", "l.zz < r.a"), ("lacks columns ['zz']", "has ['id', 'ts', 'a', 'b']"))],
        "existing_out": [Error(_foreign_output("output"), ("holds a Delta table with columns ['id', 'note']",
                                                           "allowed a new path or one written by simjoin ineq"))],
    })
    return Know(("left", "right"), "output", col, cases=c)


def _hypercube() -> Know:
    col = lambda p: p.get("key", "k")  # noqa: E731
    c = _stream_common("hypercube", col, "<key column> of an integer type", "path")
    c["output_is_input"].append(Error(_same_as("output", "right"), ("hypercube.output=", "other than the right stream"),
                                      config=True))
    c["wrong_type"].append(Error(_retyped("left", col, "double"), ("k is double: allowed id <integer>",
                                                                   "of an integer type")))
    c.update({
        "null": [Quarantine(_combine(_null("column", reason="null key k"), _null("id", reason="null id")))],
        "nan_inf": NA("the key is an integer column (a float key is refused as a wrong type)"),
        "wrong_dim": NA("no vectors"),
        "duplicate_id": [Quarantine(_duplicate)],
        "threshold_range": [
            Error(_with("epsilon", 0.9), ("hypercube.epsilon=0.9", "allowed 0 < epsilon <= 1/(2p) = 0.125 for "
                                                                   "workers p = 4"), config=True),
            Error(_with("workers", 0), ("hypercube.workers=0", "allowed 1 <= workers <= 1024"), config=True)],
        "unparsable": [Error(_with("key", "k; drop"), ("hypercube.key='k; drop'", "allowed a column name"),
                             config=True),
                       Error(_with("key", "zz"), ("lacks columns ['zz']",))],
        "existing_out": [Error(_foreign_output("output"), ("holds a Delta table with columns ['id', 'note']",
                                                           "allowed a new path or one written by simjoin hypercube"))],
    })
    return Know(("left", "right"), "output", col, cases=c)


def _s2j() -> Know:
    col = lambda p: "pm25"  # noqa: E731
    c = _stream_common("s2j", col, "<numeric columns of the tasks>", "directory")
    c.update({
        "null": [Quarantine(_combine(_null("column"), _null("id", reason="null id")))],
        "nan_inf": [Quarantine(_combine(_value(float("nan")), _value(float("inf"), new_id=900_101)))],
        "wrong_dim": NA("no vectors: scalar task columns"),
        "duplicate_id": [Quarantine(_duplicate)],
        "threshold_range": [
            Error(_with("tau1", 1.5), ("s2j.tau1=1.5", "allowed 0 < tau1 < 1"), config=True),
            Error(_with("tasks", "gap: abs(l.pm25 - r.pm25) > -5"), ("invalid --task", "unexpected token '-'"),
                  config=True)],
        "unparsable": [Error(_with("tasks", "gap: l.pm25 ~ r.pm25"), ("invalid --task 'gap: l.pm25 ~ r.pm25'",
                                                                      "unexpected token '~'", "allowed"), config=True),
                       Error(_with("tasks", "gap: abs(l.zz - r.pm25) > 5"), ("lacks columns ['zz']",))],
        "existing_out": [Error(_foreign_output("output"), ("already holds a table",))],
    })
    return Know(("left", "right"), "output", col, cases=c)


def _existing(spark, folder, p):
    path = os.path.join(folder, "existing")
    spark.createDataFrame([(1, "x")], "id long, text string").write.format("delta").save(path)
    return {**p, "out": path}


def _generate() -> Know:
    no_input = NA("generate reads no input table (its output is covered by existing_out)")
    return Know((), "out", lambda p: "", cases={
        "missing_table": no_input,
        "wrong_type": no_input,
        "null": no_input, "nan_inf": no_input, "wrong_dim": no_input, "duplicate_id": no_input,
        "empty": [Ok(_with("rows", 0), "wrote 0 rows")],
        "threshold_range": [Error(_kind_with("keys", "alpha", 11), ("generate.alpha=11", "allowed 0 <= alpha <= 10"),
                                  config=True),
                            Error(_with("rows", -1), ("generate.rows=-1", "allowed 0 <= rows <= 1000000000"),
                                  config=True)],
        "unparsable": [Error(_kind_with("vectors", "drift_period", "soon"), ("generate.drift_period='soon'",
                                                             "allowed a positive duration"), config=True)],
        "output_is_input": no_input,
        "existing_out": [Error(_existing, ("holds a Delta table simjoin generate did not write",
                                           "allowed a new path, or a table simjoin generate wrote"))],
        "warehouse_escape": [Error(_escape("out"), _needle_escape("generate", "out"), config=True,
                                   env={"SIMJOIN_WAREHOUSE_ONLY": "1"})],
    })


BAD: dict[str, Callable[[], Know]] = {"ssj": _ssj, "s3j": _s3j, "ineq": _ineq, "hypercube": _hypercube,
                                      "s2j": _s2j, "generate": _generate}


def _know(name: str) -> Know:
    if name not in BAD:
        pytest.fail(f"add a case for pipeline {name} to BAD in tests/reliability/test_bad_input.py")
    if name not in base_cases.CASES:
        pytest.fail(f"add a case for pipeline {name} to CASES in tests/reliability/cases.py")
    return BAD[name]()


def _matrix(want: tuple[type, ...], slow: Callable[[str, Any], bool] = lambda name, case: False) -> list[Any]:
    """``(pipeline, kind, index)`` of every case of the types ``want``; ``slow(name, case)`` marks one slow."""
    out = []
    for name in _pipelines():
        if name not in BAD:  # fails in the test, saying what to add
            out.append(pytest.param(name, "-", 0, id=f"{name}-missing"))
            continue
        for kind, cs in BAD[name]().cases.items():
            if isinstance(cs, NA):
                continue
            for i, c in enumerate(cs):
                if isinstance(c, want):
                    marks = [pytest.mark.slow] if slow(name, c) else []
                    out.append(pytest.param(name, kind, i, id=f"{name}-{kind}-{i}", marks=marks))
    return out


#: Pipelines whose row-level cases run in the fast subset too (all of them: -m slow).
FAST_ROWS = ("ssj", "s3j")


def _case(name: str, kind: str, i: int) -> tuple[Know, Any]:
    know = _know(name)
    return know, know.cases[kind][i]  # type: ignore[index]


# ------------------------------------------------------------------ running a case


def _argv(spec: PipelineSpec, params: Params) -> list[str]:
    """The ``simjoin ...`` argv that runs ``spec`` with ``params``."""
    selector = next((f for f in spec.fields() if f.metadata.get("flag") == ""), None)
    argv = [spec.cli_name or spec.name]
    if selector is not None:
        argv.append(str(params[selector.name]))
    elif spec.cli_commands:
        argv.append("run")
    for f in spec.fields():
        if f is selector or f.name not in params or params[f.name] is None:
            continue
        flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
        v = params[f.name]
        if isinstance(v, bool):
            argv.append(flag if v else f"--no-{flag[2:]}")
        elif f.metadata.get("multiple"):
            for part in str(v).split(";"):
                if part.strip():
                    argv += [flag, part.strip()]
        else:
            argv += [flag, str(v)]
    return argv


def cli(*argv: str) -> tuple[int, str, str]:
    """``simjoin argv`` in this process: (exit code, last stdout line, stderr)."""
    from simjoin.cli import cli_group

    r = CliRunner().invoke(cli_group(), list(argv), prog_name="simjoin")
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    out = [ln for ln in r.stdout.strip().splitlines() if ln.strip()]
    return r.exit_code, (out[-1] if out else ""), r.stderr


def _error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, f"expected one 'error: ...' line on stderr, got: {stderr[-3000:]}"
    assert "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


def _files(folder: str) -> set[str]:
    out = set()
    for root, dirs, files in os.walk(folder):
        out |= {os.path.join(root, n) for n in files + dirs}
    return out


@pytest.fixture(scope="module")
def bases(spark, tmp_path_factory):
    """One valid base per pipeline (``cases.make_inputs``), written once: cases copy, never modify it."""
    made: dict[str, Params] = {}

    def get(name: str) -> Params:
        if name not in made:
            folder = str(tmp_path_factory.mktemp(f"base_{name}"))
            made[name] = base_cases.CASES[name].make_inputs(spark, folder)
        return dict(made[name])

    return get


def _setup(spark, bases, name: str, case: Any, folder: str) -> Params:
    p = bases(name)
    know = _know(name)
    p[know.output] = os.path.join(folder, "out")
    return case.mutate(spark, folder, p)


def _run_task(name: str, params: Params) -> dict[str, Any]:
    from simjoin.pipeline.registry import get_spec
    from simjoin.pipeline.runner import run_task

    return run_task(name, get_spec(name).stages[0].name, params, "manual__bad_input")


# ------------------------------------------------------------------ the matrix is complete


@pytest.mark.parametrize("name", list(_pipelines()))
def test_every_pipeline_has_a_case_for_every_kind(name):
    know = _know(name)
    missing = [k for k in KINDS if k not in know.cases]
    assert not missing, f"add a case (or NA) for pipeline {name}: kinds {missing}"
    empty = [k for k, c in know.cases.items() if not isinstance(c, NA) and not c]
    assert not empty, f"pipeline {name}: kinds {empty} have no case"


# ------------------------------------------------------------------ errors: CLI and DAG task body


@pytest.mark.parametrize("name,kind,i", _matrix((Error,)))
def test_bad_input_is_one_error_line_from_the_cli(spark, bases, tmp_path, monkeypatch, name, kind, i):
    from simjoin.pipeline.registry import get_spec

    _, case = _case(name, kind, i)
    folder = str(tmp_path)
    params = _setup(spark, bases, name, case, folder)
    for k, v in case.env.items():
        monkeypatch.setenv(k, v)
    before = _files(folder)
    spec = get_spec(name)
    code, _, err = cli(*_argv(spec, params))
    line = _error_line(err)
    assert code == 2, (code, line)
    for needle in case.needles:
        needle = _as_typed(spec, needle)
        assert needle in line, (needle, line)
        assert " config " not in line, f"the command line's error names a config key, not the flag: {line}"
    assert _files(folder) == before, f"a failed run wrote {sorted(_files(folder) - before)}"


def _as_typed(spec, needle: str) -> str:
    """A DAG's needle (``ssj.threshold=1.5``: the config key) as the command line says it: the flag
    the user typed (``--threshold 1.5``)."""
    from simjoin.config import flagged
    from simjoin.pipeline.cli import flags

    fl = flags(spec)
    m = re.search(rf"(invalid config )?{re.escape(spec.config_section)}\.(\w+)=", needle)
    if m is None or m[2] not in fl:
        return flagged(needle, fl)
    return needle[:m.start()] + ("invalid " if m[1] else "") + f"{fl[m[2]]} " + needle[m.end():]


@pytest.mark.parametrize("name,kind,i", _matrix((Error,), slow=lambda name, case: not case.config))
def test_bad_input_fails_the_dag_task_at_once_with_one_line(spark, bases, tmp_path, name, kind, i):
    from airflow.sdk.exceptions import AirflowFailException

    _, case = _case(name, kind, i)
    folder = str(tmp_path)
    params = _setup(spark, bases, name, case, folder)
    before = _files(folder)
    # the DAGs confine tables to the warehouse by default: no SIMJOIN_WAREHOUSE_ONLY needed
    with pytest.raises(AirflowFailException) as e:
        _run_task(name, params)
    msg = str(e.value)
    assert "\n" not in msg and msg, msg
    for needle in case.needles:
        assert needle in msg, (needle, msg)
    assert _files(folder) == before, f"a failed task wrote {sorted(_files(folder) - before)}"


# ------------------------------------------------------------------ row-level problems: quarantine


def _dirty(spark, bases, name: str, case: Quarantine, folder: str) -> tuple[Params, list[tuple[Any, str]], int]:
    """The first input with bad rows appended (a new table); (params, [(id, reason)], good rows)."""
    know = _know(name)
    p = bases(name)
    p[know.output] = os.path.join(folder, "out")
    src = p[know.inputs[0]]
    df = _df(spark, src)
    template = df.orderBy(know.id_col).first().asDict()
    bad = case.rows(template, know.column(p))
    extra = spark.createDataFrame([tuple(r.get(c) for c in df.columns) for r, _ in bad], df.schema)
    p[know.inputs[0]] = _write(spark, df.unionByName(extra), os.path.join(folder, "dirty"))
    n_good = df.count() + sum(_df(spark, p[f]).count() for f in know.inputs[1:] if p.get(f))
    return p, [(r[know.id_col], why) for r, why in bad], n_good


def _quarantined(spark, name: str, params: Params) -> list[tuple[Any, str]]:
    from simjoin.pipeline.registry import get_spec

    run = get_spec(name).make_run(params)
    return sorted(((r["id"], r["reason"]) for r in delta.read_table(spark, run.tables.quarantine).collect()),
                  key=repr)


def _check_reasons(got: list[tuple[Any, str]], want: list[tuple[Any, str]]) -> None:
    assert len(got) == len(want), (got, want)
    for wid, why in want:
        hit = [g for g in got if g[0] == wid and g[1].startswith(why)]
        assert hit, f"no quarantine row for id {wid} with reason {why!r}: {got}"


def _check_first_stage(out: dict[str, Any], want: list[tuple[Any, str]], n_good: int) -> None:
    if "staged" in out:  # a stream's ingest
        assert out["quarantined"] == len(want) and out["rows"] == n_good + len(want), out
        assert out["staged"] >= n_good, out  # (sliding windows may stage a row more than once)
    else:  # ssj's tokenize
        assert out["quarantined"] == len(want) and out["records"] == n_good, out


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("name,kind,i", _matrix((Quarantine,)))
def test_bad_rows_are_quarantined_by_the_dag_task_and_good_rows_go_on(spark, bases, tmp_path, name, kind, i):
    _, case = _case(name, kind, i)
    params, want, n_good = _dirty(spark, bases, name, case, str(tmp_path))
    out = _run_task(name, params)
    _check_reasons(_quarantined(spark, name, params), want)
    _check_first_stage(out, want, n_good)


def _has_rows(name: str) -> bool:
    """A pipeline that reads rows (not in BAD yet: kept, so that the test says what to add)."""
    return name not in BAD or any(isinstance(BAD[name]().cases.get(k), list) for k in ROW_LEVEL)


def _every_bad_row(name: str) -> Quarantine:
    """Every row-level case of a pipeline in one input: each bad row with its own reason."""
    know = _know(name)
    rows = [c for kind in ROW_LEVEL if isinstance(know.cases[kind], list) for c in know.cases[kind]]  # type: ignore
    assert rows, f"{name}: add its row-level cases ({', '.join(ROW_LEVEL)}) to BAD"
    ids = iter(range(950_000, 960_000))

    def all_rows(t, column):
        out = []
        for c in rows:
            for r, why in c.rows(t, column):
                if r.get("id") is not None and r["id"] != t["id"]:
                    r = {**r, "id": next(ids)}  # distinct ids across the cases (not the duplicate's)
                out.append((r, why))
        return out

    return Quarantine(all_rows)


ROW_PIPELINES = [n for n in _pipelines() if _has_rows(n)]


# make test: the DAG task for FAST_ROWS; every pipeline's rows through the CLI run (the same stage functions)
@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n in FAST_ROWS else [pytest.mark.slow, pytest.mark.exhaustive])
                                  for n in ROW_PIPELINES])
def test_every_bad_row_at_once_is_quarantined_by_the_dag_task(spark, bases, tmp_path, name):
    params, want, n_good = _dirty(spark, bases, name, _every_bad_row(name), str(tmp_path))
    out = _run_task(name, params)
    _check_reasons(_quarantined(spark, name, params), want)
    _check_first_stage(out, want, n_good)


def _quarantined_by_the_cli(spark: Any, bases: Any, tmp_path: Any, name: str, case: Quarantine) -> None:
    from simjoin.pipeline.registry import get_spec

    params, want, _ = _dirty(spark, bases, name, case, str(tmp_path))
    code, last, err = cli(*_argv(get_spec(name), params))
    assert code == 0, err[-3000:]
    assert f"{len(want)} quarantined" in last, last
    _check_reasons(_quarantined(spark, name, params), want)


@pytest.mark.slow
@pytest.mark.parametrize("name", ROW_PIPELINES)
def test_every_bad_row_at_once_is_quarantined_by_the_cli_and_the_run_goes_on(spark, bases, tmp_path, name):
    """The whole pipeline through the CLI: the bad rows in quarantine, each with its reason, the run done."""
    _quarantined_by_the_cli(spark, bases, tmp_path, name, _every_bad_row(name))


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("name,kind,i", _matrix((Quarantine,)))
def test_bad_rows_are_quarantined_by_the_cli_and_the_run_goes_on(spark, bases, tmp_path, name, kind, i):
    """Each kind on its own (``make test-exhaustive``; together above, in ``make test``)."""
    _quarantined_by_the_cli(spark, bases, tmp_path, name, _case(name, kind, i)[1])


# ------------------------------------------------------------------ runs that must succeed


@pytest.mark.slow
@pytest.mark.parametrize("name,kind,i", _matrix((Ok,)))
def test_empty_inputs_are_a_run_with_nothing_to_join(spark, bases, tmp_path, name, kind, i):
    from simjoin.pipeline.registry import get_spec

    _, case = _case(name, kind, i)
    params = _setup(spark, bases, name, case, str(tmp_path))
    code, last, err = cli(*_argv(get_spec(name), params))
    assert code == 0, err[-3000:]
    assert case.needle in last, last


@pytest.mark.slow
@pytest.mark.parametrize("name,kind,i", _matrix((Ok,)))
def test_empty_inputs_pass_the_dag_first_task(spark, bases, tmp_path, name, kind, i):
    _, case = _case(name, kind, i)
    params = _setup(spark, bases, name, case, str(tmp_path))
    out = _run_task(name, params)
    assert out.get("rows", out.get("records", 0)) == 0, out


# ------------------------------------------------------------------ generate --overwrite


def test_generate_refuses_an_existing_table_unless_overwrite(spark, tmp_path):
    out = str(tmp_path / "sets")
    assert cli("generate", "sets", "--out", out, "--rows", "30", "--seed", "1")[0] == 0
    code, _, err = cli("generate", "sets", "--out", out, "--rows", "10", "--seed", "2")
    assert code == 2 and _error_line(err) == (
        f"error: --out {out} already holds a Delta table: allowed a new path, or --overwrite (DAG param overwrite: "
        "true) to replace it")
    assert _df(spark, out).count() == 30 and delta.latest_version(spark, out) == 0
    code, last, err = cli("generate", "sets", "--out", out, "--rows", "10", "--seed", "2", "--overwrite")
    assert code == 0 and last.startswith(f"generate sets: wrote 10 rows to {out} (Delta version 1)"), err
    # a folder that is not a Delta table, or a file, is never replaced
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("mine")
    for path, what in ((tmp_path / "notes", "a folder that is not a Delta table"), (tmp_path / "notes" / "a.txt",
                                                                                     "a file")):
        code, _, err = cli("generate", "sets", "--out", str(path), "--rows", "5", "--overwrite")
        assert code == 2 and f"is {what}: allowed a new path" in _error_line(err), err
    assert (tmp_path / "notes" / "a.txt").read_text() == "mine"


def test_generate_dag_param_overwrite_defaults_to_false_and_a_retry_of_the_same_run_may_replace(spark, tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    from simjoin.pipeline.dags import dag_params
    from simjoin.pipeline.registry import get_spec
    from simjoin.pipeline.runner import run_task

    assert dag_params(get_spec("generate"))["overwrite"].value is False
    out = str(tmp_path / "keys")
    conf = {"kind": "keys", "out": out, "rows": 20, "seed": 1}
    run_task("generate", "write", conf, "manual__a")
    run_task("generate", "write", conf, "manual__a")  # a retry of the same DAG run: allowed
    with pytest.raises(AirflowFailException, match="already holds a Delta table"):
        run_task("generate", "write", conf, "manual__b")  # another run
    run_task("generate", "write", {**conf, "overwrite": True}, "manual__b")
    assert delta.latest_version(spark, out) == 2


# ------------------------------------------------------------------ SIMJOIN_WAREHOUSE_ONLY


def test_warehouse_only_is_on_for_dag_runs_off_for_the_cli_and_switchable(tmp_path, monkeypatch):
    from simjoin.config import ConfigError
    from simjoin.pipeline.registry import get_spec

    spec = get_spec("generate")
    wh = os.environ["SIMJOIN_WAREHOUSE"]
    outside = os.path.join(wh, "..", "elsewhere", "t")
    inside = str(tmp_path / "t")
    monkeypatch.delenv("SIMJOIN_WAREHOUSE_ONLY", raising=False)
    spec.make_run({"out": outside})  # the CLI: off by default
    with pytest.raises(ConfigError, match=r"generate\.out=.*allowed a path under .*\(SIMJOIN_WAREHOUSE_ONLY=1\)"):
        spec.make_run({"out": outside}, trigger="manual")  # a DAG run: on by default
    spec.make_run({"out": inside}, trigger="manual")
    monkeypatch.setenv("SIMJOIN_WAREHOUSE_ONLY", "0")  # explicitly off: DAG runs too
    spec.make_run({"out": outside}, trigger="scheduled")
    monkeypatch.setenv("SIMJOIN_WAREHOUSE_ONLY", "true")
    with pytest.raises(ConfigError, match="SIMJOIN_WAREHOUSE_ONLY=1"):
        spec.make_run({"out": outside})
    monkeypatch.setenv("SIMJOIN_WAREHOUSE_ONLY", "maybe")
    with pytest.raises(ConfigError, match=r"SIMJOIN_WAREHOUSE_ONLY='maybe': allowed 1 .* or 0"):
        spec.make_run({"out": inside})
    monkeypatch.setenv("SIMJOIN_WAREHOUSE_ONLY", "1")
    with pytest.raises(ConfigError, match="allowed a path under"):
        spec.make_run({"out": wh})  # the warehouse itself is no table path
    with pytest.raises(ConfigError, match="allowed a path under"):
        spec.make_run({"out": wh + "_sibling/t"})  # a prefix of the name is not inside


# ------------------------------------------------------------------ one real dag.test() per DAG


@pytest.mark.slow
@pytest.mark.parametrize("name", list(_pipelines()))
def test_one_bad_conf_fails_the_dag_first_task_and_writes_nothing(spark, bases, airflow_db, tmp_path, name):
    """dag.test() with a table outside the warehouse: the DAGs confine tables to it by default."""
    from tests.helpers import load_dag

    know = _know(name)
    cases_ = know.cases["warehouse_escape"]
    assert isinstance(cases_, list) and cases_, f"{name}: add a warehouse_escape case"
    params = _setup(spark, bases, name, cases_[0], str(tmp_path))
    before = _files(str(tmp_path))
    dag = load_dag(name, fail_fast=True)
    run = dag.test(run_conf=params)
    assert str(run.state).lower().rsplit(".", 1)[-1] == "failed"
    states = {ti.task_id: str(ti.state).lower().rsplit(".", 1)[-1] for ti in run.get_task_instances()}
    first = dag.topological_sort()[0].task_id
    assert states[first] == "failed", states
    assert all(s in ("upstream_failed", "none", "skipped") for t, s in states.items() if t != first), states
    assert _files(str(tmp_path)) == before


# ------------------------------------------------------------------ the other commands


def _one_error(argv: list[str], *needles: str, code: int = 2) -> str:
    got, _, err = cli(*argv)
    line = _error_line(err)
    assert got == code, (got, line)
    for n in needles:
        assert n in line, (n, line)
    return line


def test_show_and_history_bad_inputs(spark, tmp_path):
    t = str(tmp_path / "t")
    spark.createDataFrame([(1, "a")], "id long, text string").write.format("delta").save(t)
    _one_error(["show", str(tmp_path / "none")], f"no Delta table at '{tmp_path / 'none'}'")
    _one_error(["show", str(tmp_path)], "no Delta table at")  # a folder, not a table
    _one_error(["show", t, "--version", "5"], "invalid --version 5: allowed 0..0")
    _one_error(["show", t, "--limit", "-1"], "'--limit': -1 is not in the range x>=0", "simjoin show -h")
    _one_error(["show", t, "--master", "mesos://x"], "spark.master='mesos://x'", "allowed local[*]")
    _one_error(["history", str(tmp_path / "none")], "no Delta table at")
    _one_error(["show"], "Missing argument 'PATH'")
    _one_error(["nope"], "No such command 'nope'")
    _one_error(["show", t, "--bogus"], "No such option", "--bogus")


def test_report_bad_inputs(spark, tmp_path):
    t = str(tmp_path / "t")
    spark.createDataFrame([(1, "a")], "id long, text string").write.format("delta").save(t)
    out = str(tmp_path / "rep")
    _one_error(["report", "--stats", str(tmp_path / "none"), "--out", out], "no Delta table at")
    _one_error(["report", "--stats", t, "--out", out], "not a simjoin stats table",
               "allowed: the <output>_stats table of a simjoin pipeline")
    _one_error(["report", "--timing", t, "--out", out], "not a simjoin task-timing table")
    _one_error(["report", "--timing", str(tmp_path / "none"), "--out", out], "no task-timing table at",
               "allowed a table written by simjoin runs")
    (tmp_path / "file").write_text("x")
    _one_error(["report", "--stats", t, "--out", str(tmp_path / "file")], "is a file: allowed a folder")
    _one_error(["report", "--stats", t], "--out is required")
    empty = str(tmp_path / "empty_stats")
    spark.createDataFrame([], "pipeline string, seconds double, level string").write.format("delta").save(empty)
    _one_error(["report", "--stats", empty, "--out", out], "has no rows to plot")


def test_spark_server_bad_inputs(monkeypatch):
    _one_error(["spark-server", "--port", "0"], "'--port': 0 is not in the range 1<=x<=65535")
    _one_error(["spark-server", "--port", "70000"], "70000 is not in the range")
    _one_error(["spark-server", "--port", "http"], "'http' is not a valid integer")
    _one_error(["spark-server", "--warehouse", ""], "spark.warehouse=''", "a non-empty path")
    _one_error(["spark-server", "--master", "mesos://x"], "spark.master='mesos://x'")
    with socket.socket() as s:  # a port that is taken: refused before any Spark starts
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        _one_error(["spark-server", "--port", str(port)], f"port {port} on 127.0.0.1 is already in use",
                   "allowed a free port")


def test_s2j_query_bad_inputs(spark, tmp_path):
    out = str(tmp_path / "out")
    _one_error(["s2j", "query", "--output", out, "--task", "gap"], "no snapshot of task 'gap'",
               "none yet: run simjoin s2j run first")
    spark.createDataFrame([(1, 2, dt.datetime(2026, 1, 1))], "left_id long, right_id long, ts timestamp") \
        .write.format("delta").save(f"{out}/gap")
    _one_error(["s2j", "query", "--output", out, "--task", "pm10"], "allowed a task of", "(gap)")
    _one_error(["s2j", "query", "--output", out, "--task", "gap"], "has no snapshot yet")
    _one_error(["s2j", "query", "--output", out, "--task", "gap", "--from", "yesterday"],
               "invalid --from 'yesterday': allowed an ISO time")
    _one_error(["s2j", "query", "--output", out, "--task", "gap", "--from", "2026-01-02", "--to", "2026-01-01"],
               "invalid --to '2026-01-01': allowed a time after --from")
    _one_error(["s2j", "query", "--output", out, "--task", "gap", "--snapshot", "-1"], "-1 is not in the range")
    _one_error(["s2j", "follow", "--output", out, "--task", "gap", "--interval", "0"], "0 is not in the range")
