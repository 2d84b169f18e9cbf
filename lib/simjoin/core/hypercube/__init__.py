"""Streaming HyperCube (Qiu, Papadias & Yi, EDBT'19): skew-resilient equi-joins over streams.

* ``sketch``: the Misra-Gries heavy-hitter summary (mergeable, +-eps N).
* ``dispatch``: heavy/light classification, per-key grids, the factor-2 resizing rule, task -> worker.
* ``route``: each tuple's copies (task, worker); migration volume; loads (ours and PHJ's).
* ``join``: the per-task local hash join (numba).
* ``stream``: the micro-batch steps composed, in one process.
* ``bruteforce``: the plain equi-join reference.
"""
