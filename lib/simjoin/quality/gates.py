"""Great Expectations 1.x gates between pipeline stages.

A gate validates the real Spark DataFrame against an expectation suite; a failing suite
stops the stage with :class:`GateFailed`, whose message says which expectation failed,
on how many rows, and shows sample values. Rows a stage already holds in the driver as a
pyarrow Table (a micro-batch's pairs read from the files its tasks wrote) are validated as a
pandas DataFrame by the same suite, with no Spark job: Spark's type names become pandas dtypes.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from simjoin.log import get_logger

__all__ = ["GateFailed", "GateResult", "Expect", "preload", "run_suite", "pairs_expectations", "columns_expectations"]

log = get_logger("simjoin.quality")
_counter = itertools.count()
_ctx: Any = None
_ctx_lock = threading.Lock()


class GateFailed(RuntimeError):
    """A data-quality suite failed; ``failures`` lists (expectation, unexpected rows, samples)."""

    def __init__(self, suite: str, failures: list[dict[str, Any]]) -> None:
        lines = [f"quality gate {suite!r} failed:"]
        for f in failures:
            lines.append(
                f"  - {f['expectation']}({f['kwargs']}): {f['unexpected_count']} rows; samples {f['samples']}"
            )
        super().__init__("\n".join(lines))
        self.suite, self.failures = suite, failures


@dataclass
class GateResult:
    suite: str
    success: bool
    evaluated: int
    failures: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Expect:
    """An expectation as data: the name of a Great Expectations expectation class
    (``great_expectations.expectations.<name>``) and its arguments. It becomes the GX object
    where the suite runs (:func:`materialize`), so a stage can declare its gate without
    importing Great Expectations (seconds), and a suite can run in the gate process."""

    name: str
    kwargs: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, name: str, **kwargs: Any) -> Expect:
        return cls(name, tuple(sorted(kwargs.items())))


def materialize(e: Any) -> Any:
    """``e`` as a Great Expectations expectation (an :class:`Expect` is built; a GX object is kept)."""
    if isinstance(e, Expect):
        return getattr(expectations(), e.name)(**dict(e.kwargs))
    return e


def _context() -> Any:
    with _ctx_lock:
        return _context_locked()


def _context_locked() -> Any:
    global _ctx
    if _ctx is None:
        os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
        import great_expectations as gx

        logging.getLogger("great_expectations").setLevel(logging.ERROR)
        from great_expectations.data_context.types.base import ProgressBarsConfig

        _ctx = gx.get_context(mode="ephemeral")
        _ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        # A pandas batch under HASH_THRESHOLD bytes gets a "pandas_data_fingerprint" batch marker:
        # an md5 over pandas' hash of every row (0.1-0.3 s per million-pair gate), for provenance in
        # GX's stores, which an ephemeral context never writes. The expectations do not use it.
        from great_expectations.execution_engine import pandas_execution_engine

        pandas_execution_engine.HASH_THRESHOLD = 0
        _ctx.data_sources.add_pandas(name="simjoin_pandas")
    return _ctx


def _spark_source(ctx: Any) -> Any:
    """GX's Spark datasource, added on the first Spark DataFrame: adding it gets or creates a
    SparkSession, which a run whose gates all validate Arrow tables never needs."""
    with _ctx_lock:
        try:
            return ctx.data_sources.get("simjoin_spark")
        except KeyError:  # not added yet
            return ctx.data_sources.add_spark(name="simjoin_spark", persist=False)


_preload: threading.Thread | None = None
#: whether :func:`run_suite` sends Arrow gates to the gate server (:mod:`simjoin.quality.gate_server`)
_use_server = False
#: seconds a gate waits for a server that is starting (it imports Great Expectations)
GATE_PROCESS_START_S = 120.0


def warm() -> bool:
    """Import Great Expectations and build its context (what the gate server does first)."""
    _context()
    return True


def preload(process: bool = False) -> None:
    """Import Great Expectations in a background thread (it takes seconds) while Spark works.
    Every other import of it waits for this one (:func:`expectations`): two threads importing
    its modules at once can see one of them half initialized.

    ``process`` (a CLI run or task whose units may run in process): use the warm gate server
    instead (:mod:`simjoin.quality.gate_server`), starting it if none runs; :func:`run_suite` then
    validates there a pyarrow Table whose expectations are all :class:`Expect`, and this process
    never imports Great Expectations. ``SIMJOIN_GATE_PROCESS=0`` keeps the thread; a server that
    cannot start (an unsafe folder) too, with a warning."""
    global _preload, _use_server

    if process and os.environ.get("SIMJOIN_GATE_PROCESS", "1") != "0":
        from simjoin.quality import gate_server

        try:
            gate_server.start()  # unless one runs
            _use_server = True
            return
        except (gate_server.Unsafe, OSError) as e:
            log.warning("no gate server (%s): the gate runs in this process", e)
    if _preload is not None:  # the import runs or ran already
        return

    def load() -> None:
        # the import holds the GIL for seconds: hand it back to the stages' threads (their numba
        # kernels run without it) every 0.5 ms instead of Python's default 5 ms
        import sys

        before = sys.getswitchinterval()
        sys.setswitchinterval(min(before, 0.0005))
        try:
            _context()
        finally:
            sys.setswitchinterval(before)

    _preload = threading.Thread(target=load, name="gx-preload", daemon=True)
    _preload.start()


def _wait_preload() -> None:
    t = _preload
    if t is not None and t is not threading.current_thread():
        t.join()


def expectations() -> Any:
    """``great_expectations.expectations``, once a background :func:`preload` has imported it."""
    _wait_preload()
    import great_expectations.expectations as gxe

    return gxe


def _uniqueness_key(e: Any) -> list[str] | None:
    """The key columns of a uniqueness expectation (compound or one column), else None."""
    gxe = expectations()

    if isinstance(e, gxe.ExpectCompoundColumnsToBeUnique) and e.ignore_row_if == "all_values_are_missing":
        return list(e.column_list)
    if isinstance(e, gxe.ExpectColumnValuesToBeUnique) and e.mostly == 1:
        return [e.column]
    return None


#: Spark's type names (as the expectations write them) -> pandas dtypes, for a suite run on pandas.
_PANDAS_TYPES = {"LongType": "int64", "IntegerType": "int32", "ShortType": "int16", "ByteType": "int8",
                 "DoubleType": "float64", "FloatType": "float32", "BooleanType": "bool", "StringType": "object"}


def _on_pandas(e: Any) -> Any:
    """Expectation ``e`` as it reads on a pandas DataFrame (a type named as Spark's -> its dtype)."""
    gxe = expectations()

    if isinstance(e, gxe.ExpectColumnValuesToBeOfType) and e.type_ in _PANDAS_TYPES:
        return gxe.ExpectColumnValuesToBeOfType(column=e.column, type_=_PANDAS_TYPES[e.type_])
    return e


def _is_arrow(df: Any) -> bool:
    import pyarrow as pa

    return isinstance(df, pa.Table)


def _is_spark(df: Any) -> bool:
    """A Spark DataFrame (classic or Connect), told by its type's module: this package never
    imports pyspark (a Spark frame's gate runs its Spark part in ``simjoin.spark``)."""
    return type(df).__module__.startswith("pyspark.")


def _check_unique(df: Any, e: Any, key: list[str]) -> dict[str, Any] | None:
    """A uniqueness expectation, checked by ``simjoin.spark.unique.duplicates`` (``duplicates_table`` on a
    table in this process); its failure entry, or None."""
    from simjoin.quality.unique import duplicates_table

    one = len(key) == 1 and not hasattr(e, "column_list")
    entry = {"expectation": e.expectation_type, "kwargs": {"column": key[0]} if one else {"column_list": key}}
    # never hasattr on a Spark DataFrame: on Spark Connect any attribute name resolves as a column
    columns = list(df.column_names if _is_arrow(df) else df.columns)
    missing = [c for c in key if c not in columns]
    if missing:
        return {**entry, "unexpected_count": None, "samples": [],
                "exception": f"columns {missing} are not in the DataFrame columns {columns}"}
    if _is_spark(df):
        from simjoin.spark.unique import duplicates

        d = duplicates(df, key)
    else:
        d = duplicates_table(df, key)
    if not d.rows:
        return None
    return {**entry, "unexpected_count": d.rows,
            "samples": [s[key[0]] for s in d.samples] if one else d.samples, "exception": None}


def _named_columns(expectations: list[Any]) -> set[str] | None:
    """The columns the expectations name (``column``, ``column_A``/``column_B``, ``column_list``),
    or None when one of them names none (a table-level expectation sees every column)."""
    out: set[str] = set()
    for e in expectations:
        found = [getattr(e, a, None) for a in ("column", "column_A", "column_B")]
        found += list(getattr(e, "column_list", None) or [])
        got = [g for g in found if isinstance(g, str)]
        if not got:
            return None
        out.update(got)
    return out


def run_suite(df: Any, suite: str, expectations: list[Any], raise_on_failure: bool = True) -> GateResult:
    """:func:`validate` in the gate server when this run uses one and ``df`` is a pyarrow Table whose
    expectations are all :class:`Expect` (the same suite, the same result), else here."""
    if _use_server and _is_arrow(df) and all(isinstance(e, Expect) for e in expectations):
        res = _split_with_server(df, suite, expectations)
        if res is not None:
            return _result(suite, res.evaluated, res.failures, raise_on_failure)
    return validate(df, suite, expectations, raise_on_failure)


#: The uniqueness expectations ``simjoin.quality.unique`` checks exactly, by name, with the arguments
#: (and only those) that keep GX's defaults: a compound key ignoring rows whose key is all null, or
#: one column with ``mostly`` 1 (``_uniqueness_key`` on the built object).
_UNIQUE_SPECS = {"ExpectCompoundColumnsToBeUnique": ("column_list", "expect_compound_columns_to_be_unique"),
                 "ExpectColumnValuesToBeUnique": ("column", "expect_column_values_to_be_unique")}


def _spec_uniqueness(e: Expect) -> tuple[list[str], str] | None:
    """The key columns and GX type name of an :class:`Expect` uniqueness expectation (without
    importing Great Expectations), else None."""
    spec = _UNIQUE_SPECS.get(e.name)
    kw = dict(e.kwargs)
    if spec is None or set(kw) != {spec[0]}:
        return None
    key = kw[spec[0]]
    return ([key] if isinstance(key, str) else list(key)), spec[1]


def _split_with_server(t: Any, suite: str, expectations: list[Expect]) -> GateResult | None:
    """The suite on the pyarrow Table ``t`` split across two processes: its uniqueness
    expectations here (``simjoin.quality.unique``, exact, in a thread), everything else in the gate
    server on the columns those expectations name (a narrower table to hand over). The same
    expectations on the same rows as :func:`validate`; None when the server does not answer."""
    from concurrent.futures import ThreadPoolExecutor
    from types import SimpleNamespace

    own = [(e, u) for e in expectations if (u := _spec_uniqueness(e)) is not None]
    rest = [e for e in expectations if _spec_uniqueness(e) is None]

    def check_own() -> list[dict[str, Any]]:
        return [f for e, (key, kind) in own
                if (f := _check_unique(t, SimpleNamespace(expectation_type=kind, **dict(e.kwargs)), key)) is not None]

    if not rest:
        return GateResult(suite, True, len(own), check_own())
    named = _named_columns(rest)
    narrow = t if named is None else t.select([c for c in t.column_names if c in named])
    with ThreadPoolExecutor(1, thread_name_prefix="gate-unique") as pool:
        mine = pool.submit(check_own)
        res = _in_server(narrow, suite, rest)
        failures = mine.result()
    if res is None:
        return None
    return GateResult(suite, not (res.failures or failures), res.evaluated + len(own), res.failures + failures)


#: Up to this many rows a table goes to the gate server pickled; a larger one as an Arrow IPC
#: file it memory-maps (pickling 8M pairs through a pipe took 19 s, the file 0.3 s).
PICKLE_ROWS = 100_000


def _in_server(t: Any, suite: str, expectations: list[Any]) -> GateResult | None:
    """:func:`validate` of the pyarrow Table ``t`` in the gate server: a small table through the
    socket, a large one through a file in a private temporary folder (in memory where the system
    has ``/dev/shm``), removed afterwards. None (logged; the gate then runs here) when no server
    answers within ``GATE_PROCESS_START_S`` or it stops while validating."""
    global _use_server
    import shutil
    import tempfile

    import pyarrow as pa

    from simjoin.quality import gate_server

    conn = gate_server.connect(GATE_PROCESS_START_S)
    if conn is None:
        log.warning("the gate server did not answer in %gs: the gate runs in this process", GATE_PROCESS_START_S)
        _use_server = False
        return None
    folder = None
    try:
        if t.num_rows <= PICKLE_ROWS:
            conn.send(("table", t, suite, expectations))
        else:
            shm = "/dev/shm"
            folder = tempfile.mkdtemp(prefix="simjoin-gate-",
                                      dir=shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None)
            path = os.path.join(folder, "table.arrow")
            with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, t.schema) as w:
                w.write_table(t)
            conn.send(("file", path, suite, expectations))
        kind, out = conn.recv()
    except (EOFError, OSError) as e:
        log.warning("the gate server stopped (%s): the gate runs in this process", type(e).__name__)
        _use_server = False
        return None
    finally:
        conn.close()
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    if kind != "ok":
        raise RuntimeError(f"quality gate {suite!r}: the gate server failed: {out}")
    return out  # type: ignore[no-any-return]


