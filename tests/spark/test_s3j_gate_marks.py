"""The S3J gate's ``new_record`` marks in the driver (``jobs.s3j.gate.new_record_column``) equal
a set lookup (``simjoin.core.membership``'s compiled search): compact and sparse ids, several
windows, ids outside the staged range, negative ids, no staged rows, self- and two-stream joins."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from jobs.s3j.gate import new_record_column

US = pa.timestamp("us", tz="UTC")


@pytest.mark.parametrize("seed", range(12))
def test_marks_equal_a_set_lookup(seed):
    rng = np.random.default_rng(seed)
    sparse = seed % 3 == 0
    self_join = seed % 2 == 0
    span = (1 << 50) if sparse else 5000
    windows = np.array([0, 60_000_000, 120_000_000])[: 1 + seed % 3]
    n_rec = int(rng.integers(0, 400))
    rec = {"window_start": rng.choice(windows, n_rec), "side": rng.integers(0, 1 if self_join else 2, n_rec),
           "id": rng.integers(-span // 2, span // 2, n_rec)}
    n = int(rng.integers(0, 5000))
    pool = np.concatenate([rec["id"], rng.integers(-span, span, 200)]) if n_rec else rng.integers(-span, span, 200)
    pairs = {"left_id": rng.choice(pool, n), "right_id": rng.choice(pool, n), "window_start": rng.choice(windows, n)}
    records = pa.table({"window_start": pa.array(rec["window_start"]).cast(US),
                        "side": pa.array(rec["side"], pa.int8()), "id": pa.array(rec["id"], pa.int64())})
    table = pa.table({"left_id": pa.array(pairs["left_id"], pa.int64()),
                      "right_id": pa.array(pairs["right_id"], pa.int64()),
                      "window_start": pa.array(pairs["window_start"]).cast(US)})
    staged = set(zip(rec["window_start"].tolist(), rec["side"].tolist(), rec["id"].tolist()))
    right_side = 0 if self_join else 1
    want = [(w, 0, a) in staged or (w, right_side, b) in staged
            for a, b, w in zip(pairs["left_id"].tolist(), pairs["right_id"].tolist(), pairs["window_start"].tolist())]
    assert new_record_column(table, records, self_join).to_pylist() == want
