"""Spark adapters: the session (with Delta), Delta I/O, and DataFrame -> DataFrame transforms
that run the pure ``simjoin.core`` kernels inside ``mapInArrow`` / ``applyInArrow``."""