def validate(df: Any, suite: str, expectations: list[Any], raise_on_failure: bool = True,
             quiet: bool = False) -> GateResult:
    """Validate ``df`` - a Spark DataFrame, or a pyarrow Table the stage holds in the driver
    (validated as pandas) - with the given GX expectations; raise :class:`GateFailed` on failure.

    Uniqueness expectations (``ExpectCompoundColumnsToBeUnique``, ``ExpectColumnValuesToBeUnique``)
    are checked exactly by ``simjoin.quality.unique`` - hashes sorted with numpy, then only the
    colliding rows grouped - instead of Great Expectations' window over every row, which costs 5x
    as long on millions of pairs; a failure is reported in the same form."""
    _wait_preload()
    import great_expectations as gx

    expectations = [materialize(e) for e in expectations]
    local = not _is_spark(df)
    if local:
        expectations = [_on_pandas(e) for e in expectations]
    ours = [(e, key) for e in expectations if (key := _uniqueness_key(e)) is not None]
    theirs = [e for e in expectations if _uniqueness_key(e) is None]
    # uniqueness on the Arrow table itself (integer keys hash with numpy, which releases the GIL: a
    # thread beside Great Expectations' own work on the same rows); GX gets pandas
    def own() -> list[dict[str, Any]]:
        return [f for e, key in ours if (f := _check_unique(df, e, key)) is not None]

    if not theirs:
        return _result(suite, len(expectations), own(), raise_on_failure, quiet)
    from concurrent.futures import ThreadPoolExecutor

    ctx = _context()
    ds = ctx.data_sources.get("simjoin_pandas") if local else _spark_source(ctx)
    failures: list[dict[str, Any]] = []
    with ThreadPoolExecutor(1, thread_name_prefix="gate-unique") as pool:
        own_failures = pool.submit(own) if ours else None
        for frame, group in _frames(df, theirs):
            failures += _gx_failures(gx, ds, frame, suite, group)
        failures += own_failures.result() if own_failures is not None else []
    return _result(suite, len(expectations), failures, raise_on_failure, quiet)


