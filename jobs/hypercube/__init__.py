"""Streaming HyperCube (Qiu, Papadias & Yi): ``simjoin hypercube`` and the ``simjoin_hypercube`` DAG."""
