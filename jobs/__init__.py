"""One package per pipeline (``jobs/<name>/``): its spec (``spec.py``) and its stages, each
``run(spark, run) -> dict``: reads Delta, calls ``simjoin.spark``, writes Delta. Tools that are
not stages live in ``jobs/tools``."""
