"""Pipeline stages. Each module's ``run(spark, cfg, ...)`` reads Delta, calls ``simjoin.spark``
and writes Delta. Nothing else lives here."""
