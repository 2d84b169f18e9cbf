"""Delta Lake I/O without Spark: ``deltalake`` (delta-rs) reads, writes and commits, and the direct
reader of a stream's Delta log (docs/architecture.md, "Layers"). No pyspark."""
