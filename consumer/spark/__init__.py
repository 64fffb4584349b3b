"""The Spark engine: the same consumer core and adapters, run per partition by PySpark.

pyspark is imported only inside this package (``session``, ``stream``, ``replay``,
``audit``); ``records`` and ``applier`` are plain Python and run inside Spark's
Python workers.
"""
