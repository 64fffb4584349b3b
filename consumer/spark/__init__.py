"""The Spark engine: the same consumer core and adapters, run per partition by PySpark.

pyspark is imported only inside this package (``session``, ``stream``, ``replay``,
``audit``); ``records`` and ``applier`` are plain Python and run inside Spark's
Python workers.
"""

# Records per micro-batch while the query catches up (a backlog after a restart, or
# --trigger availableNow). A micro-batch pays a fixed cost whatever it holds (Spark's offsets
# and commit written to the checkpoint, planning, one job, each task's start, its first
# Kafka fetch): with one executor core, 20,000-record batches consumed at 0.78x the python
# engine's keys/s, 100,000-record ones at 0.94x (bench spark_cluster, docs/spark.md).
# Tasks stream their records in chunks of consumer.batch_size, so a larger batch costs the
# executors no memory; what grows is the driver's result per batch (the lag samples and
# the plans of delayed second deletes) and what a crash makes the next run skip again
# as duplicates. At the head of the topic a micro-batch holds what arrived in one trigger
# interval, far below it.
DEFAULT_MAX_OFFSETS = 100_000
