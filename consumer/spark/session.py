"""A lean SparkSession with the devstack's jars (Kafka connector, MariaDB JDBC) on spark.jars."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Iterator, Mapping

from cachesync.schema.errors import FatalError

JARS_ENV = "CACHESYNC_SPARK_JARS_DIR"
MASTER_ENV = "CACHESYNC_SPARK_MASTER"
DEFAULT_MASTER = "local[2]"
REPO_ROOT = Path(__file__).resolve().parents[2]

# A sidecar on a small machine: no UI, few shuffle partitions, UTC everywhere so that
# timestamps mean the same on the driver, the workers and MySQL.
LEAN_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": "-Duser.timezone=UTC -XX:+UseSerialGC",
    "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
    "spark.sql.streaming.stopTimeout": "60s",
    "spark.python.worker.reuse": "true",
    "spark.ui.showConsoleProgress": "false",
}


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

    ``jars`` defaults to :func:`jar_paths`; raises FatalError when there are none.
    """
    from pyspark.sql import SparkSession

    logging.getLogger("py4j").setLevel(logging.WARNING)     # one INFO line per callback

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    # Spark's Python workers must run this interpreter (the venv with cachesync), not
    # whatever python3 is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master(
        master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER)
    for key, value in {**LEAN_CONF, "spark.jars": ",".join(jars or jar_paths()), **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    try:
        yield spark
    finally:
        spark.stop()