def _frames(df: Any, expectations: list[Any]) -> list[tuple[Any, list[Any]]]:
    """The frames Great Expectations validates: a pyarrow Table becomes one narrow pandas DataFrame
    per set of columns the expectations name (each expectation sees exactly its columns: GX's
    pandas engine copies the whole frame for each column's null filter, which on millions of pairs
    cost more than the checks), or one with every column when one names none; anything else is
    validated whole."""
    if not _is_arrow(df):
        return [(df, expectations)]
    groups: dict[tuple[str, ...] | None, list[Any]] = {}
    for e in expectations:
        named = _named_columns([e])
        key = None if named is None else tuple(c for c in df.column_names if c in named) or tuple(sorted(named))
        groups.setdefault(key, []).append(e)
    out = []
    for key, group in groups.items():
        present = df if key is None else df.select([c for c in key if c in df.column_names])
        if not any(type(e).__name__ in _TYPE_EXPECTATIONS for e in group):
            present = _widened(present)
        out.append((present.to_pandas(split_blocks=True), group))
    return out


#: expectations that check a column's type (its columns are handed over in their own types)
_TYPE_EXPECTATIONS = ("ExpectColumnValuesToBeOfType", "ExpectColumnValuesToBeInTypeList")


def _widened(t: Any) -> Any:
    """``t`` with narrower integer columns as int64 and float32 as float64 - the same values, in
    the dtypes Great Expectations' pandas checks compare vectorized (on an int32 column,
    ``ExpectColumnValuesToBeBetween`` called a Python function per row: 0.4 s per million)."""
    import pyarrow as pa

    cols = []
    for f in t.schema:
        c = t.column(f.name)
        if pa.types.is_integer(f.type) and f.type != pa.int64() and not pa.types.is_uint64(f.type):
            c = c.cast(pa.int64())
        elif pa.types.is_float32(f.type) or pa.types.is_float16(f.type):
            c = c.cast(pa.float64())
        cols.append(c)
    return pa.table(cols, names=t.column_names)


