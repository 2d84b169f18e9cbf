"""simjoin ssj: exact set-similarity join (Fier & Freytag) - tokenize -> gate -> optimize -> join
-> gate -> publish. The spec is in ``spec.py``; each stage module has ``run(ctx)``."""
