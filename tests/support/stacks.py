"""One devstack per pytest-xdist worker: the service tests run side by side, each worker on
services of its own.

The tests on the services mostly wait on them, so ``make test`` runs them in several
workers (``pytest -n``). Worker ``gw0`` uses the devstack ``devstack/with-stack.sh``
started; worker ``gwN`` (N >= 1) gets a stack of its own under ``.devstack-w<N+1>``, on the
default base ports plus ``PORT_STEP * N`` (the variants' ports follow the base ports), which
its first test starts and its session's end stops. Nothing a test does to its services (a
broker stopped, a global variable set, binlogs purged, a Redis master killed) reaches
another worker's tests.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
STACK = ROOT / "devstack" / "stack.sh"
# the base ports of the default stack (devstack/stack.sh, devstack/variants/spark.sh)
BASE_PORTS = {"DEVSTACK_MYSQL_PORT": 13306, "DEVSTACK_REDIS_PORT": 16379,
              "DEVSTACK_KAFKA_PORT": 19092, "DEVSTACK_KAFKA_CONTROLLER_PORT": 19093,
              "DEVSTACK_SPARK_PORT_BASE": 17077}
# a worker's ports: the default stack's plus this per worker index; every variant port of
# the default stack lies within 100 of a base port, and the worker stacks' below the
# ephemeral range (32768) up to MAX_WORKERS
PORT_STEP = 10_000
MAX_WORKERS = 2


def worker_index() -> int:
    """0 outside pytest-xdist and for its first worker; N for worker ``gwN``."""
    match = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
    return int(match.group(1)) if match else 0


def worker_env(index: int) -> dict[str, str]:
    """The environment that points devstack/stack.sh and the tests at worker ``index``'s stack
    (``index`` >= 1)."""
    if not 1 <= index < MAX_WORKERS:
        raise ValueError(f"worker {index}: the service tests run in at most {MAX_WORKERS} "
                         "workers (each has a devstack of its own; see tests/support/stacks.py)")
    directory = ROOT / f".devstack-w{index + 1}"
    return {"CACHESYNC_DEVSTACK_DIR": str(directory),
            "CACHESYNC_ENV_FILE": str(directory / "env"),
            **{name: str(port + PORT_STEP * index) for name, port in BASE_PORTS.items()}}


def use_worker_stack(index: int) -> None:
    """Point this process (and every command it starts) at worker ``index``'s stack: its
    directory and base ports; a variant port set in the environment would be the default
    stack's, so it is dropped (the variants' ports follow the base ports). What `make install`
    fetched into the default stack's directory (the Spark jars) is still used from there."""
    from consumer.spark.session import JARS_ENV, jars_dir
    os.environ.setdefault(JARS_ENV, str(jars_dir()))
    for name in [n for n in os.environ if n.startswith("DEVSTACK_") and "PORT" in n]:
        del os.environ[name]
    os.environ.update(worker_env(index))


def running() -> set[str]:
    """The services and variants of this process's stack that are running or starting."""
    done = subprocess.run([str(STACK), "running"], capture_output=True, text=True, timeout=120)
    return set(done.stdout.split())
