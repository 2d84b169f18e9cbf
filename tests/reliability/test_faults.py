"""Faults in the middle of a write, for every pipeline and every stage (``simjoin.faults``).

Each case runs a pipeline stage by stage through the one task entry (``run_stage``, what an
Airflow task runs) on tiny inputs (``tests/reliability/cases.py``), makes one stage fail - after
its N-th Delta commit (``write@N``), inside the Spark job of a write (``rows@N``: the commit
never happens), or, for a gate (which writes nothing), right after its body - then retries it
under the same run id and runs the remaining stages (and, for a stream, the next micro-batch).

Asserted for every case:
- the fault fired (the stage raised ``InjectedFault``);
- right after the failure, each table a reader sees is either as it was before the stage or as a
  clean run has it after the stage: never a half-written version;
- after the retry, every table a reader sees (pairs, stats, quarantine, state...; timing
  columns aside) equals a clean run's on identical inputs, as a multiset: no duplicate, no loss.

Stream pipelines are also killed between their output write and their state write
(``<pipeline>.publish.mid``: the pieces appended, the unit not committed); the next run neither
loses nor repeats a pair.

Driven by the pipeline specs: every pipeline of ``simjoin.pipeline.registry.specs()`` needs a
case in ``cases.CASES``, or :func:`test_every_pipeline_has_a_case` fails.

- ``make test`` (``-m slow``, after the fast suite): one walk per pipeline through every stage,
  each taking one fault (``_ci_kind``) and its retry; a stream's publish fails right after its
  output commit (before its state and unit commits), and after the walk the next micro-batch
  neither loses nor repeats.
- The fast subset: a ``rows@1`` fault on the publishing stage of every batch and tool pipeline.
- ``make test-exhaustive`` (``-m exhaustive``): every (stage, kind) as its own test, both kinds
  of every writing stage, and per stream pipeline its publish failing mid-write, then killed
  between its output and state writes (``publish.mid``), with and without new rows arriving.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any

import pytest

from simjoin.faults import InjectedFault
from simjoin.pipeline.registry import specs
from simjoin.pipeline.runner import run_stage
from simjoin.pipeline.spec import PipelineSpec
from tests.reliability.cases import CASES, Case, reader_view, versions

View = dict[str, Any]


def _pipelines() -> dict[str, PipelineSpec]:
    """Every pipeline the project ships (test-only toy pipelines registered by other tests aside)."""
    return {n: s for n, s in sorted(specs().items()) if not all(st.fn.startswith("tests.") for st in s.stages)}


SPECS = _pipelines()
#: Stages run as an Airflow task of a manually triggered DAG run does (a retry may replace what
#: its first attempt wrote; every table stays under the test warehouse).
TRIGGER = "manual"


def _case(name: str) -> Case:
    if name not in CASES:
        pytest.fail(f"add a case for pipeline {name} to CASES in tests/reliability/cases.py (make_inputs: tiny "
                    "valid inputs and the run's params)")
    return CASES[name]


def _faults_of(spec: PipelineSpec) -> list[tuple[str, str]]:
    """(stage, kind) of every fault a stage can take: mid-write for stages that write, and right
    after the body for gates (which write nothing)."""
    return [(st.name, kind) for st in spec.stages for kind in (("after",) if st.gate else ("write", "rows"))]


def _publishing(spec: PipelineSpec) -> str:
    pub = [st.name for st in spec.stages if st.publishes]
    return pub[-1] if pub else [st.name for st in spec.stages if not st.gate][-1]


def _fast(spec: PipelineSpec) -> set[tuple[str, str]]:
    """The unmarked subset: a mid-write fault on the publishing stage of a tool pipeline (a
    stream's is in the publish test below, with the publish.mid kill; ssj's publish takes its
    fault in the ssj walk)."""
    return {(_publishing(spec), "rows")} if spec.run_type == "tool" else set()


def _ci_kind(spec: PipelineSpec, stage: str) -> str:
    """The one fault per stage ``make test`` runs (the other is ``-m exhaustive``): after a commit
    for a stage that commits more than once (the state between its commits) and for the publishing
    stage (its output committed, the task dead before it said so); inside the Spark job of the
    write (nothing committed) for the others."""
    st = next(s for s in spec.stages if s.name == stage)
    if st.gate:
        return "after"
    multi = CASES[spec.name].write_at.get(stage, 1) > 1 if spec.name in CASES else False
    return "write" if multi or stage == _publishing(spec) else "rows"


def _marks(spec: PipelineSpec, stage: str, kind: str) -> tuple[Any, ...]:
    """The fast subset unmarked; the rest one test per fault, ``-m exhaustive`` (``make test``
    runs the ``_ci_kind`` faults as one walk per pipeline below)."""
    return () if (stage, kind) in _fast(spec) else (pytest.mark.slow, pytest.mark.exhaustive)


MATRIX = [pytest.param(name, stage, kind, id=f"{name}-{stage}-{kind}", marks=_marks(spec, stage, kind))
          for name, spec in SPECS.items() for stage, kind in _faults_of(spec)]
STREAMS = [name for name, spec in SPECS.items() if spec.run_type == "stream"]


def test_every_pipeline_has_a_case():
    missing = [n for n in SPECS if n not in CASES]
    assert not missing, "; ".join(f"add a case for pipeline {n} to CASES in tests/reliability/cases.py"
                                  for n in missing)
    gone = [n for n in CASES if n not in SPECS]
    assert not gone, f"CASES has entries for pipelines that do not exist: {gone}"
    for name, spec in SPECS.items():
        assert (_publishing(spec), "rows") in _faults_of(spec), name
        if spec.run_type == "stream":
            assert CASES[name].more_inputs is not None, f"stream pipeline {name}: its case needs more_inputs"


# ------------------------------------------------------------------ clean runs (once per pipeline)


class Clean:
    """A clean run of one pipeline on the case's inputs in its own folder: the Delta versions of
    its tables after every stage (``per_stage``: run stage by stage through ``run_stage``, else as
    the CLI runs it), and for a stream after the next micro-batch (run on first use of
    :attr:`final`). Views are read back, time-travelling, on demand."""

    def __init__(self, spark: Any, spec: PipelineSpec, case: Case, folder: str, per_stage: bool) -> None:
        from simjoin.pipeline.runner import run_pipeline

        self.spark, self.spec, self.case, self.folder, self.per_stage = spark, spec, case, folder, per_stage
        self.params = case.make_inputs(spark, folder)
        self.run = spec.make_run(self.params, "r1")
        self.at: dict[str, dict[str, int | None]] = {}
        if per_stage:
            for st in spec.stages:
                run_stage(spec, st.name, self.params, "r1", spark=spark, trigger=TRIGGER)
                self.at[st.name] = versions(self.run)
        else:
            run_pipeline(spark, spec.make_run(self.params, "r1"))
        self.first = versions(self.run)
        self.at.setdefault(spec.stages[-1].name, self.first)
        self._final: dict[str, int | None] | None = None
        self._views: dict[str, View] = {}

    @property
    def final(self) -> dict[str, int | None]:
        """The versions after the next micro-batch (a stream: new rows, a run with another id)."""
        if self._final is None:
            assert self.case.more_inputs is not None, f"{self.spec.name}: no next micro-batch"
            self.case.more_inputs(self.spark, self.folder)
            if self.per_stage:
                for st in self.spec.stages:
                    run_stage(self.spec, st.name, self.params, "r2", spark=self.spark, trigger=TRIGGER)
            else:
                from simjoin.pipeline.runner import run_pipeline

                run_pipeline(self.spark, self.spec.make_run(self.params, "r2"))
            self._final = versions(self.run)
        return self._final

    def versions_during(self, stage: str, key: str) -> list[int]:
        """The Delta versions of table ``key`` the clean run committed during ``stage``, but its last."""
        names = [st.name for st in self.spec.stages]
        i = names.index(stage)
        if stage not in self.at or (i > 0 and names[i - 1] not in self.at):
            return []
        lo = self.at[names[i - 1]].get(key) if i > 0 else None
        hi = self.at[stage].get(key)
        return [] if hi is None else list(range(0 if lo is None else lo + 1, hi))

    def table_view(self, key: str, version: int) -> Any:
        """Table ``key`` of the clean run as of ``version``."""
        others = tuple(k for k in self.first if k != key)
        return reader_view(self.spark, self.run, self.case, skip=others, at={key: version}).get(key)

    def view(self, at: dict[str, int | None]) -> View:
        key = repr(sorted(at.items()))
        if key not in self._views:
            self._views[key] = reader_view(self.spark, self.run, self.case, at=at)
        return self._views[key]


_CLEAN: dict[tuple[str, bool], Clean] = {}


@pytest.fixture(scope="module")
def clean_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("clean")
    yield root
    _CLEAN.clear()
    shutil.rmtree(root, ignore_errors=True)


def _clean(spark: Any, name: str, root: Any, per_stage: bool = True) -> Clean:
    """The pipeline's clean run (one per module); a stage-by-stage one serves every test."""
    if (name, True) in _CLEAN:
        return _CLEAN[(name, True)]
    if (name, per_stage) not in _CLEAN:
        _CLEAN[(name, per_stage)] = Clean(spark, SPECS[name], _case(name), str(root / f"{name}-{int(per_stage)}"),
                                          per_stage)
    return _CLEAN[(name, per_stage)]