#: the batch definition of each datasource (one dataframe asset each, added once: adding or
#: deleting an asset re-serializes the context's configuration as YAML, about 30 ms each time)
_definitions: dict[str, Any] = {}
_gx_lock = threading.Lock()


def _definition(ds: Any) -> Any:
    """The whole-dataframe batch definition of the datasource ``ds`` (its one asset)."""
    if ds.name not in _definitions:
        asset = ds.add_dataframe_asset(name="simjoin_frames")
        _definitions[ds.name] = asset.add_batch_definition_whole_dataframe("whole")
    return _definitions[ds.name]


def _gx_failures(gx: Any, ds: Any, df: Any, suite: str, expectations: list[Any]) -> list[dict[str, Any]]:
    """Great Expectations' verdicts on ``df``: the failure entries of ``expectations``."""
    from great_expectations.validator.v1_validator import Validator

    gx_suite = gx.ExpectationSuite(name=f"{suite}_{next(_counter)}", expectations=list(expectations))
    with _gx_lock:  # one validation at a time (the shared asset; GX is not thread-safe)
        definition = _definition(ds)

        def validate(result_format: Any) -> Any:
            # what Batch.validate builds, without fetching the batch first: GX fingerprints a pandas
            # batch by hashing every row, once per fetch
            return Validator(batch_definition=definition, batch_parameters={"dataframe": df},
                             result_format=result_format).validate_expectation_suite(expectation_suite=gx_suite)

        # Pass/fail first (no queries for sample rows); only a failing suite is validated again for
        # its unexpected counts and sample values.
        res = validate("BOOLEAN_ONLY")
        if not res.success:
            res = validate("SUMMARY")
    failures = []
    for r in res.results:
        if not r.success:
            cfg = r.expectation_config
            result = r.result or {}
            failures.append({
                "expectation": cfg.type,
                "kwargs": {k: v for k, v in cfg.kwargs.items() if k not in ("batch_id",)},
                "unexpected_count": result.get("unexpected_count", result.get("observed_value")),
                "samples": (result.get("partial_unexpected_list") or [])[:5],
                "exception": (r.exception_info or {}).get("exception_message"),
            })
    return failures


