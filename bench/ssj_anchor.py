"""Anchor runs of ``bench/ssj.py``, each in its own process so that a run over its time cap is killed,
never extrapolated.

    python bench/ssj_anchor.py sss --input DELTA --theta 0.8 --cap 1800 --out PREFIX
    python bench/ssj_anchor.py minhash --input DELTA --theta 0.8 --tables 3 --cap 1800 --out PREFIX

Each reads the input Delta table (id, text) first, untimed, then arms a real-time timer of ``--cap``
seconds: when it fires the process exits at once with status 3 (TIMED_OUT) and writes nothing. A run
within the cap writes ``PREFIX.npy`` (an (P, 2) int64 array of the pairs as (min id, max id)) and
``PREFIX.json`` (its measured seconds and counts).

- ``sss``: SetSimilaritySearch.all_pairs (exact, single-threaded, Jaccard), after tokenizing like
  simjoin's word tokenizer (lower-case, split on whitespace, distinct tokens). Timed: tokenize + join.
- ``minhash``: Spark ML MinHashLSH (approximate) on a local[2] SparkSession with an 8 GiB driver:
  tokens (lower-case, split on whitespace, distinct, empty ones dropped), HashingTF(binary,
  2^20 features) or CountVectorizer(binary), records with no token dropped, MinHashLSH with
  ``--tables`` hash tables, approxSimilarityJoin of the table with itself at Jaccard distance
  1 - θ, pairs id_a < id_b collected. Timed: tokenize + vectorize + fit + join + collect (not the
  session start nor loading the input into Spark).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import numpy as np

TIMED_OUT = 3


def arm(cap: float) -> None:
    """Exit with TIMED_OUT once ``cap`` seconds have passed from now."""

    def fire(signum, frame):
        os._exit(TIMED_OUT)

    signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, max(cap, 1e-6))


def disarm() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)


def save(prefix: str, pairs: np.ndarray, info: dict) -> None:
    np.save(prefix + ".npy", pairs.astype(np.int64).reshape(-1, 2))
    with open(prefix + ".json", "w") as f:
        json.dump(info, f)


def read_input(path: str):
    from deltalake import DeltaTable

    return DeltaTable(path).to_pyarrow_table(columns=["id", "text"])


def run_sss(a: argparse.Namespace) -> None:
    from SetSimilaritySearch import all_pairs

    t = read_input(a.input)
    ids = t.column("id").to_numpy()
    texts = t.column("text").to_pylist()
    del t
    arm(a.cap)
    t0 = time.perf_counter()
    sets = [sorted(set((x or "").lower().split())) for x in texts]
    t1 = time.perf_counter()
    left, right = [], []
    for x, y, _ in all_pairs(sets, similarity_func_name="jaccard", similarity_threshold=a.theta):
        left.append(x)
        right.append(y)
    t2 = time.perf_counter()
    disarm()
    lx, rx = ids[np.asarray(left, dtype=np.int64)], ids[np.asarray(right, dtype=np.int64)]
    pairs = np.stack([np.minimum(lx, rx), np.maximum(lx, rx)], axis=1)
    save(a.out, pairs, {"seconds": t2 - t0, "tokenize_seconds": t1 - t0, "join_seconds": t2 - t1,
                        "pairs": len(pairs), "records": len(ids)})


def run_minhash(a: argparse.Namespace) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.ml.feature import CountVectorizer, HashingTF, MinHashLSH
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    t_start = time.perf_counter()
    spark = (SparkSession.builder.master("local[2]").appName("ssj-bench-minhash")
             .config("spark.driver.memory", "8g")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "8")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    pdf = read_input(a.input).to_pandas()
    df = spark.createDataFrame(pdf).cache()
    records = df.count()
    del pdf
    setup_s = time.perf_counter() - t_start

    arm(a.cap)
    t0 = time.perf_counter()
    toks = (df.select("id", F.filter(F.array_distinct(F.split(F.lower(F.col("text")), r"\s+")),
                                     lambda x: x != "").alias("tokens"))
            .where(F.size("tokens") > 0))
    if a.vectorizer == "count":
        vec_model = CountVectorizer(inputCol="tokens", outputCol="features", binary=True,
                                    vocabSize=1 << 24, minDF=1.0).fit(toks)
        vec = vec_model.transform(toks)
    else:
        vec = HashingTF(inputCol="tokens", outputCol="features", binary=True,
                        numFeatures=a.num_features).transform(toks)
    vec = vec.select("id", "features").cache()
    model = MinHashLSH(inputCol="features", outputCol="hashes", numHashTables=a.tables, seed=a.seed).fit(vec)
    dist = 1.0 - a.theta + 1e-9  # Spark keeps distance < threshold: a pair at exactly θ must stay
    joined = (model.approxSimilarityJoin(vec, vec, dist, distCol="d")
              .select(F.col("datasetA.id").alias("a"), F.col("datasetB.id").alias("b"), "d")
              .where((F.col("a") < F.col("b")) & (F.col("d") <= dist)))
    got = joined.select("a", "b").toPandas()
    t1 = time.perf_counter()
    disarm()
    pairs = np.stack([got["a"].to_numpy(np.int64), got["b"].to_numpy(np.int64)], axis=1)
    save(a.out, pairs, {"seconds": t1 - t0, "setup_seconds": setup_s, "pairs": len(pairs), "records": records,
                        "tables": a.tables, "vectorizer": a.vectorizer, "num_features": a.num_features})
    spark.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("sss", "minhash"):
        p = sub.add_parser(name)
        p.add_argument("--input", required=True)
        p.add_argument("--theta", type=float, required=True)
        p.add_argument("--cap", type=float, required=True)
        p.add_argument("--out", required=True, help="output prefix: PREFIX.npy and PREFIX.json")
        if name == "minhash":
            p.add_argument("--tables", type=int, default=3)
            p.add_argument("--seed", type=int, default=7)
            p.add_argument("--vectorizer", choices=("hashing", "count"), default="hashing")
            p.add_argument("--num-features", type=int, default=1 << 20)
    a = ap.parse_args()
    (run_sss if a.cmd == "sss" else run_minhash)(a)


if __name__ == "__main__":
    main()
