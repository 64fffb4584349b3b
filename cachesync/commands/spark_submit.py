"""``cachesync spark-submit``: run a cachesync Spark job under spark-submit on any master."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import click

from cachesync import install_hint
from cachesync.commands.common import handle_errors

DEFAULT_SPARK_SUBMIT_ENV = "SPARK_HOME"


@click.command("spark-submit", context_settings={"ignore_unknown_options": True})
@click.option("--master", envvar="CACHESYNC_SPARK_MASTER", show_envvar=True, required=True,
              help="spark://host:7077, k8s://https://host:443, yarn, local[*].")
@click.option("--deploy-mode", type=click.Choice(["client", "cluster"]), default="client",
              show_default=True, help="cluster: the driver runs on the cluster too (--config "
              "is shipped with --files).")
@click.option("--executor-python", envvar="CACHESYNC_SPARK_EXECUTOR_PYTHON", show_envvar=True,
              default="python3", show_default=True,
              help="the Python 3.11+ the executors run (on the workers, or in the image).")
@click.option("--conf", "conf_items", multiple=True, metavar="KEY=VALUE",
              help="Spark conf (repeatable); secrets are refused: give them as files.")
@click.option("--name", default="cachesync", show_default=True, help="application name.")
@click.option("--spark-submit", "spark_submit", type=click.Path(dir_okay=False),
              help="the spark-submit to run (default: $SPARK_HOME/bin/spark-submit, else the "
                   "installed pyspark's).")
@click.option("--print", "print_only", is_flag=True,
              help="print the command line instead of running it.")
@click.argument("job", nargs=-1, type=click.UNPROCESSED, required=True)
def command(master, deploy_mode, executor_python, conf_items, name, spark_submit, print_only,
            job) -> None:
    """Submit JOB (a cachesync command, e.g. `consume --engine spark --config c.yaml
    --checkpoint-location hdfs:///ck`) with spark-submit.

    Ships cachesync to the executors (a zip on --py-files, built from this installation),
    the Kafka connector and JDBC driver on --jars ($CACHESYNC_SPARK_JARS_DIR), and sets the
    executors' Python. Secrets stay out of Spark conf (the UI and the event log show it):
    the driver reads them from CACHESYNC_..._FILE files as every cachesync process does.
    Put `--` before JOB.
    """
    from cachesync.consumer.spark import session
    from cachesync.consumer.spark.bundle import build_bundle
    from cachesync.consumer.spark.submit import (SubmitPlan, parse_conf, ship_config,
                                                 shell_line, submit_argv)
    with handle_errors():
        args, files = ship_config(tuple(job), deploy_mode)
        plan = SubmitPlan(master=master, job_args=args,
                          main=Path(__file__).resolve().parents[1] / "spark_main.py",
                          bundle=build_bundle(session.bundle_dir()),
                          jars=tuple(session.jar_paths()), executor_python=executor_python,
                          driver_python=sys.executable, deploy_mode=deploy_mode, name=name,
                          conf=parse_conf(conf_items), files=files)
        argv = submit_argv(plan, spark_submit or _spark_submit())
    if print_only:
        click.echo(shell_line(argv))
        return
    sys.stdout.flush()
    os.execv(argv[0], argv)


def _spark_submit() -> str:
    home = os.environ.get(DEFAULT_SPARK_SUBMIT_ENV)
    if not home:     # the installed pyspark's distribution, found without importing it
        spec = importlib.util.find_spec("pyspark")
        if spec is None or not spec.submodule_search_locations:
            raise click.ClickException(f"pyspark is not installed: {install_hint('spark')}, "
                                       f"or set {DEFAULT_SPARK_SUBMIT_ENV}")
        home = list(spec.submodule_search_locations)[0]
    return os.path.join(home, "bin", "spark-submit")
