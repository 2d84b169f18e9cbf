"""Benchmark: the q-gram tokenizer against the word tokenizer (``simjoin.operators.tokenizer.tokenize``, issue 16).

One Arrow batch of 200,000 records per workload, the same batch for every tokenizer; each time is the best of 3
calls of ``tokenize(batch, qgram)`` in this process, after one untimed warm-up call each (which loads or compiles
the numba kernel). The calls go round-robin (word, q=2, q=3, q=4, word, ...) so that load from other processes
hits all of them alike. Goal: q-grams (q = 2, 3, 4) at most 3x the word tokenizer's time on the same text.

Workloads:

* **words**: the text of ``simjoin generate sets`` (``datagen.gen_sets``), drawn here the same way but on its
  own: Poisson(12) (at least 1) space-separated tokens ``w<rank>`` per record, rank Zipf(1) over 20,000; ASCII.
* **natural**: about 12 words per record drawn (Zipf) from a made-up 30,000-word vocabulary: Latin-script words,
  a fifth of them with accented letters (é, ü, ß, ñ, ...), 4% Greek, 2% Cyrillic, 1% CJK, 0.5% emoji; mixed
  case (capitalized and upper-case words), punctuation, now and then a tab or a double space.
* **cjk** (not part of the goal): natural records in which every word is 1-4 CJK characters (3 bytes each).
  From q = 3 on every gram has more than 8 bytes: its uint64 key holds only its first 8 bytes, and grams with
  equal keys compare their other bytes.

Writes bench/results/tokenizer.md.

    .venv/bin/python bench/tokenizer.py [--rows 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import itertools
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

from simjoin.operators.tokenizer import tokenize  # noqa: E402  # noqa: E402  # noqa: E402  # noqa: E402  # noqa: E402  # noqa: E402  # noqa: E402  # noqa: E402

GOAL = 3.0
QS = (2, 3, 4)
LATIN = "abcdefghijklmnopqrstuvwxyz"
ACCENTED = "éèêàâçôûüöäßñíóúåøæœ"
GREEK = "αβγδεζηθικλμνξοπρστυφχψω"
CYRILLIC = "абвгдежзийклмнопрстуфхцчшщыэюя"
CJK = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]
EMOJI = [chr(c) for c in range(0x1F600, 0x1F650)]


def _zipf_cdf(domain: int, alpha: float = 1.0) -> np.ndarray:
    p = 1.0 / np.arange(1, domain + 1) ** alpha
    return np.cumsum(p / p.sum())


def _zipf(rng: np.random.Generator, cdf: np.ndarray, size: int) -> np.ndarray:
    return np.minimum(np.searchsorted(cdf, rng.random(size)), len(cdf) - 1)


def words_text(rows: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    lengths = np.maximum(1, rng.poisson(12, rows))
    ranks = _zipf(rng, _zipf_cdf(20_000), int(lengths.sum())) + 1
    offs = np.concatenate([[0], np.cumsum(lengths)])
    tokens = np.char.add("w", ranks.astype(str)).tolist()
    return [" ".join(tokens[s:e]) for s, e in itertools.pairwise(offs.tolist())]


def _vocabulary(rng: np.random.Generator, size: int, cjk_only: bool) -> list[str]:
    def pick(alphabet: str | list[str], k: int) -> str:
        return "".join(alphabet[i] for i in rng.integers(0, len(alphabet), k))

    vocab = []
    for _ in range(size):
        if cjk_only:
            vocab.append(pick(CJK, int(rng.integers(1, 5))))
            continue
        u = rng.random()
        k = int(rng.integers(2, 11))
        if u < 0.04:
            w = pick(GREEK, k)
        elif u < 0.06:
            w = pick(CYRILLIC, k)
        elif u < 0.07:
            w = pick(CJK, int(rng.integers(1, 4)))
        elif u < 0.075:
            w = pick(EMOJI, int(rng.integers(1, 3)))
        else:
            letters = list(pick(LATIN, k))
            if u < 0.275:  # a fifth of the Latin words have one or two accented letters
                for i in rng.integers(0, k, int(rng.integers(1, 3))):
                    letters[i] = ACCENTED[int(rng.integers(0, len(ACCENTED)))]
            w = "".join(letters)
        case = rng.random()
        vocab.append(w.capitalize() if case < 0.15 else w.upper() if case < 0.18 else w)
    return vocab


def natural_text(rows: int, seed: int, cjk_only: bool = False) -> list[str]:
    rng = np.random.default_rng(seed)
    vocab = np.array(_vocabulary(rng, 30_000, cjk_only), dtype=object)
    lengths = np.maximum(1, rng.poisson(12, rows))
    words = vocab[_zipf(rng, _zipf_cdf(len(vocab)), int(lengths.sum()))]
    seps = np.array([" "] * 90 + [", ", ". ", "  ", "\t", " - ", "; "] * 2, dtype=object)
    sep = seps[rng.integers(0, len(seps), len(words))]
    offs = np.concatenate([[0], np.cumsum(lengths)])
    return ["".join(a + b for a, b in zip(words[s:e], sep[s:e])).rstrip() for s, e in itertools.pairwise(offs.tolist())]


def best_of(repeat: int, calls: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Best wall time of each call over ``repeat`` round-robin rounds, after one untimed warm-up round."""
    for fn in calls.values():
        fn()  # warm-up: the numba kernel loaded from its cache (or compiled)
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(repeat):
        for name, fn in calls.items():
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "tokenizer.md")
    args = ap.parse_args()

    load0 = os.getloadavg()[0]
    workloads = {"words": words_text(args.rows, seed=7), "natural": natural_text(args.rows, seed=7),
                 "cjk": natural_text(args.rows, seed=8, cjk_only=True)}
    lines = []
    results = {}
    for name, rows in workloads.items():
        batch = pa.array(rows, pa.string())
        nbytes = int(pc.sum(pc.binary_length(batch)).as_py())
        nchar = int(pc.sum(pc.utf8_length(batch)).as_py())
        qgrams: list[int | None] = [None, *QS]
        times = best_of(args.repeat, {str(q): functools.partial(tokenize, batch, q) for q in qgrams})
        row = {("word" if q is None else f"q={q}"): (times[str(q)], int(pc.sum(pc.list_value_length(
            tokenize(batch, q))).as_py())) for q in qgrams}
        word_s = row["word"][0]
        results[name] = row
        print(f"{name}: {len(rows):,} records, {nbytes / len(rows):.1f} bytes / {nchar / len(rows):.1f} chars each; "
              + ", ".join(f"{k} {v[0]:.3f}s ({v[0] / word_s:.2f}x)" for k, v in row.items()), flush=True)
        lines.append((name, len(rows), nbytes, nchar))

    md = [
        "# Tokenizer: q-grams vs words (`simjoin.operators.tokenizer.tokenize`, issue 16)",
        "",
        f"Run {dt.date.today().isoformat()} on this machine ({os.cpu_count()} cores, Python "
        f"{platform.python_version()}, pyarrow {pa.__version__}, numpy {np.__version__}; 1-minute load average "
        f"{load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end: other processes share the machine). "
        "Command: `.venv/bin/python bench/tokenizer.py`"
        + (f" `--rows {args.rows}`" if args.rows != 200_000 else "") + ".",
        "",
        f"Measured: wall time of one `tokenize(batch, qgram)` call on one Arrow batch of {args.rows:,} records, "
        f"best of {args.repeat} after one untimed warm-up call (calls round-robin over the tokenizers, so that "
        "load from other processes hits them alike), single-threaded, the same batch for the word tokenizer "
        "(`qgram=None`) and for q = 2, 3, 4. Ratio = q-gram time / word time on the same batch. "
        f"**Goal: ratio <= {GOAL:g}x** for q = 2, 3, 4 on realistic text (words, natural); the cjk rows (every "
        "gram of more than 8 bytes from q = 3 on, so beyond its packed uint64 key) are extra, not part of the "
        "goal. Tokens = distinct tokens per record, summed over the batch.",
        "",
        "Workloads: **words** = `simjoin generate sets` style text (Poisson(12) tokens `w<rank>` per record, "
        "rank Zipf(1) over 20,000; ASCII); "
        "**natural** = about 12 Zipf-drawn words per record from a made-up vocabulary: Latin words, a fifth with "
        "accents, 4% Greek, 2% Cyrillic, 1% CJK, 0.5% emoji, mixed case, punctuation; **cjk** = words of 1-4 CJK "
        "characters only.",
        "",
        "| workload | bytes / record | chars / record | tokenizer | seconds | tokens | ratio to word | goal met |",
        "|:--|---:|---:|:--|---:|---:|---:|:-:|",
    ]
    for name, n, nbytes, nchar in lines:
        row = results[name]
        word_s = row["word"][0]
        for k, (s, ntok) in row.items():
            ratio = s / word_s
            met = "" if k == "word" else ("n/a" if name == "cjk" else ("yes" if ratio <= GOAL else "**no**"))
            md.append(f"| {name} | {nbytes / n:.1f} | {nchar / n:.1f} | {k if k == 'word' else 'qgram ' + k} "
                      f"| {s:.3f} | {ntok:,} | {ratio:.2f}x | {met} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(md) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
