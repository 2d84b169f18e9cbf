"""The tokenize step's partition functions, without Spark: the profile of a partition and its
encoding agree with a per-row reference."""

import numpy as np
import pyarrow as pa
import pytest

from simjoin.operators import setsim as O

TEXTS = ["b a c", "a a b", None, "   ", "c", "d e f g", "B A", "", "x y", "a", "q r s t u v w x y z", "a b"]
IDS = [5, 3, 9, None, 7, 1, 2, 4, 8, 6, 10, 11]


def _batches(n=5):
    side = np.array([0] * 7 + [1] * 5, np.int32)
    t = pa.table({"side": side, "id": pa.array(IDS, pa.int64()), "text": pa.array(TEXTS, pa.string())})
    return [b for b in t.to_batches(max_chunksize=n)]


def _reason(i, text):
    out = []
    if i is None:
        out.append("null id")
    if text is None:
        out.append("null text")
    elif not text.strip():
        out.append("empty text")
    return "; ".join(out)


def _partition():
    return O.from_text(iter(_batches()), None, 0)


def _run():
    p = _partition()
    prof, overlap = O.summarize_profile(pa.Table.from_batches(list(O.profile_partition(p))))
    out = pa.Table.from_batches(list(O.encode_partition(p, prof.dictionary, prof.rid_base)))
    return prof, overlap, out


def test_profile_and_encode_of_one_partition():
    prof, overlap, out = _run()
    good = [(s, i, t) for s, i, t in zip([0] * 7 + [1] * 5, IDS, TEXTS) if not _reason(i, t)]
    assert prof.good == len(good) and prof.bad == len(TEXTS) - len(good) and not overlap and not prof.duplicates
    # token ids by ascending frequency, ties by text
    words = [w for _, _, t in good for w in set(t.lower().split())]
    freq = {w: words.count(w) for w in words}
    assert prof.dictionary.to_pylist() == sorted(freq, key=lambda w: (freq[w], w))
    rec = out.filter(pa.compute.equal(out.column("reason"), "")).to_pylist()
    d = prof.dictionary.to_pylist()
    assert sorted(r["rid"] for r in rec) == list(range(len(good)))
    by_rid = sorted(rec, key=lambda r: r["rid"])
    assert [r["length"] for r in by_rid] == sorted(r["length"] for r in rec)  # rids in length order
    for r in rec:
        assert r["tokens"] == sorted(r["tokens"]) and r["length"] == len(r["tokens"]) and r["text"] is None
        text = next(t for s, i, t in good if (s, i) == (r["side"], r["id"]))
        assert sorted(d[k] for k in r["tokens"]) == sorted(set(text.lower().split()))
    bad = out.filter(pa.compute.not_equal(out.column("reason"), "")).to_pylist()
    assert sorted((r["id"], r["text"], r["reason"]) for r in bad if r["id"] is not None) == [
        (4, "", "empty text"), (9, None, "null text")]
    assert [r["reason"] for r in bad if r["id"] is None] == ["null id; empty text"]
    assert all(r["rid"] is None and r["tokens"] is None for r in bad)


def test_encode_refuses_a_partition_that_changed_since_its_profile():
    prof, _, _ = _run()
    lengths, first, counts = prof.rid_base[0]
    wrong = {0: (lengths, first, counts + np.eye(1, counts.size, 0, dtype=np.int64)[0])}
    with pytest.raises(RuntimeError, match="partition 0 holds other records than when it was profiled"):
        list(O.encode_partition(_partition(), prof.dictionary, wrong))
