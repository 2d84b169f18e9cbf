"""The SPO-Join inequality join pipeline (Aslam et al.): ``simjoin ineq`` and the ``simjoin_ineq`` DAG."""