def _result(suite: str, evaluated: int, failures: list[dict[str, Any]], raise_on_failure: bool,
            quiet: bool = False) -> GateResult:
    out = GateResult(suite, not failures, evaluated, failures)
    if quiet:
        return out
    if out.success:
        log.info("quality gate %s: %d expectations passed", suite, out.evaluated)
    elif raise_on_failure:
        raise GateFailed(suite, failures)
    return out


def columns_expectations(columns: dict[str, str], not_null: list[str] | None = None) -> list[Any]:
    """Columns exist with the given Spark type names (e.g. ``{"id": "LongType"}``); some are not null."""
    ex: list[Any] = []
    for c, t in columns.items():  # a missing column fails its type expectation too
        ex.append(Expect.of("ExpectColumnValuesToBeOfType", column=c, type_=t))
    for c in not_null or []:
        ex.append(Expect.of("ExpectColumnValuesToNotBeNull", column=c))
    return ex


def pairs_expectations(score_col: str | None, low: float | None, high: float | None,
                       self_join: bool, window_col: str | None = None) -> list[Any]:
    """The pair-output contract: schema, score range, left_id < right_id (self-join), no pair twice."""
    cols = {"left_id": "LongType", "right_id": "LongType"}
    if score_col:
        cols[score_col] = "DoubleType"
    ex = columns_expectations(cols, not_null=["left_id", "right_id"])
    if score_col and (low is not None or high is not None):
        ex.append(Expect.of("ExpectColumnValuesToBeBetween", column=score_col, min_value=low, max_value=high))
    if self_join:
        ex.append(Expect.of("ExpectColumnPairValuesAToBeGreaterThanB", column_A="right_id", column_B="left_id",
                            or_equal=False))
    key = ["left_id", "right_id"] + ([window_col] if window_col else [])
    ex.append(Expect.of("ExpectCompoundColumnsToBeUnique", column_list=key))
    return ex
