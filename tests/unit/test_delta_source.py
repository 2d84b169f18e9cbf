"""A follower's poll of a Delta input costs its new commits, not the input's history: the newest
version is probed from the last one read, and the schema and reader features are kept and
brought forward by the new commits' ``metaData`` and ``protocol`` actions. Both must give what a
full listing or a fresh ``deltalake`` snapshot gives, also when the schema evolves, the table is
written again at the path, or an older version is asked for after a newer one."""

from __future__ import annotations

import json
import os
import shutil

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import types as T

from simjoin.io import delta_source
from simjoin.spark import delta


def rows(n: int, start: int = 0, extra: bool = False) -> pa.Table:
    cols = {"id": pa.array(range(start, start + n), pa.int64()),
            "ts": pa.array([start + i for i in range(n)], pa.int64()).cast(pa.timestamp("us", tz="UTC"))}
    if extra:
        cols["k"] = pa.array([1] * n, pa.int64())
    return pa.table(cols)


def fresh_schema(path: str, version: int) -> T.StructType:
    return T.StructType.fromJson(json.loads(DeltaTable(path, version=version).schema().to_json()))


def test_the_newest_version_probed_from_the_last_read_equals_a_listing(tmp_path):
    p = str(tmp_path / "in put")
    assert delta_source.latest_version(p) == -1 and delta_source.latest_version(p, after=3) == -1
    for i in range(6):
        write_deltalake(p, rows(2, 10 * i), mode="append")
    assert delta_source.latest_version(p) == 5
    for after in (None, -1, 0, 2, 5, 9):  # 9: not in the log (a rewritten log): listed
        assert delta_source.latest_version(p, after=after) == 5, after
    # a gap: a commit's JSON is gone (deleted, or cleaned up without a later checkpoint): a reader
    # before it gets the contiguous versions, then from the last of them the versions after the
    # gap, so it refuses the gap instead of waiting at version 2 forever
    os.remove(os.path.join(p, "_delta_log", f"{3:020d}.json"))
    assert delta_source.latest_version(p, after=0) == 2
    for after in (2, 4, 5):
        assert delta_source.latest_version(p, after=after) == 5, after


def test_the_kept_schema_follows_new_commits_and_equals_a_fresh_snapshot(tmp_path):
    p = str(tmp_path / "in")
    write_deltalake(p, rows(3), mode="append")
    assert delta.spark_schema(p, 0) == fresh_schema(p, 0)
    for i in range(1, 4):
        write_deltalake(p, rows(3, 10 * i), mode="append")
    assert delta.spark_schema(p, 3) == fresh_schema(p, 3)
    write_deltalake(p, rows(3, 100, extra=True), mode="append", schema_mode="merge")  # the schema evolves
    got = delta.spark_schema(p, 4)
    assert "k" in got.fieldNames() and got == fresh_schema(p, 4)
    assert delta.spark_schema(p, 2) == fresh_schema(p, 2)  # an older version: opened at it
    assert "k" not in delta.spark_schema(p, 2).fieldNames()
    assert delta_source.unsupported(p) is None


def test_a_table_written_again_at_the_path_is_not_taken_for_the_kept_one(tmp_path):
    p = str(tmp_path / "in")
    write_deltalake(p, rows(3), mode="append")
    write_deltalake(p, rows(3, 10), mode="append")
    assert "k" not in delta.spark_schema(p, 1).fieldNames()
    shutil.rmtree(p)
    write_deltalake(p, rows(3, extra=True), mode="append")
    write_deltalake(p, rows(3, 10, extra=True), mode="append")
    write_deltalake(p, rows(3, 20, extra=True), mode="append")
    assert delta.spark_schema(p, 2) == fresh_schema(p, 2)
    assert "k" in delta.spark_schema(p, 2).fieldNames()


def test_a_partitioned_input_is_refused_by_its_kept_metadata(tmp_path):
    p = str(tmp_path / "in")
    write_deltalake(p, rows(3, extra=True), mode="append", partition_by=["k"])
    assert delta_source.unsupported(p) == "it is partitioned by ['k']"
    write_deltalake(p, rows(3, 10, extra=True), mode="append")
    with pytest.raises(ValueError, match=r"at version 1: it is partitioned by \['k'\]"):
        delta.spark_schema(p, 1)


def test_the_table_id_once_the_first_commits_are_cleaned_up(tmp_path):
    p = str(tmp_path / "in")
    for i in range(3):
        write_deltalake(p, rows(2, 10 * i), mode="append")
    want = DeltaTable(p).metadata().id
    DeltaTable(p).create_checkpoint()
    for v in (0, 1):  # what a log cleanup leaves: the checkpoint and the newer commits
        (tmp_path / "in" / "_delta_log" / f"{v:020d}.json").unlink()
    assert delta_source.table_id(p) == want
    write_deltalake(p, rows(2, 50), mode="append")
    assert delta_source.table_id(p) == want
    shutil.rmtree(p)
    write_deltalake(p, rows(2), mode="append")
    assert delta_source.table_id(p) == DeltaTable(p).metadata().id != want