def _point(spec: PipelineSpec, case: Case, stage: str, kind: str) -> str:
    if kind == "after":
        return f"{spec.name}.{stage}"
    n = case.write_at.get(stage, 1) if kind == "write" else 1
    return f"{spec.name}.{stage}.{kind}@{n}"


def _diff(got: View, want: View) -> str:
    out = []
    for key in sorted(set(got) | set(want)):
        g, w = got.get(key), want.get(key)
        if g != w:
            gr, wr = (g or ((), []))[1], (w or ((), []))[1]
            extra = [r for r in gr if r not in wr][:3]
            lost = [r for r in wr if r not in gr][:3]
            dups = len(gr) - len(set(gr))
            out.append(f"{key}: {len(gr)} rows ({dups} duplicates), expected {len(wr)} (columns "
                       f"{(g or w or ((),))[0]}); unexpected {extra}, missing {lost}")
    return "\n".join(out)


def _no_half_written(spark: Any, run: Any, case: Case, before: dict[str, int | None], clean: Clean, stage: str,
                     point: str) -> None:
    """Each table a reader sees is as it was before the stage (``before``: its versions then), or
    as the clean run has it after the stage, or as one of the versions the clean run itself passed
    through during the stage (a stage that commits a table twice - publish appends a stream's held
    tuples, then drops those no future tuple can meet): never half-written."""
    after = clean.view(clean.at[stage])
    got = reader_view(spark, run, case)
    old: View | None = None
    for key in sorted(set(got) | set(after)):
        if got.get(key) == after.get(key):
            continue
        old = old if old is not None else reader_view(spark, run, case, at=before)
        if got.get(key) == old.get(key):
            continue
        if any(got.get(key) == clean.table_view(key, v) for v in clean.versions_during(stage, key)):
            continue
        pytest.fail(f"after {point} failed, {key} shows a version that is neither the one before the stage "
                    f"nor one a clean run passes through in it:\n{_diff({key: got.get(key)}, {key: after.get(key)})}")


