"""The vectorized Arrow tokenizers equal Python's own per-string definition, row for row."""

import random

import numpy as np
import pyarrow as pa
import pytest

from simjoin.operators.tokenizer import sort_within, token_codes, tokenize


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


# Property test of the q-gram path against plain Python. Arrow lower-cases with the simple (one code point to
# one) Unicode mapping, Python with the full one, so 'İ' (-> 'i̇' in Python) and a final 'Σ' (-> 'ς') are left
# out; every other character here lower-cases alike in both, some to a different UTF-8 length:
# 'ẞ' (3 bytes) -> 'ß' (2), 'Ⱥ' (2) -> 'ⱥ' (3), Kelvin 'K' (3) -> 'k' (1), Ohm 'Ω' (3) -> 'ω' (2).
_PIECES = [
    "a", "b", "A", "B", "z", "0", "ab", "abc", "ABA", " ", "  ", "\t", "\n", "\u00a0", "\u2003", "\x00",
    "é", "É", "ß", "ẞ", "Ⱥ", "\u212a", "\u2126", "ä", "Ä", "ö", "ñ", "α", "Β", "γδ", "λόγος", "ς", "Ж", "ж",
    "東", "京", "東京", "語", "😀", "😁", "🎉", "😀😀", "👍🏽",
]
_ALPHABETS = {
    "ascii": ["a", "b", "c", "A", "B", " ", "ab", "\t"],
    "mixed": _PIECES,
    "wide": ["東", "京", "語", "😀", "😁", "🎉", "ẞ", "Ⱥ", "a"],  # grams of more than 8 bytes from q = 3
}


def _qgram_reference(text, q):
    """A record's distinct q-grams, the definition: lower-case, every q characters; 1 to q - 1 characters: one."""
    if text is None:
        return []
    t = text.lower()
    if not t:
        return []
    if len(t) < q:
        return [t]
    return sorted({t[i:i + q] for i in range(len(t) - q + 1)})


def _random_rows(n, seed, q):
    rng = random.Random(seed)
    rows = [None, "", "a", "A" * q, "ab" * 8, "東京" * 5, "😀" * 7, " " * q, "x" * (q - 1), "Ⱥẞ" * q]
    for _ in range(n):
        kind = rng.random()
        alphabet = _ALPHABETS[rng.choice(list(_ALPHABETS))]
        if kind < 0.05:
            rows.append(None)
        elif kind < 0.10:
            rows.append("")
        elif kind < 0.25:  # around q characters: shorter than q, exactly q, just longer
            rows.append("".join(rng.choice("aAbé東😀ẞ ") for _ in range(rng.randint(1, q + 1))))
        elif kind < 0.35:  # the same piece over and over: repeated grams
            rows.append(rng.choice(alphabet) * rng.randint(1, 30))
        elif kind < 0.37:  # long records: big per-record hash sets
            rows.append("".join(rng.choice(_PIECES) for _ in range(rng.randint(200, 2000))))
        else:
            rows.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))))
    rows.append("é")  # a record shorter than q last in the batch
    return rows


def _check(arr, rows, q):
    out = tokenize(arr, q)
    assert out.type == pa.list_(pa.string())
    got = out.to_pylist()
    assert len(got) == len(rows)
    for text, toks in zip(rows, got):
        assert sorted(toks) == _qgram_reference(text, q), (text, q)


@pytest.mark.parametrize("q", [1, 2, 3, 4, 5, 6, 8, 9, 12])
def test_qgrams_match_python_on_random_strings(q):
    rows = _random_rows(3000, seed=100 + q, q=q)
    _check(pa.array(rows, pa.string()), rows, q)


@pytest.mark.parametrize("q", [1, 2, 3, 4, 5, 6])
def test_qgrams_of_sliced_chunked_and_large_string_input(q):
    rows = _random_rows(600, seed=200 + q, q=q)
    arr = pa.array(rows, pa.string())
    for start, stop in [(1, 300), (7, len(rows)), (len(rows) - 3, len(rows)), (5, 5)]:
        _check(arr.slice(start, stop - start), rows[start:stop], q)
    _check(pa.chunked_array([arr.slice(0, 100), arr.slice(100, 1), arr.slice(101)]), rows, q)
    _check(pa.chunked_array([], pa.string()), [], q)
    _check(pa.array(rows, pa.large_string()), rows, q)


def test_qgrams_keep_grams_apart_that_pack_alike():
    # Equal first 8 bytes, different later bytes (grams of 12 bytes); a gram and the same bytes plus a NUL;
    # a record's lone short string next to records whose grams it prefixes.
    rows = ["😀😀😁 😀😀😀", "a\x00a", "a", "ab\x00", "ab", "東京語東京都", "\x00\x00\x00"]
    for q in (2, 3):
        _check(pa.array(rows), rows, q)
    out = tokenize(pa.array(["😀😀😀😀😁", "\x00\x00a"]), 3).to_pylist()
    assert sorted(out[0]) == ["😀😀😀", "😀😀😁"] and sorted(out[1]) == ["\x00\x00a"]


@pytest.mark.parametrize("q", [None, 2, 3])
def test_token_codes_are_the_tokens(q):
    """``token_codes``: each record's distinct tokens as codes into one dictionary of the batch."""
    rows = _texts(1500, seed=21 + (q or 0))
    off, dictionary, codes = token_codes(pa.array(rows, pa.string()), q)
    words = dictionary.to_pylist()
    assert len(set(words)) == len(words) and "" not in {words[c] for c in codes}  # unused entries may be there
    got = [sorted(words[c] for c in codes[off[k]:off[k + 1]]) for k in range(len(rows))]
    assert got == [_reference(t, q) for t in rows]


def test_sort_within_sorts_each_record_alone():
    rng = np.random.default_rng(5)
    lengths = rng.integers(0, 80, 300)  # short (insertion sort) and long (> 32) records
    off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    values = rng.integers(0, 50, int(off[-1])).astype(np.int32)
    want = np.concatenate([np.sort(values[off[k]:off[k + 1]]) for k in range(lengths.size)])
    sort_within(off, values)
    assert np.array_equal(values, want)
