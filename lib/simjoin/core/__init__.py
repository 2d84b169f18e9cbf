"""Pure algorithm kernels (numpy/numba only; no pyspark, no airflow).

One subpackage per join family; see docs/architecture.md for the papers they implement.
"""
