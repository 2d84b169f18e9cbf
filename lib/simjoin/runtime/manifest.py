"""The output manifest: the one record of what a pipeline's output owns.

Every output a pipeline writes has one manifest, a JSON file beside it (``<output>_manifest.json``;
an output that is a directory of tables, S2J's, holds it as ``<output>/_manifest.json``), written
atomically (a private temporary file, ``fsync``, ``os.replace``) when the output is first created:

- ``output``: the output's absolute real path, and ``pipeline``, the pipeline that writes it;
- ``layout``: where each part of the pipeline's output lives (role -> absolute path: ``output``,
  ``stats``, ``quarantine``, ``state``, ``work``, ``checkpoint``, ``records``, ``progress``,
  ``markers``; ssj's ``tokens``, ``lengths``, ``plan``, ``runs``, ``increments``, ``staging``);
- ``owned``: the tables and folders simjoin created for this output (absolute paths): maintenance
  touches exactly the Delta tables at or under them, and ``--reset`` removes exactly them;
- ``dirs``: folders made to hold them (removed by ``--reset`` once empty).

A table's role is that of the deepest layout path holding it (an S2J task table under the output
directory is ``output``; ``<output>_state/progress`` is ``progress``), and its retention class
follows from its role (:data:`KEEP`): ``retention`` (what users read: kept for the retention),
``internal`` (state and work: kept only while a unit is open) or ``files`` (the checkpoint and the
publish markers: not Delta tables, pruned by their own rule). Nothing is told by a table's name.

A manifest names the output it was written for: one found beside another path (the output moved or
copied: its state names the first path) is refused in one line by every reader (:class:`Moved`).
An output written before manifests existed gets one from what its run recorded (a stream's
checkpoint identity file ``created``) or marked (a batch table's owner mark) at its first start or
maintenance (:func:`legacy`), with nothing lost. Pure Python: ``deltalake`` only for an owner mark.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Manifest", "Moved", "KEEP", "FORMAT", "locate", "read", "write", "create", "legacy", "of",
           "remove", "inside", "load", "find_for", "table_owner"]

FORMAT = 1
#: the manifest beside a table output, and inside a directory output
BESIDE, INSIDE = "_manifest.json", "_manifest.json"
#: a role's retention class; every other role is ``retention``
KEEP: dict[str, str] = {"state": "internal", "work": "internal", "records": "internal", "progress": "internal",
                        "checkpoint": "files", "markers": "files"}


class Moved(ValueError):
    """The manifest found for an output was written for another path (moved or copied)."""


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def inside(child: str, parent: str) -> bool:
    """Whether ``child`` is ``parent`` or lives under it (symlinks resolved)."""
    c, p = _real(child), _real(parent)
    return c == p or c.startswith(p.rstrip(os.sep) + os.sep)


@dataclass
class Manifest:
    """One output's manifest (see the module)."""

    path: str
    pipeline: str
    output: str
    layout: dict[str, str]
    owned: list[str]
    dirs: list[str] = field(default_factory=list)
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created_at: float = field(default_factory=time.time)
    #: how it came to be: ``created`` by a run, or ``migrated`` from an earlier release's records
    origin: str = "created"

    def at(self, role: str) -> str | None:
        """The path of a role of the layout (None: this pipeline has no such part)."""
        return self.layout.get(role)

    def role(self, path: str) -> str | None:
        """The role of the deepest layout path holding ``path`` (None: none holds it)."""
        best: tuple[int, str] | None = None
        for role, p in self.layout.items():
            if inside(path, p):
                depth = len(_real(p))
                if best is None or depth > best[0]:
                    best = (depth, role)
        return None if best is None else best[1]

    def keep(self, path: str) -> str:
        """``retention``, ``internal`` or ``files`` (see :data:`KEEP`)."""
        return KEEP.get(self.role(path) or "output", "retention")

    def owns(self, path: str) -> bool:
        """Whether ``path`` is or lives under one of the owned paths."""
        return any(inside(path, o) for o in self.owned)

    def with_owned(self, paths: Sequence[str], dirs: Sequence[str] = ()) -> Manifest:
        new = [os.path.abspath(p) for p in paths if not self.owns(p)]
        more = [os.path.abspath(d) for d in dirs if os.path.abspath(d) not in self.dirs]
        return Manifest(**{**asdict(self), "owned": self.owned + new, "dirs": self.dirs + more})

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("path")
        return {"format": FORMAT, **d}


