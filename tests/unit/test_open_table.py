"""``delta_files.open_table``: the tables a thread opened are kept and brought up to date with
``update_incremental``; what it returns is always the table's newest version, also after another
writer's commits, a delete, and the table deleted and written again at the same path."""

from __future__ import annotations

import os
import shutil
import threading

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from simjoin.io import delta_files


def _rows(t):
    return sorted(t.to_pyarrow_table().column("x").to_pylist())


def test_open_table_is_always_the_newest_version(tmp_path):
    p = str(tmp_path / "in dir" / "t")
    write_deltalake(p, pa.table({"x": [1, 2]}))
    first = delta_files.open_table(p)
    assert _rows(first) == [1, 2]
    write_deltalake(p, pa.table({"x": [3]}), mode="append")  # another writer, by its path
    again = delta_files.open_table(p)
    assert again is first and again.version() == 1 and _rows(again) == [1, 2, 3]
    write_deltalake(again, pa.table({"x": [4]}), mode="append")  # through the kept table
    DeltaTable(p).delete("x = 1")
    assert _rows(delta_files.open_table(p)) == [2, 3, 4] and delta_files.open_table(p).version() == 3
    shutil.rmtree(p)  # deleted and written again: another table at the same path
    write_deltalake(p, pa.table({"x": [9]}))
    write_deltalake(p, pa.table({"x": [8]}), mode="append")
    fresh = delta_files.open_table(p)
    assert fresh is not first and _rows(fresh) == [8, 9] and fresh.version() == 1


def test_each_thread_keeps_its_own_tables(tmp_path):
    p = str(tmp_path / "t")
    write_deltalake(p, pa.table({"x": [1]}))
    mine = delta_files.open_table(p)
    theirs = []
    th = threading.Thread(target=lambda: theirs.append(delta_files.open_table(p)))
    th.start()
    th.join()
    assert theirs[0] is not mine and _rows(theirs[0]) == _rows(mine) == [1]


def test_at_most_open_tables_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(delta_files, "OPEN_TABLES", 2)
    paths = [str(tmp_path / f"t{k}") for k in range(3)]
    for p in paths:
        write_deltalake(p, pa.table({"x": [1]}))
    first = delta_files.open_table(paths[0])
    for p in paths[1:]:
        delta_files.open_table(p)
    assert delta_files.open_table(paths[0]) is not first  # evicted: opened anew


def test_a_kept_table_reads_as_deltalake_reads_it(tmp_path):
    """Under ``keeping``: appends, a delete (files rewritten), a schema merge, a compaction and
    an overwrite are each read as a fresh deltalake read gives them; only new files are read."""

    state = tmp_path / "out_state"
    p = str(state / "tuples")
    other = str(tmp_path / "elsewhere")

    def piece(lo, hi):
        return pa.table({"unit": pa.array(range(lo, hi), pa.int64()), "x": [float(i) / 3 for i in range(lo, hi)],
                         "ts": pa.array([i * 1_000_000 for i in range(lo, hi)], pa.timestamp("us", tz="UTC"))})

    def same(where=None, columns=None):
        got = delta_files.read_kept(p, where, columns)
        want = DeltaTable(p).to_pyarrow_table(columns=columns, filters=where)
        key = lambda t: sorted(map(tuple, (t.to_pylist() and [r.values() for r in t.to_pylist()]) or []))  # noqa: E731
        assert got.schema == want.schema and key(got) == key(want), (got, want)

    write_deltalake(p, piece(0, 3))
    write_deltalake(other, piece(0, 2))
    with delta_files.keeping(str(state)):
        same()
        reads = []
        real = delta_files.read_parquet
        delta_files.read_parquet = lambda f, *a, **k: reads.append(f) or real(f, *a, **k)
        try:
            for k in range(3, 9):
                write_deltalake(p, piece(k, k + 1), mode="append")
                same([("unit", "<", 6)], ["unit", "x"])
            assert len(reads) == 6, reads  # one new file per read, the others kept
        finally:
            delta_files.read_parquet = real
        DeltaTable(p).delete("unit = 4 OR unit = 1")
        same()
        write_deltalake(p, piece(9, 10).append_column("extra", pa.array(["e"])), mode="append", schema_mode="merge")
        same()
        same([("extra", "=", "e")])
        DeltaTable(p).optimize.compact()
        same()
        write_deltalake(p, piece(20, 22).append_column("extra", pa.array(["a", "b"])), mode="overwrite")
        same()
        assert str(tmp_path / "out_state" / "tuples") in delta_files._kept
        assert delta_files.read_kept(other).num_rows == 2 and os.path.abspath(other) not in delta_files._kept
    assert not delta_files._kept  # nothing held after the block


def test_writer_properties_compress(tmp_path):
    """deltalake writes uncompressed Parquet when given WriterProperties without a codec: ours name
    snappy, as every other writer here (S3J's state of a 5 MB stream took GBs without)."""
    import glob

    import numpy as np
    import pyarrow.parquet as pq

    t = pa.table({"x": pa.array(np.zeros(100_000)), "k": pa.array(["a"] * 100_000)})
    p = str(tmp_path / "t")
    write_deltalake(p, t, writer_properties=delta_files.writer_properties(t.schema))
    meta = pq.ParquetFile(glob.glob(os.path.join(p, "*.parquet"))[0]).metadata
    assert {meta.row_group(0).column(i).compression for i in range(2)} == {"SNAPPY"}
