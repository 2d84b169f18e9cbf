"""The generate tool's config: ``simjoin generate`` options, the DAG's Params, ``conf/generate.yaml``."""

from __future__ import annotations

from dataclasses import dataclass

from simjoin.config import check, check_fields, param

__all__ = ["GenerateConfig"]


@dataclass(frozen=True)
class GenerateConfig:
    kind: str = param("vectors", "What to generate.", choices=("sets", "vectors", "ineq", "keys", "aqi"),
                      flag="", by_choice={
                          "sets": {"help": "Token sets for simjoin ssj: id long, text string (space-separated "
                                           "Zipf tokens, with planted near-duplicates)."},
                          "vectors": {"help": "A vector stream for simjoin s3j: id long, ts timestamp, vector "
                                              "array<double> (optionally drifting with ts)."},
                          "ineq": {"help": "A stream for simjoin ineq: id long, ts timestamp, a double, b double."},
                          "keys": {"help": "A Zipf-keyed stream for simjoin hypercube: id long, ts timestamp, "
                                           "k long, payload string."},
                          "aqi": {"help": "Air-quality station readings for simjoin s2j: id long, ts timestamp, "
                                          "station long, pm25 double, pm10 double."}})
    out: str | None = param(None, "Delta table path to write (a path that holds a table only with --overwrite).",
                            io=True, required=True, dag_default="{warehouse}/generated/vectors")
    overwrite: bool = param(False, "Replace the Delta table already at --out (without it, an existing table is "
                                   "refused).")
    rows: int = param(10000, "Number of records.", ge=0, le=1_000_000_000)
    seed: int = param(42, "Random seed (same seed, same table).", ge=0)
    dim: int = param(8, "Vector dimension.", ge=1, le=4096, by_choice={"vectors": {}})
    dist: str = param("uniform", "Distribution (vectors: uniform, gaussian, skewed, pareto, clustered; "
                                 "ineq: uniform, pareto, or correlated: b = a + N(0, 2); sets: uniform, dup_frac of "
                                 "the records are copies of scattered earlier records, or near-duplicates, "
                                 "candidate skew: they are copies of 65,536 global cluster seeds, cluster sizes "
                                 "Zipf(0.8) capped at 1.2%, every 1M rows with its own clusters; per 1M rows the "
                                 "largest hold 3,000 records, about 27M pairs at θ 0.6, growing linearly).",
                      choices=("uniform", "gaussian", "skewed", "pareto", "clustered", "correlated",
                               "near-duplicates"),
                      by_choice={"vectors": {"help": "Distribution of the vectors.",
                                             "choices": ("uniform", "gaussian", "skewed", "pareto", "clustered")},
                                 "ineq": {"help": "Distribution of a and b (correlated: b = a + N(0, 2)).",
                                          "choices": ("uniform", "pareto", "correlated")},
                                 "sets": {"help": "uniform: dup_frac of the records are copies of scattered "
                                                  "earlier records; near-duplicates: candidate skew, copies of "
                                                  "65,536 global cluster seeds, cluster sizes Zipf(0.8) capped at "
                                                  "1.2% (per 1M rows about 27M pairs at θ 0.6).",
                                          "choices": ("uniform", "near-duplicates")}})
    rate: float = param(100.0, "Rows per second of ts.", gt=0,
                        by_choice={"vectors": {}, "ineq": {}, "keys": {}, "aqi": {}})
    alpha: float = param(1.2, "Zipf exponent of the key distribution (0: uniform).", ge=0, le=10,
                         by_choice={"keys": {}})
    domain: int = param(1000, "Number of distinct keys K (aqi: stations).", ge=1,
                        by_choice={"keys": {"help": "Number of distinct keys K."},
                                   "aqi": {"help": "Number of stations."}})
    drift: str = param("none", "Vectors whose distribution moves with ts, one step per drift period: "
                               "wander (80% in a Gaussian cluster, sd 0.08, whose centre moves 0.35 per "
                               "period across [-0.7, 0.7]^dim; the rest from dist) or skew (dist for "
                               "drift_after periods, then 90% in one small blob, sd 0.05).",
                       choices=("none", "wander", "skew"), by_choice={"vectors": {}})
    drift_period: str = param("60s", "Length of a drift period on ts, e.g. 60s (use the join's window).",
                              duration=True, by_choice={"vectors": {}})
    drift_after: int = param(2, "skew: number of drift periods of dist before it turns skewed.", ge=0,
                             by_choice={"vectors": {}})
    lengths: str = param("zipf", "sets: record lengths: zipf (Poisson(12), at least 1), aol (like the AOL query "
                                 "log: 80% of 1-4 tokens, a tail up to 30; tokens Zipf(0.7) over 1M words) or "
                                 "long (100-300 tokens, like ENRON; over 200,000 words).",
                         choices=("zipf", "aol", "long"), by_choice={"sets": {}})
    dup_frac: float = param(0.25, "sets: share of the records that are near-duplicates (copies with about 1/8 of "
                                  "their tokens replaced).", ge=0, le=1,
                              by_choice={"sets": {}})
    universe: int = param(20_000, "sets: number of distinct tokens the Zipf law draws from (aol: at least 1M, "
                                  "long: at least 200,000). Real vocabularies grow with the records (Heaps' law): "
                                  "about rows / 10 keeps a large table realistic.", ge=1, le=1_000_000_000,
                        by_choice={"sets": {}})

    def __post_init__(self) -> None:
        check_fields(self, "generate")
        check(self.drift == "none" or self.kind == "vectors", "generate", "drift", self.drift,
              f"none for kind {self.kind} (wander and skew only for vectors)")
        check(self.lengths == "zipf" or self.kind == "sets", "generate", "lengths", self.lengths,
              f"zipf for kind {self.kind} (aol and long only for sets)")
        check(self.dup_frac == 0.25 or self.kind == "sets", "generate", "dup_frac", self.dup_frac,
              f"0.25 for kind {self.kind} (other values only for sets)")
        check(self.universe == 20_000 or self.kind == "sets", "generate", "universe", self.universe,
              f"20000 for kind {self.kind} (other values only for sets)")
        if self.kind == "ineq":
            check(self.dist in ("uniform", "pareto", "correlated"), "generate", "dist", self.dist,
                  "uniform, pareto or correlated for ineq")
        elif self.kind == "sets":
            check(self.dist in ("uniform", "near-duplicates"), "generate", "dist", self.dist,
                  "uniform or near-duplicates for sets")
        else:
            check(self.dist != "correlated", "generate", "dist", self.dist, "correlated only for ineq")
            check(self.dist != "near-duplicates", "generate", "dist", self.dist, "near-duplicates only for sets")