def _outputs(run: Any) -> list[str]:
    """The pair tables of a run (s2j: one per task)."""
    keys = [k for k in run.table_paths() if k == "output" or k.startswith("task:")]
    return [k for k in keys if not (k == "output" and any(x.startswith("task:") for x in keys))]


# ------------------------------------------------------------------ the matrix


@pytest.mark.parametrize("name,stage,kind", MATRIX)
def test_a_stage_failing_mid_write_then_retried_equals_a_clean_run(spark, tmp_path, monkeypatch, clean_root,
                                                                    name, stage, kind):
    spec, case = SPECS[name], _case(name)
    clean = _clean(spark, name, clean_root)
    folder = str(tmp_path / name)
    params = case.make_inputs(spark, folder)
    run = spec.make_run(params, "r1")
    names = [st.name for st in spec.stages]
    for s in names[: names.index(stage)]:
        run_stage(spec, s, params, "r1", spark=spark, trigger=TRIGGER)
    before = versions(run)
    point = _point(spec, case, stage, kind)
    monkeypatch.setenv("SIMJOIN_FAULTS", point)
    with pytest.raises(InjectedFault, match=re.escape(f"injected fault at {point.split('@')[0]}")):
        run_stage(spec, stage, params, "r1", spark=spark, trigger=TRIGGER)
    monkeypatch.delenv("SIMJOIN_FAULTS")
    _no_half_written(spark, run, case, before, clean, stage, point)
    for s in names[names.index(stage):]:  # the retry (same run id), then the stages after it
        run_stage(spec, s, params, "r1", spark=spark, trigger=TRIGGER)
    got, want = reader_view(spark, run, case), clean.view(clean.first)
    assert got == want, f"after {point} and a retry:\n{_diff(got, want)}"
    if case.more_inputs is not None:  # a stream: the next micro-batch neither loses nor repeats
        case.more_inputs(spark, folder)
        for st in spec.stages:
            run_stage(spec, st.name, params, "r2", spark=spark, trigger=TRIGGER)
        got, want = reader_view(spark, run, case), clean.view(clean.final)
        assert got == want, f"after {point}, a retry and the next micro-batch:\n{_diff(got, want)}"


