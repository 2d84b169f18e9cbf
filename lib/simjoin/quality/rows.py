"""A stream pipeline's input, declared as data, and the one function that applies it.

A pipeline declares an :class:`InputSpec` (docs/architecture.md, "The operator contract"): the
payload columns each source must have (by kind, :data:`KINDS`), the types they are staged in,
columns derived per side, its row rules and, for a windowed pipeline, its :class:`Windows`.
The rules are values:

- :class:`Needed`: a column a side needs is null, or NaN or infinite;
- :class:`Bounded`: a value of a side at or beyond a magnitude;
- :class:`Vectors`: a null vector, null or NaN/inf elements, a wrong dimension (fixed by the
  first batch: its most frequent length), a zero vector where the metric refuses one;
- :class:`UniqueIds`: a (side, id) repeated in the batch (all but the first by an order) or held
  by the live-id index (the pipeline's live state and the unit's earlier rows);
- :class:`Late`: a row dated more than the allowed lateness before its stream's committed max ts.

:func:`check` applies the platform's own rules (a null id or ts, an unreadable ts, a ts in the
future) and then the declared ones to a micro-batch as a pyarrow Table, and returns the staged
rows and the quarantined rows, each with every broken rule's reason ('; '-joined in the declared
order). Both executors run this one function: in process on the whole batch, on Spark inside
``mapInArrow`` over partitions by (side, id), so a repeated id never straddles two partitions.
Only quarantined rows ever meet per-row Python (their reason text).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from simjoin.core.metric.stream import window_copies
from simjoin.core.unique import unique
from simjoin.runtime.event_time import aware, epoch_us

__all__ = [
    "KINDS",
    "InputSpec",
    "Needed",
    "Bounded",
    "Vectors",
    "UniqueIds",
    "Late",
    "Windows",
    "Derived",
    "RowContext",
    "Checked",
    "check",
    "measure",
    "pick_meta",
    "spark_ts_string",
    "epoch_us",
    "aware",
    "first_by",
]

UTC = dt.UTC
US = pa.timestamp("us", tz="UTC")
Kind = Literal["numeric", "integer", "vector", "boolean"]
#: what each payload kind allows, in words (the schema check's refusal names it)
KINDS: dict[str, str] = {"numeric": "a numeric type", "integer": "an integer type",
                         "vector": "array<double> (an array of numbers)", "boolean": "boolean"}


# --------------------------------------------------------------------------- the declarations


@dataclass(frozen=True)
class Needed:
    """``column`` must not be null on ``sides`` (None: every side), nor NaN or infinite when it
    is a float (``finite``). Reasons: ``null <label>``, ``NaN or inf in <column>``."""

    column: str
    sides: tuple[int, ...] | None = None
    label: str | None = None
    finite: bool = True


@dataclass(frozen=True)
class Bounded:
    """``|column| < bound`` on ``side``; else quarantined with ``reason``."""

    column: str
    side: int
    bound: float
    reason: str


@dataclass(frozen=True)
class Vectors:
    """The vector column's rules: null, null elements, NaN/inf elements, the dimension (the
    first batch's most frequent length, then the smallest, kept in the unit's meta as ``dim``)
    and, with ``nonzero`` (why), a vector of zeros."""

    column: str
    nonzero: str | None = None


@dataclass(frozen=True)
class UniqueIds:
    """One row per (side, id): the first by ``order`` (columns, ascending, nulls first, NaN after
    every number; a list column compares element by element) is kept, every other copy and every
    id the live-id index holds is quarantined (``duplicate id N``, ``... (<seen>)``)."""

    order: tuple[str, ...]
    seen: str = "a live tuple has it"


@dataclass(frozen=True)
class Late:
    """A row of side ``s`` dated more than the allowed lateness before the largest ts ``s``
    already committed is late (docs/operations.md, "Lateness")."""


@dataclass(frozen=True)
class Windows:
    """Time windows ``[start, start + size)`` at multiples of ``slide`` (microseconds): each good
    row is staged once per window holding it, with ``window_start``/``window_end``; a copy in a
    window the closed watermark already ended is late (one quarantined row per record)."""

    size_us: int
    slide_us: int


@dataclass(frozen=True)
class Derived:
    """A column ``name`` of type ``type`` that is, on side ``k``, the source column ``by_side[k]``."""

    name: str
    by_side: tuple[str, ...]
    type: str = "int64"


Rule = Needed | Bounded | Vectors | UniqueIds | Late


@dataclass(frozen=True)
class InputSpec:
    """A stream pipeline's input (see the module docstring). ``payload``: per source, column ->
    kind; ``casts``: column -> the staged type (Spark's name); ``staged``: the columns a staged
    row keeps, in order (window columns follow); ``what``: the payload in words, for a refusal."""

    payload: tuple[Mapping[str, Kind], ...]
    what: str
    rules: tuple[Rule, ...]
    staged: tuple[str, ...]
    casts: Mapping[str, str] = field(default_factory=dict)
    derived: tuple[Derived, ...] = ()
    windows: Windows | None = None

    def meta_keys(self) -> tuple[str, ...]:
        """What the first batch fixes for the whole stream (the unit's meta)."""
        return ("dim",) if any(isinstance(r, Vectors) for r in self.rules) else ()


@dataclass(frozen=True)
class RowContext:
    """What the rules of one micro-batch compare with: the current time and ``--max-future``,
    the committed max ts per side, the allowed lateness, the watermark, the meta earlier batches
    fixed and the live-id index (a Table of distinct (side, id), or None)."""

    now: dt.datetime
    max_future_s: float
    ts_unit: str | None
    max_ts: Mapping[int, dt.datetime]
    lateness_s: float = 0.0
    watermark: dt.datetime | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    seen: pa.Table | None = None

    @property
    def closed_watermark(self) -> dt.datetime | None:
        return None if self.watermark is None else self.watermark - dt.timedelta(seconds=self.lateness_s)


@dataclass
class Checked:
    """:func:`check`'s answer: rows to stage, rows to quarantine (the input's columns and
    ``reason``) and the meta to keep with the unit."""

    staged: pa.Table
    bad: pa.Table
    meta: dict[str, Any]


# --------------------------------------------------------------------------- value helpers



def spark_ts_string(us: int) -> str:
    """A UTC instant (epoch microseconds) as Spark casts a timestamp to a string (session time
    zone UTC): ``yyyy-MM-dd HH:mm:ss`` and the fraction without trailing zeros."""
    t = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=int(us))
    frac = f"{t.microsecond:06d}".rstrip("0")
    return t.strftime("%Y-%m-%d %H:%M:%S") + (f".{frac}" if frac else "")


def _np(t: pa.Table, col: str, dtype: Any) -> np.ndarray:
    return np.asarray(t.column(col).to_numpy(zero_copy_only=False), dtype)


def _isnull(t: pa.Table, col: str) -> np.ndarray:
    return np.asarray(t.column(col).is_null().to_numpy(zero_copy_only=False), bool)


def _ts_us(t: pa.Table, null: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(``ts`` as epoch microseconds with nulls as ``null``, is null)."""
    ts = t.column("ts").cast(US).cast(pa.int64())
    return (np.asarray(ts.fill_null(null).to_numpy(zero_copy_only=False), np.int64),
            np.asarray(ts.is_null().to_numpy(zero_copy_only=False), bool))


def first_by(keys: Sequence[Any], order: Sequence[Any], tie: Callable[[int], Any] | None = None) -> np.ndarray:
    """A mask of the rows that are not the first of their key (``keys``: equal-length arrays) when
    ordered by ``order`` (arrays, ascending) and then by ``tie(i)`` (a Python sort key of row i) -
    ``row_number() over (partition by keys order by ...) > 1``."""
    n = len(keys[0]) if keys else 0
    if n == 0:
        return np.zeros(0, bool)
    idx = np.lexsort([*reversed([np.asarray(o) for o in order]), *reversed([np.asarray(k) for k in keys])])
    ks = [np.asarray(k)[idx] for k in keys]
    os_ = [np.asarray(o)[idx] for o in order]
    start = np.ones(n, bool)
    start[1:] = ~np.all(np.stack([k[1:] == k[:-1] for k in ks]), axis=0)
    later = ~start
    if tie is not None:  # rows tied with their group's first on ``order``: the tie key decides
        same = np.ones(n, bool)
        same[1:] = (np.all(np.stack([o[1:] == o[:-1] for o in os_]), axis=0) if os_ else True) & later[1:]
        same[0] = False
        g = np.cumsum(start) - 1
        for grp in unique(g[same]).tolist():
            members = np.flatnonzero(g == grp)
            first_order = [o[members[0]] for o in os_]
            tied = [m for m in members.tolist() if all(o[m] == f for o, f in zip(os_, first_order))]
            best = min(tied, key=lambda m: tie(int(idx[m])))
            later[members[0]] = True
            later[best] = False
    out = np.zeros(n, bool)
    out[idx] = later
    return out


# --------------------------------------------------------------------------- the platform's rules


def engine_reasons(t: pa.Table, ctx: RowContext) -> np.ndarray:
    """The platform's rules, first match: a null id, a null ts, an unreadable ts, a ts more than
    ``max_future_s`` past the current time. An object array of reasons, '' for a good row."""
    n = t.num_rows
    ts_us, ts_null = _ts_us(t)
    # no ts_raw: ts was read typed, so its text is null exactly when it is
    id_null, raw_null = _isnull(t, "id"), _isnull(t, "ts_raw") if "ts_raw" in t.column_names else ts_null
    future = ~ts_null & (ts_us > epoch_us(ctx.now) + round(ctx.max_future_s * 1e6))
    out = np.full(n, "", object)
    unit = f" (ts unit {ctx.ts_unit})" if ctx.ts_unit else ""
    for i in np.flatnonzero(id_null | raw_null | ts_null | future).tolist():
        if id_null[i]:
            out[i] = "null id"
        elif raw_null[i]:
            out[i] = "null ts"
        elif ts_null[i]:
            out[i] = f"unreadable ts {t.column('ts_raw')[i].as_py()}{unit}"
        else:
            out[i] = (f"future: ts {spark_ts_string(int(ts_us[i]))} is more than {ctx.max_future_s:g}s past the "
                      f"current time {ctx.now.isoformat()}")
    return out


# --------------------------------------------------------------------------- the declared rules

#: a rule's verdict: (bad rows mask, a reason text or ``reason(rows) -> texts``)
Verdict = tuple[np.ndarray, Any]


def _side_is(t: pa.Table, sides: tuple[int, ...] | None) -> np.ndarray:
    if sides is None:
        return np.ones(t.num_rows, bool)
    return np.isin(_np(t, "side", np.int64), np.asarray(sides, np.int64))


def _needed(t: pa.Table, r: Needed) -> list[Verdict]:
    mine = _side_is(t, r.sides)
    out: list[Verdict] = [(mine & _isnull(t, r.column), f"null {r.label or r.column}")]
    col = t.column(r.column)
    if r.finite:
        bad = np.zeros(t.num_rows, bool)
        if pa.types.is_floating(col.type):  # an integer is never NaN or infinite
            bad = mine & ~np.isfinite(np.asarray(col.fill_null(0.0).to_numpy(zero_copy_only=False), np.float64))
        out.append((bad, f"NaN or inf in {r.column}"))
    return out


def _bounded(t: pa.Table, r: Bounded) -> list[Verdict]:
    col = pc.cast(t.column(r.column), pa.float64(), safe=False)
    v = np.asarray(col.fill_null(0.0).to_numpy(zero_copy_only=False), np.float64)
    return [(_side_is(t, (r.side,)) & (np.abs(v) >= r.bound), r.reason)]


def _list_parts(t: pa.Table, col: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(row is null, row length (-1 when null), flat values as float64 with NaN for null
    elements, element is null, element's row)."""
    c = t.column(col)
    c = c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
    isnull = np.asarray(c.is_null().to_numpy(zero_copy_only=False), bool)
    length = np.asarray(pc.fill_null(pc.list_value_length(c), -1).to_numpy(zero_copy_only=False), np.int64)
    flat = pc.list_flatten(c)
    parent = np.asarray(pc.list_parent_indices(c).to_numpy(zero_copy_only=False), np.int64)
    elem_null = np.asarray(flat.is_null().to_numpy(zero_copy_only=False), bool)
    vals = np.asarray(pc.fill_null(flat.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False), np.float64)
    return isnull, length, np.where(elem_null, np.nan, vals), elem_null, parent


def _per_row(n: int, parent: np.ndarray, flags: np.ndarray) -> np.ndarray:
    return np.bincount(parent[flags], minlength=n)[:n] > 0 if parent.size else np.zeros(n, bool)


def _vectors(t: pa.Table, r: Vectors, dim: int | None) -> list[Verdict]:
    n = t.num_rows
    isnull, length, v, en, parent = _list_parts(t, r.column)
    c = r.column
    out: list[Verdict] = [(isnull, f"null {c}"), (_per_row(n, parent, en), f"null element in {c}"),
                          (_per_row(n, parent, ~en & ~np.isfinite(v)), f"NaN or inf in {c}")]
    if dim is not None:
        out.append((~isnull & (length != dim),
                    lambda rows: [f"{c} dimension {int(length[i])}, expected {dim}" for i in rows.tolist()]))
    if r.nonzero is not None:
        zeros = np.bincount(parent[~en & (v == 0)], minlength=n)[:n] if parent.size else np.zeros(n, np.int64)
        out.append((~isnull & (zeros == length), f"zero {c} ({r.nonzero})"))
    return out


def _spark_order(t: pa.Table, columns: Sequence[str]) -> tuple[list[np.ndarray], Callable[[int], Any] | None]:
    """Sort keys giving Spark's ascending order of ``columns`` (a null first, NaN after every
    number, -0.0 as 0.0), and a tie key for list columns (compared element by element)."""
    keys: list[np.ndarray] = []
    lists = []
    for c in columns:
        col = t.column(c)
        if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            lists.append(col)
            continue
        if pa.types.is_timestamp(col.type):
            col = col.cast(US).cast(pa.int64())
        nulls = np.asarray(col.is_null().to_numpy(zero_copy_only=False), bool)
        if pa.types.is_floating(col.type):
            v = np.asarray(col.fill_null(0.0).to_numpy(zero_copy_only=False), np.float64)
            keys += [~nulls, np.isnan(v), np.where(np.isnan(v), 0.0, v) + 0.0]
        else:
            keys += [~nulls, np.asarray(col.fill_null(0).to_numpy(zero_copy_only=False), np.int64)]
    if not lists:
        return keys, None

    def tie(i: int) -> Any:
        return tuple(_list_key(col[i].as_py()) for col in lists)

    return keys, tie


def _list_key(v: Any) -> tuple[Any, ...]:
    """Spark's ascending order of an array of numbers: a null array first, then element by
    element (a null element first, NaN after every number), a prefix before a longer array."""
    if v is None:
        return (0,)
    return (1, tuple((0, 0, 0.0) if e is None else (1, 1, 0.0) if e != e else (1, 0, e) for e in v))


def _unique(t: pa.Table, r: UniqueIds, seen: pa.Table | None, eligible: np.ndarray | None = None) -> list[Verdict]:
    """The duplicate-id verdicts: among the ``eligible`` rows (None: all), every copy of a (side,
    id) but the first by ``r.order``; and every row whose (side, id) the live-id index ``seen`` holds."""
    side, ids = _np(t, "side", np.int64), _np(t, "id", np.int64)
    later = np.zeros(t.num_rows, bool)
    keep = np.flatnonzero(eligible) if eligible is not None else np.arange(t.num_rows)
    if keep.size:
        sub = t.take(pa.array(keep, pa.int64())) if keep.size < t.num_rows else t
        order, tie = _spark_order(sub, r.order)
        later[keep] = first_by([side[keep], ids[keep]], order, tie)
    out: list[Verdict] = [(later, lambda rows: [f"duplicate id {ids[i]}" for i in rows.tolist()])]
    if seen is not None and seen.num_rows and t.num_rows:
        from simjoin.core.membership import member_of, staged_index

        # the (side, id) the index holds that this batch repeats: the index's rows looked up among
        # the batch's (small, indexed once), then the batch's rows among those few
        ks, ki = _np(seen, "side", np.int64), _np(seen, "id", np.int64)
        common = member_of(ks, ki, staged_index(side, ids))
        hit = member_of(side, ids, staged_index(ks[common], ki[common]))
        out.append((hit, lambda rows: [f"duplicate id {ids[i]} ({r.seen})" for i in rows.tolist()]))
    return out


def _late(t: pa.Table, ctx: RowContext) -> list[Verdict]:
    lag = dt.timedelta(seconds=ctx.lateness_s)
    behind = f"more than {lag.total_seconds():g}s before" if lag else "before"
    side = _np(t, "side", np.int64)
    ts, _ = _ts_us(t, null=np.iinfo(np.int64).max)
    out: list[Verdict] = []
    for s, mark in sorted(ctx.max_ts.items()):
        text = f" is {behind} {mark.isoformat()}, the latest ts its stream already committed"
        out.append(((side == s) & (ts < epoch_us(mark - lag)),
                    lambda rows, text=text: [f"late: ts {spark_ts_string(int(u))}{text}" for u in ts[rows]]))
    return out


def _split(t: pa.Table, verdicts: Sequence[Verdict]) -> tuple[pa.Table, pa.Table]:
    """(good rows, bad rows with ``reason``: every broken rule's reason, '; '-joined)."""
    n = t.num_rows
    any_bad = np.zeros(n, bool)
    for mask, _ in verdicts:
        any_bad |= mask
    bad_idx = np.flatnonzero(any_bad)
    texts: dict[int, list[str]] = {i: [] for i in bad_idx.tolist()}  # the bad rows only: no list per row
    for mask, reason in verdicts:
        idx = np.flatnonzero(mask)
        if not idx.size:
            continue
        for i, w in zip(idx.tolist(), [reason] * idx.size if isinstance(reason, str) else reason(idx)):
            texts[i].append(w)
    bad = t.take(pa.array(bad_idx, pa.int64())).append_column(
        "reason", pa.array(["; ".join(texts[i]) for i in bad_idx.tolist()], pa.string()))
    return t.filter(pa.array(~any_bad)), bad


# --------------------------------------------------------------------------- the check


def _derive(t: pa.Table, spec: InputSpec) -> pa.Table:
    for d in spec.derived:
        side = _np(t, "side", np.int64)
        typ = pa.type_for_alias(d.type)
        parts = [t.column(c).cast(typ) if c in t.column_names else pa.nulls(t.num_rows, typ) for c in d.by_side]
        col = parts[0].combine_chunks() if isinstance(parts[0], pa.ChunkedArray) else parts[0]
        for k, p in enumerate(parts[1:], start=1):
            col = pc.if_else(pa.array(side == k), p, col)
        names = t.column_names
        t = t.set_column(names.index(d.name), d.name, col) if d.name in names else t.append_column(d.name, col)
    return t


def measure(t: pa.Table, spec: InputSpec, ctx: RowContext) -> pa.Table:
    """What a batch says about the meta it fixes (``InputSpec.meta_keys``): the count of each
    vector length among the rows the platform's rules keep, as a Table (``length``, ``n``) that
    partitions' answers concatenate into (:func:`pick_meta`)."""
    col = next((r.column for r in spec.rules if isinstance(r, Vectors)), None)
    if col is None or not t.num_rows:
        return pa.table({"length": pa.array([], pa.int64()), "n": pa.array([], pa.int64())})
    ok = engine_reasons(t, ctx) == ""
    lens = pc.list_value_length(t.column(col)).to_numpy(zero_copy_only=False)
    lens = np.asarray(lens[ok & ~_isnull(t, col)], np.int64)
    cnt = np.bincount(lens) if lens.size else np.zeros(0, np.int64)
    got = np.flatnonzero(cnt)
    return pa.table({"length": pa.array(got, pa.int64()), "n": pa.array(cnt[got], pa.int64())})


def pick_meta(counts: pa.Table, spec: InputSpec, known: Mapping[str, Any]) -> dict[str, Any]:
    """The meta of ``known`` (what earlier batches fixed), completed from ``counts``
    (:func:`measure`'s rows): the dimension is the most frequent length, then the smallest."""
    out = {k: known[k] for k in spec.meta_keys() if known.get(k)}
    if "dim" in spec.meta_keys() and not out.get("dim") and counts.num_rows:
        cnt = counts.group_by("length").aggregate([("n", "sum")])
        ln, n = _np(cnt, "length", np.int64), _np(cnt, "n_sum", np.int64)
        top = int(ln[n == n.max()].min())
        if top > 0:
            out["dim"] = top
    return out


def check(t: pa.Table, spec: InputSpec, ctx: RowContext, meta: Mapping[str, Any] | None = None) -> Checked:
    """The platform's rules, then ``spec``'s, on one micro-batch (``t``: ``id``, ``ts``,
    ``ts_raw`` (the text ts was parsed from; absent when ts was read typed), the payload,
    ``side``). ``meta``: what the whole batch fixes (:func:`pick_meta`;
    computed here from ``t`` when not given). Rows the platform refuses carry its reason only."""
    if meta is None:
        meta = pick_meta(measure(t, spec, ctx), spec, ctx.meta)
    why = engine_reasons(t, ctx)
    ok = why == ""
    bad0 = t.filter(pa.array(~ok)).append_column("reason", pa.array(why[~ok].tolist(), pa.string()))
    good = _derive(t.filter(pa.array(ok)), spec)
    verdicts: list[Verdict] = []
    for r in spec.rules:
        if isinstance(r, Needed):
            verdicts += _needed(good, r)
        elif isinstance(r, Bounded):
            verdicts += _bounded(good, r)
        elif isinstance(r, Vectors):
            verdicts += _vectors(good, r, meta.get("dim"))
        elif isinstance(r, Late):
            verdicts += _late(good, ctx)
        elif not isinstance(r, UniqueIds):  # pragma: no cover - a new rule kind without its check
            raise TypeError(f"no check for the row rule {r!r}")
    # ids last, among the rows every other rule let through: a copy refused for itself (a zero
    # vector, a null, late) does not make its valid twin a duplicate
    refused = np.zeros(good.num_rows, bool)
    for mask, _ in verdicts:
        refused |= mask
    for r in spec.rules:
        if isinstance(r, UniqueIds):
            verdicts += _unique(good, r, ctx.seen, eligible=~refused)
    good, bad1 = _split(good, verdicts)
    bad = [bad0, bad1.select(bad0.column_names)]
    staged = good.select(list(spec.staged))
    if spec.windows is not None:
        staged, late = _windows(good, staged, spec.windows, ctx)
        if late.num_rows:
            bad.append(late.select(bad0.column_names))
    return Checked(staged, pa.concat_tables(bad), dict(meta))


def _windows(good: pa.Table, staged: pa.Table, w: Windows, ctx: RowContext) -> tuple[pa.Table, pa.Table]:
    """The staged copies of the good rows, one per window holding each; the copies in windows the
    closed watermark ended become one late row per record (its first such window)."""
    ts, _ = _ts_us(good)
    rec, start = window_copies(ts, w.size_us, w.slide_us)
    idx = pa.array(rec, pa.int64())
    win = (staged.take(idx).append_column("window_start", pa.array(start).cast(US))
           .append_column("window_end", pa.array(start + w.size_us).cast(US)))
    cw = ctx.closed_watermark
    late = np.zeros(rec.size, bool) if cw is None else (start + w.size_us) <= epoch_us(cw)
    if not late.any():
        return win, good.slice(0, 0).append_column("reason", pa.array([], pa.string()))
    first = np.flatnonzero(late)[~first_by([rec[late]], [np.arange(int(late.sum()))])]
    if not ctx.lateness_s:
        closed = f" closed at watermark {ctx.watermark}"
    else:
        closed = (f" closed at watermark {cw} ({ctx.watermark} less --allowed-lateness {ctx.lateness_s:g}s)")
    why = [f"late: window starting {spark_ts_string(int(start[i]))}{closed}" for i in first.tolist()]
    lt = good.take(pa.array(rec[first], pa.int64())).append_column("reason", pa.array(why, pa.string()))
    return win.filter(pa.array(~late)), lt
