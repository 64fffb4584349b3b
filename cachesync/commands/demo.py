"""``cachesync demo``: the whole pipeline on the local devstack, write by write."""

from __future__ import annotations

import os
import statistics
import sys
import time
from importlib.resources import files

import click

from cachesync.commands.common import EXIT_CONFIG, EXIT_RUNTIME
from cachesync.demo_run import (DIRECT_PIPELINE, KAFKA_PIPELINE, Pipeline, Write, demo_writes,
                                ensure_demo_schema, forget_demo_checkpoint)
from cachesync.devstack import DevStack
from cachesync.runtime import config

DEFAULT_ENV_FILE = ".devstack/env"


@click.command("demo")
@click.option("--env-file", default=DEFAULT_ENV_FILE, show_default=True, envvar="CACHESYNC_ENV_FILE",
              help="The devstack env file (connection settings and the admin account).")
@click.option("--writes", default=20, show_default=True, type=click.IntRange(1, 100000),
              help="How many row writes to make.")
@click.option("--timeout", default=30.0, show_default=True,
              help="Seconds to wait for one invalidation before failing.")
@click.option("--direct", is_flag=True,
              help="Run the pipeline without Kafka: one `cachesync run --direct` process.")
def command(env_file: str, writes: int, timeout: float, direct: bool) -> None:
    """Run tailer and consumer against the devstack and show each invalidation.

    Creates the demo schema (demo.users, demo.orders), starts `cachesync tail` and
    `cachesync consume` (with --direct: `cachesync run --direct`, no Kafka) as child
    processes, then writes rows. Before each write it
    caches the rows' keys in Redis as an application would; after the commit it
    waits until cachesync has deleted them and prints the keys and the
    commit->invalidation lag. Stops the children on exit, also on Ctrl-C. The demo's tailer
    starts at the server's current binlog position each time (its checkpoint is forgotten).
    """
    if not os.path.exists(env_file):
        click.echo(f"cachesync demo: {env_file} not found; start the services first: "
                   "devstack/stack.sh up (or: make demo)", err=True)
        sys.exit(EXIT_CONFIG)
    stack = DevStack.from_env_file(env_file)
    env = {**os.environ, **stack.env}
    cfg = str(files("cachesync").joinpath("examples/demo.yaml"))
    admin = stack.admin(autocommit=False)
    cache = stack.redis()
    ensure_demo_schema(admin)
    settings = config.load(cfg, env)
    forget_demo_checkpoint(admin, settings.mysql.state_db, settings.tailer.name)
    lags = []
    with Pipeline(cfg, env, DIRECT_PIPELINE if direct else KAFKA_PIPELINE) as pipeline:
        click.echo("starting run --direct (no Kafka) ..." if direct else
                   "starting tailer and consumer ...")
        pipeline.wait_ready(admin, cache, timeout=max(timeout, 60))
        for name, url in pipeline.endpoints().items():
            click.echo(f"cachesync {name}: {url}/metrics {url}/healthz {url}/readyz")
        click.echo("pipeline ready; writing rows\n")
        for write in demo_writes(writes):
            lags.append(_run_one(write, admin, cache, timeout, pipeline))
    _summary(lags)


def _run_one(write: Write, admin, cache, timeout: float, pipeline: Pipeline) -> float:
    for key in write.keys:
        cache.set(key, b"cached-by-app", ex=3600)
    with admin.cursor() as cur:
        cur.execute(write.sql, write.params)
    admin.commit()
    committed = time.perf_counter()
    deadline = committed + timeout
    while cache.exists(*write.keys):
        if time.perf_counter() > deadline:
            click.echo(f"FAILED: keys {write.keys} still cached {timeout}s after commit", err=True)
            pipeline.dump_logs()
            sys.exit(EXIT_RUNTIME)
        pipeline.check_alive()
        time.sleep(0.0005)  # polling Redis for a state change; 0.5 ms resolution
    lag_ms = (time.perf_counter() - committed) * 1000
    click.echo(f"lag {lag_ms:6.1f} ms  {write.label:<36} invalidated {', '.join(write.keys)}")
    return lag_ms


def _summary(lags: list[float]) -> None:
    if not lags:
        return
    ordered = sorted(lags)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    click.echo(f"\n{len(lags)} writes: commit->invalidation lag p50 {statistics.median(lags):.1f} ms, "
               f"p99 {p99:.1f} ms, max {ordered[-1]:.1f} ms")

