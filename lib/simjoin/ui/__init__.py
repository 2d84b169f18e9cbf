"""The simjoin Airflow plugin: every output a run wrote, inspected from the Airflow UI.

- :mod:`simjoin.ui.data` reads the warehouse's Delta tables with ``deltalake`` (no Spark), each
  read bounded by a page or a limit;
- :mod:`simjoin.ui.pages` renders them as HTML, every value escaped;
- :mod:`simjoin.ui.plugin` serves the pages from a FastAPI app on Airflow's API server, behind
  Airflow's own authentication, and adds them to the UI (``external_views``).
"""
