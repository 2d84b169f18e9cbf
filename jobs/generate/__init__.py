"""simjoin_generate: synthetic input tables (sets, vectors, ineq, keys) in Delta."""
