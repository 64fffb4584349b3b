"""cachesync: keep Redis consistent with MySQL. The operator and application surface."""

__version__ = "0.1.0"
