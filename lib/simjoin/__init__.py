"""simjoin: exact similarity, inequality and skew-resilient joins on Spark + Delta Lake.

Layers (imports flow one way): ``dags -> jobs -> simjoin.spark -> simjoin.core``.
"""

__version__ = "0.1.0"
