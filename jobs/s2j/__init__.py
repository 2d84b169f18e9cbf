"""The S2J general stream join operator (Wang et al.): ``simjoin s2j`` and the ``simjoin_s2j`` DAG."""
