"""Stage 1: tokenize + length statistics. Bad rows (null/empty text, no tokens, null or duplicate
id) go to the quarantine table with a reason; good rows become integer-token records."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.ssj_common import SSJRun
from simjoin.log import get_logger, stage
from simjoin.quality import quarantine as q
from simjoin.spark import delta
from simjoin.spark import setsim as S

log = get_logger("simjoin.ssj")


def run(spark: SparkSession, job: SSJRun) -> dict[str, int]:
    return tokenize(spark, job)[0]


def tokenize(spark: SparkSession, job: SSJRun, keep: bool = False) -> tuple[dict[str, int], DataFrame | None, list]:
    """Write the tokens, lengths and quarantine tables. With ``keep`` also return the records
    (persisted) and the length statistics rows, so a single-process run need not read them back."""
    with stage("ssj tokenize", log):
        cfg = job.cfg
        sides = [(0, job.input)] + ([(1, job.right)] if job.right else [])
        good, bad, n_in = None, None, 0
        for side, path in sides:
            df = delta.read_table(spark, path)
            S.check_input_columns(df, cfg.id_col, cfg.text_col, f"input {path}")
            res = q.split_quarantine(S.select_input(df, cfg.id_col, cfg.text_col, side), S.input_rules(cfg.qgram),
                                     id_col="id", table=path)
            n_in += res.n_in
            good = res.good if good is None else good.unionByName(res.good)
            bad = res.bad if bad is None else bad.unionByName(res.bad)
        assert good is not None and bad is not None
        q.write_quarantine(q.QuarantineResult(good, bad, n_in, 0, 0), job.output, job.run_id, "tokenize")
        records, lengths = S.canonicalize(S.tokenize(good, cfg.qgram))
        records = records.persist()  # written, then counted into the length statistics: compute once
        delta.overwrite_partition(records.withColumn("run_id", F.lit(job.run_id)), job.tables.tokens, job.part)
        delta.overwrite_partition(lengths.withColumn("run_id", F.lit(job.run_id)), job.tables.lengths, job.part)
        n_records = records.count()
        length_rows = lengths.collect() if keep else []
        if not keep:
            records.unpersist()
        n_bad = n_in - n_records
        log.info("ssj tokenize: %d records in, %d tokenized, %d quarantined", n_in, n_records, n_bad)
        stats = {"records_in": n_in, "records": n_records, "quarantined": n_bad}
        return stats, (records if keep else None), length_rows