def _candidates(output: str) -> list[str]:
    out = os.path.abspath(output).rstrip(os.sep)
    return [out + BESIDE, os.path.join(out, INSIDE)]


def locate(output: str) -> str | None:
    """The manifest file of the output at ``output`` (None: there is none)."""
    return next((f for f in _candidates(output) if os.path.isfile(f)), None)


def load(f: str) -> Manifest:
    """The manifest in the file ``f`` (``ValueError``, one line, when it cannot be read)."""
    try:
        with open(f) as fh:
            d = json.load(fh)
        fmt = int(d.pop("format", 0))
        if fmt > FORMAT:
            raise ValueError(f"{f}: output manifest format {fmt}, newer than this simjoin reads ({FORMAT}): "
                             "allowed: the simjoin release that wrote it or a newer one")
        return Manifest(path=f, **{k: d[k] for k in ("pipeline", "output", "layout", "owned", "dirs", "id",
                                                      "created_at", "origin") if k in d})
    except (OSError, TypeError, KeyError, json.JSONDecodeError) as e:
        raise ValueError(f"{f}: the output manifest cannot be read ({type(e).__name__}: {e}): allowed: restore it "
                         "from a backup, or remove the output with its tables and run again") from None


def read(output: str) -> Manifest | None:
    """The manifest of the output at ``output`` (None: there is none). Raises :class:`Moved` (one
    line) when it was written for another path, ``ValueError`` when it cannot be read."""
    f = locate(output)
    if f is None:
        return None
    m = load(f)
    if _real(m.output) != _real(output):
        raise Moved(f"{output}: its manifest {f} was written for {m.output}: the output was moved or copied, and "
                    f"its state and tables name {m.output}: allowed: move it back to {m.output}, or start a new "
                    "--output (a copy is a backup, not an output)")
    return m


def write(m: Manifest) -> Manifest:
    """Write ``m`` atomically (readers see the old manifest or the new one, never a part)."""
    os.makedirs(os.path.dirname(m.path), exist_ok=True)
    tmp = f"{m.path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(m.as_json(), fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, m.path)
    return m


def create(pipeline: str, output: str, layout: Mapping[str, str], owned: Sequence[str], dirs: Sequence[str] = (),
           origin: str = "created") -> Manifest:
    """A new manifest for ``output`` (not written: :func:`write`). ``layout`` holds ``manifest``:
    where the file goes."""
    lay = {k: os.path.abspath(v) for k, v in layout.items() if k != "manifest" and v}
    where = layout.get("manifest") or _candidates(output)[0]
    return Manifest(path=os.path.abspath(where), pipeline=pipeline, output=_real(output), layout=lay,
                    owned=[os.path.abspath(p) for p in owned], dirs=[os.path.abspath(d) for d in dirs], origin=origin)


def find_for(path: str, levels: int = 4) -> Manifest | None:
    """The manifest of the output that owns the table or folder at ``path`` (None: no output's):
    the manifests in ``path``'s folder and the ``levels`` folders above it, the owner of the deepest
    owned path holding it. What the Airflow plugin and ``show``/``history`` say a table belongs to."""
    best: tuple[int, Manifest] | None = None
    d = os.path.abspath(path)
    for _ in range(levels + 1):
        parent = os.path.dirname(d)
        try:
            names = os.listdir(d) if os.path.isdir(d) else []
            names_up = os.listdir(parent) if parent != d else []
        except OSError:
            names, names_up = [], []
        files = [os.path.join(d, INSIDE)] if INSIDE in names else []
        files += [os.path.join(parent, n) for n in names_up if n.endswith(BESIDE) and n != INSIDE]
        for f in files:
            try:
                m = _cached(f, os.stat(f).st_mtime_ns)
            except (OSError, ValueError):
                continue
            for o in m.owned:
                if inside(path, o) and (best is None or len(o) > best[0]):
                    best = (len(o), m)
        if parent == d:
            break
        d = parent
    return None if best is None else best[1]


@functools.lru_cache(maxsize=256)
def _cached(f: str, mtime_ns: int) -> Manifest:
    return load(f)


