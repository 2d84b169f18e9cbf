"""The vectorized Arrow tokenizers equal Python's own per-string definition, row for row."""

import random

import pyarrow as pa
import pytest

from simjoin.spark.tokenizer import tokenize


def _reference(text, q):
    if text is None:
        return []
    t = text.lower()
    if q is None:
        return sorted(set(t.split()))
    if not t:
        return []
    return sorted({t[i:i + q] for i in range(max(len(t) - q + 1, 1))})


def _texts(n, seed):
    rng = random.Random(seed)
    alphabet = ["a", "b", "c", "A", "ä", "ß", "€", "😀", " ", "  ", "\t", "\n", "\u00a0", "\u2003", "x"]
    rows = [None, "", " ", "a", "ab", "A a A", "😀😀😀😀", "tab\tsep\nnew line", "ÄÖÜ äöü"]
    rows += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20))) for _ in range(n)]
    return rows


@pytest.mark.parametrize("q", [None, 1, 2, 3, 5])
def test_tokenize_matches_python(q):
    rows = _texts(2000, seed=q or 0)
    got = [sorted(x) for x in tokenize(pa.array(rows, pa.string()), q).to_pylist()]
    assert got == [_reference(t, q) for t in rows]


@pytest.mark.parametrize("q", [None, 3])
def test_tokenize_sliced_and_chunked_input(q):
    rows = _texts(500, seed=11)
    arr = pa.array(rows, pa.string())
    sliced = arr.slice(7, 300)
    assert [sorted(x) for x in tokenize(sliced, q).to_pylist()] == [_reference(t, q) for t in rows[7:307]]
    chunked = pa.chunked_array([arr.slice(0, 100), arr.slice(100)])
    assert [sorted(x) for x in tokenize(chunked, q).to_pylist()] == [_reference(t, q) for t in rows]


def test_tokens_are_distinct_per_record_and_strings_shorter_than_q_are_one_token():
    out = tokenize(pa.array(["b a b a", "ab", "", None, "abcabc"]), 3).to_pylist()
    assert sorted(out[0]) == sorted(["b a", " a ", "a b", " b "])
    assert out[1] == ["ab"] and out[2] == [] and out[3] == []
    assert sorted(out[4]) == ["abc", "bca", "cab"]
    words = tokenize(pa.array(["The the THE cat", "   ", None]), None).to_pylist()
    assert sorted(words[0]) == ["cat", "the"] and words[1] == [] and words[2] == []


def test_empty_batch():
    assert tokenize(pa.array([], pa.string()), None).to_pylist() == []
    assert tokenize(pa.array([], pa.string()), 2).to_pylist() == []