# ------------------------------------------------------------------ one walk per pipeline


#: The walks' order under `make test`'s two workers: the longest first, so neither worker ends alone on one.
WALK_ORDER = ("ineq", "hypercube", "s3j", "s2j", "ssj", "generate")  # 344, 305, 262, 259, 228, 11 s


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SPECS, key=lambda n: (WALK_ORDER.index(n) if n in WALK_ORDER else -1, n)))
def test_every_stage_failing_mid_write_then_retried_equals_a_clean_run(spark, tmp_path, monkeypatch, clean_root,
                                                                       name):
    """The matrix in one run per pipeline (what ``make test`` runs): every stage, in order, takes
    its fault (``_ci_kind``); right after it, no table a reader sees is half-written; its retry
    (same run id) then goes on to the next stage's fault. The outputs equal a clean run's, and for
    a stream the next micro-batch neither loses nor repeats. The same faults one test each, and
    the other kind of each stage, are ``test_a_stage_failing_mid_write_then_retried_...`` above."""
    spec, case = SPECS[name], _case(name)
    clean = _clean(spark, name, clean_root)
    folder = str(tmp_path / name)
    params = case.make_inputs(spark, folder)
    run = spec.make_run(params, "r1")
    for st in spec.stages:
        before = versions(run)
        point = _point(spec, case, st.name, _ci_kind(spec, st.name))
        monkeypatch.setenv("SIMJOIN_FAULTS", point)
        with pytest.raises(InjectedFault, match=re.escape(f"injected fault at {point.split('@')[0]}")):
            run_stage(spec, st.name, params, "r1", spark=spark, trigger=TRIGGER)
        monkeypatch.delenv("SIMJOIN_FAULTS")
        _no_half_written(spark, run, case, before, clean, st.name, point)
        run_stage(spec, st.name, params, "r1", spark=spark, trigger=TRIGGER)  # the retry
    got, want = reader_view(spark, run, case), clean.view(clean.first)
    assert got == want, f"after a fault and a retry in every stage:\n{_diff(got, want)}"
    if case.more_inputs is not None:
        case.more_inputs(spark, folder)
        for st in spec.stages:
            run_stage(spec, st.name, params, "r2", spark=spark, trigger=TRIGGER)
        got, want = reader_view(spark, run, case), clean.view(clean.final)
        assert got == want, f"after a fault and a retry in every stage, then the next micro-batch:\n{_diff(got, want)}"


# ------------------------------------------------------------------ killed between output and state


@pytest.mark.parametrize("name,more", [pytest.param(n, m, id=f"{n}-{'new-rows' if m else 'same-unit'}",
                                                  marks=(pytest.mark.slow, pytest.mark.exhaustive))
                                     for n in STREAMS for m in (False, True)])
