"""Each family's stage functions on Arrow data: what a stage's tasks run on either executor, over
the pure algorithms of :mod:`simjoin.core` (docs/architecture.md, "Layers"). No pyspark."""
