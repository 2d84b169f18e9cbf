"""``delta.id_conditions``: a DELETE of tens of thousands of ids as a few bounded conditions.

Reproduction (bench/real.py, a year of flights in one ``simjoin ineq`` run): expiry deleted 27,457
batches with one ``batch_id IN (...)`` condition and delta-rs crashed the process (SIGSEGV) after
the unit was published. Here: the conditions match exactly the ids, and a real deltalake DELETE
of 30,000 scattered and consecutive ids completes (in a child process: a crash fails the test)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, write_deltalake

from simjoin.spark import delta


def _matches(conds, values):
    import duckdb

    con = duckdb.connect()
    con.register("t", pa.table({"batch_id": pa.array(values, pa.int64())}))
    hit = set()
    for c in conds:
        hit |= set(con.sql(f"SELECT batch_id FROM t WHERE {c}").fetchnumpy()["batch_id"].tolist())
    return hit


@pytest.mark.parametrize("ids", [[], [5], [1, 2, 3], [1, 3, 5, 6, 7, 10],
                                 list(range(0, 5000, 2)) + list(range(6000, 9000))])
def test_conditions_match_exactly_the_ids(ids):
    conds = delta.id_conditions("batch_id", ids)
    assert all(c.count(",") + c.count(" OR ") < delta.MAX_ID_TERMS for c in conds)
    assert _matches(conds, np.arange(-2, 9100)) == set(ids)


def test_a_delete_of_thirty_thousand_ids_completes(tmp_path):
    p = str(tmp_path / "t")
    write_deltalake(p, pa.table({"batch_id": pa.array(np.arange(40_000), pa.int64())}))
    gone = np.r_[np.arange(0, 20_000, 2), np.arange(20_000, 40_000)[np.random.default_rng(1).random(20_000) < 0.5]]
    code = ("import sys, json; from deltalake import DeltaTable; "
            "[DeltaTable(sys.argv[1]).delete(c) for c in json.loads(sys.stdin.read())]")
    r = subprocess.run([sys.executable, "-c", code, p], input=__import__("json").dumps(
        delta.id_conditions("batch_id", gone.tolist())), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-1000:]
    left = DeltaTable(p).to_pyarrow_table().column("batch_id")
    assert pc.count(left).as_py() == 40_000 - len(gone)
    assert set(left.to_pylist()).isdisjoint(gone.tolist())
