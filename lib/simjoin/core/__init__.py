"""Pure algorithm kernels (numpy/numba only; no pyspark, no airflow).

One subpackage per join family; see DESIGN.md for the papers they implement.
"""