def remove(m: Manifest) -> None:
    """Remove the manifest file (``--reset``, once every owned path is gone)."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(m.path)


def table_owner(path: str) -> str | None:
    """The owner mark of the Delta table at ``path`` (None: unmarked or unreadable)."""
    from deltalake import DeltaTable

    from simjoin.contracts import owner_of

    try:
        md = DeltaTable(path).metadata()
    except Exception:
        return None
    return owner_of(md.description, md.configuration)


def _stream_layout(output: str, directory: bool) -> dict[str, str]:
    from simjoin.runtime.tables import DirTables, StreamTables

    return (DirTables if directory else StreamTables)(output).layout()


def legacy(output: str, layout: Mapping[str, str] | None = None) -> Manifest | None:
    """The manifest an output written before manifests existed would have (not written), from what
    its run recorded: a stream's checkpoint identity file (``created``: what the pipeline created,
    relative paths found from where the checkpoint really is), else a Delta table at ``output``
    with an owner mark and the tables of ``layout`` (the pipeline's, when known) that carry the
    same mark. None: nothing there is a simjoin pipeline's."""
    out = os.path.abspath(output).rstrip(os.sep)
    for ck, directory in ((out + "_checkpoint", False), (os.path.join(out, "_checkpoint"), True)):
        f = os.path.join(ck, "simjoin.json")
        if not os.path.isfile(f):
            continue
        with open(f) as fh:
            ident = json.load(fh)
        lay = dict(layout) if layout else _stream_layout(out, directory)
        created = absolute_created(ident, ck)
        if created is None:  # before the identity listed what it created: the layout's tables
            created = [p for k, p in lay.items() if k in ("stats", "quarantine", "state", "work", "checkpoint")
                       or (k == "output" and not directory) or (k in ("shed", "snapshots"))]
        return create(str(ident.get("pipeline") or ""), out, lay, created, ident.get("created_dirs") or [],
                      origin="migrated")
    if not os.path.isdir(os.path.join(out, "_delta_log")):
        return None
    owner = table_owner(out)
    if owner is None:
        return None
    lay = dict(layout) if layout else {"output": out}
    mine = [out] + [p for k, p in lay.items() if k not in ("manifest", "output") and p and
                    os.path.isdir(os.path.join(p, "_delta_log")) and table_owner(p) == owner]
    return create(owner, out, {**lay, "output": out}, mine, origin="migrated")


def of(output: str, layout: Mapping[str, str] | None = None, save: bool = False) -> Manifest | None:
    """The output's manifest; for an output of an earlier release, the one :func:`legacy` finds
    (written when ``save``: the caller holds the output's lock). None: no pipeline's output."""
    m = read(output)
    if m is not None:
        return m
    m = legacy(output, layout)
    if m is not None and save:
        write(m)
    return m


def absolute_created(ident: Mapping[str, Any], ck: str) -> list[str] | None:
    """The identity's ``created`` paths as absolute paths. An output created with a relative
    ``--output`` (before paths were made absolute when a config is read) recorded them as typed,
    relative to the folder it ran in: that folder is found from where its checkpoint really is
    (the recorded checkpoint path is a relative path that ends there), never from this process's
    folder, so a maintenance run from anywhere touches that output's tables and no others."""
    created = ident.get("created")
    if created is None:
        return None
    rel = [str(c) for c in created if "://" not in str(c) and not os.path.isabs(str(c))]
    if not rel:
        return [str(c) for c in created]
    ck_real = os.path.realpath(ck)
    typed_ck = next((c for c in rel if c.rstrip("/").endswith("_checkpoint") or c.endswith("/_checkpoint")), None)
    base = None
    if typed_ck is not None:
        norm = os.path.normpath(typed_ck)
        if ck_real.endswith(os.sep + norm):
            base = ck_real[: -len(norm) - 1]
    if base is None:  # a relative output whose checkpoint is not in the list: beside the output
        out = os.path.normpath(str(ident.get("output") or ""))
        for suffix in ("_checkpoint", os.sep + "_checkpoint"):
            if out and not os.path.isabs(out) and ck_real.endswith(os.sep + out + suffix):
                base = ck_real[: -len(out + suffix) - 1]
    if base is None:
        raise ValueError(f"the identity file in {ck} names its tables relative to a folder that cannot be told "
                         f"({', '.join(rel[:2])}): allowed: run the pipeline once from that folder, which records "
                         "them as absolute paths")
    return [c if c not in rel else os.path.join(base, os.path.normpath(c)) for c in map(str, created)]
