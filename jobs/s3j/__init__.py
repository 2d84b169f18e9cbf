"""simjoin s3j: the S3J streaming metric-space similarity join (Siachamis et al., DEBS'23) on the
micro-batch engine: ingest -> partition -> worksets -> join -> gate -> stats -> publish. The spec is
in ``spec.py``; each stage module has ``run(ctx)``."""
