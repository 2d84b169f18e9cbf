"""The runtime: what every pipeline's run stands on, without Spark - an output's manifest and its
tables, maintenance, and the executors' protocol with the in-process executor
(docs/architecture.md, "Layers")."""