def test_publish_fails_mid_write_then_is_killed_between_output_and_state_then_the_next_run_is_exact(
        spark, tmp_path, monkeypatch, clean_root, name, more):
    """A stream's publish, three times: its Spark job fails mid-write (``publish.rows@1``: no
    piece of it visible); its retry is killed between the output write and the state write
    (``publish.mid``: the pairs, stats and state appended, the unit not committed). The next run
    (the CLI's, in this process) finishes the same unit - Delta's txn ids skip what was appended -
    and (``more``) joins the rows that arrived meanwhile: nothing lost, nothing twice."""
    from simjoin.pipeline.runner import run_pipeline

    spec, case = SPECS[name], _case(name)
    clean = _clean(spark, name, clean_root, per_stage=False)
    folder = str(tmp_path / name)
    params = case.make_inputs(spark, folder)
    run = spec.make_run(params, "r1")
    pub = _publishing(spec)
    for st in spec.stages:
        if st.name != pub:
            run_stage(spec, st.name, params, "r1", spark=spark, trigger=TRIGGER)
    before = versions(run)
    monkeypatch.setenv("SIMJOIN_FAULTS", f"{name}.{pub}.rows@1")
    with pytest.raises(InjectedFault, match=re.escape(f"{name}.{pub}.rows@1")):
        run_stage(spec, pub, params, "r1", spark=spark, trigger=TRIGGER)
    _no_half_written(spark, run, case, before, clean, pub, f"{name}.{pub}.rows@1")
    monkeypatch.setenv("SIMJOIN_FAULTS", f"{name}.publish.mid")
    with pytest.raises(InjectedFault, match=re.escape(f"{name}.publish.mid")):
        run_stage(spec, pub, params, "r1", spark=spark, trigger=TRIGGER)
    monkeypatch.delenv("SIMJOIN_FAULTS")
    assert versions(run)["progress"] is None, "the unit was committed although publish died"
    got, first = reader_view(spark, run, case), clean.view(clean.first)
    for key in _outputs(run):  # the pairs were appended before the kill: each exactly once
        assert got.get(key) == first.get(key), _diff(got, first)
    if more:
        assert case.more_inputs is not None
        case.more_inputs(spark, folder)
    res = run_pipeline(spark, spec.make_run(params, "r2"))
    assert len(res["rounds"]) == 2 and res["rounds"][0][spec.stages[0].name]["resumed"], res["rounds"]
    got, want = reader_view(spark, run, case), clean.view(clean.final if more else clean.first)
    for key in _outputs(run):
        rows = got[key][1]
        assert len(rows) == len(set(rows)), f"{key}: a row published twice"
    assert got == want, f"after {name}.publish.mid and the next run:\n{_diff(got, want)}"


def test_fault_points_parse_and_count_only_for_the_named_stage(monkeypatch):
    """The hook itself: write@N counts the current stage's commits; other stages and unset
    faults are untouched; a write in a thread without the stage's context still counts."""
    import threading

    from simjoin import faults

    monkeypatch.setenv("SIMJOIN_FAULTS", "p.a.write@2, p.b.rows@3, p.gate")
    with faults.current_stage("p.b"):
        faults.after_commit("t")  # p.b has no write fault
        faults.after_commit("t")
    with faults.current_stage("p.a"):
        faults.after_commit("t1")
        errors: list[BaseException] = []

        def other_thread():
            try:
                faults.after_commit("t2")
            except BaseException as e:
                errors.append(e)

        th = threading.Thread(target=other_thread)
        th.start()
        th.join()
        assert len(errors) == 1 and "p.a.write@2: after commit 2 of the stage, to t2" in str(errors[0])
    with pytest.raises(InjectedFault, match=re.escape("injected fault at p.gate")):
        faults.maybe_fail("p.gate")
    faults.maybe_fail("p.a")
    monkeypatch.delenv("SIMJOIN_FAULTS")
    with faults.current_stage("p.a"):
        for _ in range(3):
            faults.after_commit("t")
    sentinel = object()
    assert faults.wrap_rows(sentinel) is sentinel
    assert os.environ.get("SIMJOIN_FAULTS") is None
