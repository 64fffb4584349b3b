"""The ``spark-submit`` invocation of a cachesync job (``cachesync spark-submit``).

A job runs under spark-submit like any PySpark application: the main file is
``cachesync/spark_main.py`` (the ``cachesync`` command line), cachesync and its
pure-Python libraries go to the executors as one zip (``--py-files``, bundle.py), the
Kafka connector and the JDBC driver as ``--jars``. The executors' Python is theirs
(``spark.pyspark.python``), never the path of the submitting interpreter.

Secrets never travel as Spark conf (the UI's Environment tab and the event log show
conf): the driver reads them from the environment or ``*_FILE`` paths as every cachesync
process does, and the executors get them inside the task closures, which neither the UI
nor the event log records. A ``--conf`` that looks like a secret is refused.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from cachesync.schema.errors import ConfigError

# keys and values Spark itself would treat as sensitive (spark.redaction.regex), and more
SECRET_LIKE = re.compile(r"(?i)secret|password|passwd|token|credential|access.?key|jaas")
DEPLOY_MODES = ("client", "cluster")


@dataclass(frozen=True)
class SubmitPlan:
    """What to submit: the master, the job's own arguments and the files to ship."""

    master: str
    job_args: tuple[str, ...]               # after `cachesync`: consume --engine spark ...
    main: Path                              # spark_main.py
    bundle: Path                            # the executors' zip
    jars: tuple[str, ...]
    executor_python: str = "python3"
    driver_python: str | None = None        # client mode: the submitting venv's interpreter
    deploy_mode: str = "client"
    name: str = "cachesync"
    conf: tuple[tuple[str, str], ...] = ()
    files: tuple[str, ...] = ()             # shipped to the driver's working dir (cluster)
    extra: tuple[str, ...] = field(default=())   # passed to spark-submit as they are


def check_conf(pairs: tuple[tuple[str, str], ...]) -> None:
    """Raises ConfigError for a conf entry whose key or value looks like a secret."""
    for key, value in pairs:
        if SECRET_LIKE.search(key) or SECRET_LIKE.search(value):
            raise ConfigError(
                f"--conf {key}=...: looks like a secret, and Spark conf is shown in the UI and "
                "written to the event log; give cachesync secrets as CACHESYNC_..._FILE files "
                "(on Kubernetes: spark.kubernetes.driver.secrets.<secret>=<mount path>)")


def parse_conf(items: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--conf {item!r}: expected KEY=VALUE")
        pairs.append((key, value))
    return tuple(pairs)


def submit_argv(plan: SubmitPlan, spark_submit: str = "spark-submit") -> list[str]:
    """The full argv; raises ConfigError for a bad deploy mode or a secret-like conf."""
    if plan.deploy_mode not in DEPLOY_MODES:
        raise ConfigError(f"deploy mode {plan.deploy_mode!r}: expected one of {DEPLOY_MODES}")
    check_conf(plan.conf)
    conf = [("spark.pyspark.python", plan.executor_python)]
    if plan.deploy_mode == "client" and plan.driver_python:
        conf.append(("spark.pyspark.driver.python", plan.driver_python))
    conf += list(plan.conf)
    argv = [spark_submit, "--master", plan.master, "--deploy-mode", plan.deploy_mode,
            "--name", plan.name, "--py-files", str(plan.bundle)]
    if plan.jars:
        argv += ["--jars", ",".join(plan.jars)]
    if plan.files:
        argv += ["--files", ",".join(plan.files)]
    for key, value in conf:
        argv += ["--conf", f"{key}={value}"]
    return [*argv, *plan.extra, str(plan.main), *plan.job_args]


def ship_config(job_args: tuple[str, ...], deploy_mode: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """In cluster mode the driver runs on the cluster: ship ``--config FILE`` with
    ``--files`` and name it by its base name (Spark puts it in the driver's working dir).
    Returns (job args, files)."""
    if deploy_mode != "cluster":
        return job_args, ()
    args, files = list(job_args), []
    for i, arg in enumerate(args):
        if arg == "--config" and i + 1 < len(args):
            files.append(args[i + 1])
            args[i + 1] = Path(args[i + 1]).name
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
            files.append(path)
            args[i] = f"--config={Path(path).name}"
    return tuple(args), tuple(files)


def shell_line(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)
