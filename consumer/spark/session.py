"""A lean SparkSession with the devstack's jars (Kafka connector, MariaDB JDBC) on spark.jars."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Mapping

from cachesync.schema.errors import FatalError

JARS_ENV = "CACHESYNC_SPARK_JARS_DIR"
MASTER_ENV = "CACHESYNC_SPARK_MASTER"
EXECUTOR_PYTHON_ENV = "CACHESYNC_SPARK_EXECUTOR_PYTHON"
DEFAULT_MASTER = "local[2]"
DEFAULT_EXECUTOR_PYTHON = "python3"      # on the workers' PATH; cachesync itself is shipped
REPO_ROOT = Path(__file__).resolve().parents[2]

# Defaults only: what spark-submit, spark-defaults.conf or ``conf`` set wins. No UI for a
# sidecar on a small machine; UTC everywhere so that timestamps mean the same on the
# driver, the executors and MySQL. Parallelism is the cluster's (shuffle partitions are
# set to it once the session is up, see _fit_shuffle_partitions).
LEAN_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": "-Duser.timezone=UTC -XX:+UseSerialGC",
    "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
    "spark.sql.streaming.stopTimeout": "60s",
    "spark.python.worker.reuse": "true",
    "spark.ui.showConsoleProgress": "false",
}


def submitted() -> bool:
    """Whether this Python runs as the driver spark-submit launched (it passes the JVM
    gateway's port): then the master, jars, py-files and conf are spark-submit's."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def jars_dir() -> Path:
    """``$CACHESYNC_SPARK_JARS_DIR``, else ``<devstack dir>/spark/jars`` (fetch-jars.sh puts them there)."""
    if os.environ.get(JARS_ENV):
        return Path(os.environ[JARS_ENV])
    devstack = (os.environ.get("DEVSTACK_DIR") or os.environ.get("CACHESYNC_DEVSTACK_DIR")
                or REPO_ROOT / ".devstack")
    return Path(devstack) / "spark" / "jars"


def jar_paths() -> list[str]:
    """Every jar to put on spark.jars; raises FatalError naming the fix when there are none."""
    directory = jars_dir()
    jars = sorted(str(p) for p in directory.glob("*.jar"))
    if not jars:
        raise FatalError(f"no Spark jars in {directory}: run `make install` (or "
                         f"devstack/spark/fetch-jars.sh), or set {JARS_ENV}")
    return jars


@contextlib.contextmanager
def spark_session(app_name: str, master: str | None = None, conf: Mapping[str, str] | None = None,
                  jars: list[str] | None = None) -> Iterator["SparkSession"]:  # noqa: F821
    """The active session if there is one (tests share one), else a new one stopped on exit.

    Under spark-submit the submitted master, jars and py-files are used. Otherwise
    ``master`` (``$CACHESYNC_SPARK_MASTER``, default local[2]); ``jars`` defaults to
    :func:`jar_paths` (raises FatalError when there are none); a cluster master gets
    cachesync shipped to its executors (bundle.py), run by ``$CACHESYNC_SPARK_EXECUTOR_PYTHON``
    (default ``python3`` on the workers).
    """
    from pyspark.sql import SparkSession

    logging.getLogger("py4j").setLevel(logging.WARNING)     # one INFO line per callback

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    builder = SparkSession.builder.appName(app_name)
    ship = False
    if submitted():
        present = _submitted_conf()
        options = {k: v for k, v in {**LEAN_CONF, **(conf or {})}.items()
                   if k not in present or k in (conf or {})}
    else:
        master = master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER
        ship = not is_local(master)
        _set_worker_python(executor_python() if ship else sys.executable)
        builder = builder.master(master)
        options = {**LEAN_CONF, "spark.jars": ",".join(jars or jar_paths()), **(conf or {})}
    for key, value in options.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if ship:
        _ship(spark)
    _fit_shuffle_partitions(spark, conf or {})
    try:
        yield spark
    finally:
        spark.stop()


def executor_python() -> str:
    return os.environ.get(EXECUTOR_PYTHON_ENV) or DEFAULT_EXECUTOR_PYTHON


_chosen: dict[str, str] = {}      # what this module put in PYSPARK_PYTHON last


def _set_worker_python(python: str) -> None:
    """The Python of Spark's Python workers (pyspark reads $PYSPARK_PYTHON when the
    context starts): this interpreter (the venv with cachesync) when they run on this
    machine, the workers' own on a cluster. A value the user exported wins."""
    current = os.environ.get("PYSPARK_PYTHON")
    if current is not None and current != _chosen.get("python"):
        return
    os.environ["PYSPARK_PYTHON"] = _chosen["python"] = python


def bundle_dir() -> Path:
    """Where the executors' zip is built (cached by content)."""
    return Path(tempfile.gettempdir()) / f"cachesync-spark-{os.getuid()}"


def _submitted_conf() -> set[str]:
    """The keys spark-submit (and spark-defaults.conf) already set, read from its JVM."""
    from pyspark import SparkConf, SparkContext
    SparkContext._ensure_initialized()
    return {key for key, _ in SparkConf().getAll()}


def _fit_shuffle_partitions(spark, conf: Mapping[str, str]) -> None:
    """Shuffles (replay's and audit's counts) as wide as the cluster, unless set explicitly:
    Spark's default of 200 partitions is 200 tasks per count on a two-core sidecar."""
    key = "spark.sql.shuffle.partitions"
    if key in conf or spark.sparkContext.getConf().contains(key):
        return
    spark.conf.set(key, str(spark.sparkContext.defaultParallelism))


def _ship(spark) -> None:
    """Send the cachesync zip to the executors. ``addPyFile`` also puts the zip's copy (under
    the context's temporary userFiles directory) on the driver's own ``sys.path``: taken off
    again, so the driver keeps importing the installed cachesync, and no import made after
    ``spark.stop()`` deleted that directory meets a zip that is gone."""
    from cachesync.consumer.spark.bundle import build_bundle
    before = list(sys.path)
    spark.sparkContext.addPyFile(str(build_bundle(bundle_dir())))
    added = [p for p in sys.path if p not in before]
    sys.path[:] = [p for p in sys.path if p not in added]
    for path in added:
        sys.path_importer_cache.pop(path, None)
