"""Options and error handling shared by the commands."""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys

import click

from cachesync import config, logs
from cachesync.schema.errors import ConfigError, FatalError, RetryableError

EXIT_RUNTIME, EXIT_CONFIG, EXIT_NOT_READY = 1, 2, 3
log = logging.getLogger("cachesync")


def load_options(fn):
    """--config and --env-file; the command gets ``load()``, which returns the settings and
    where each value came from (see :func:`cachesync.config.load_with_origins`)."""
    @click.option("--config", "-c", "config_path", type=click.Path(dir_okay=False),
                  envvar="CACHESYNC_CONFIG", show_envvar=True,
                  help="YAML settings file (tables, mysql, kafka, redis, ...).")
    @click.option("--env-file", type=click.Path(dir_okay=False), envvar="CACHESYNC_ENV_FILE",
                  show_envvar=True,
                  help="KEY=VALUE file loaded into the environment first (e.g. .devstack/env); "
                       "variables already set win.")
    @functools.wraps(fn)
    def wrapper(config_path, env_file, **kwargs):
        def load():
            if env_file:
                for key, value in config.read_env_file(env_file).items():
                    os.environ.setdefault(key, value)
            return config.load_with_origins(config_path)
        return fn(load=load, **kwargs)
    return wrapper


def settings_options(fn):
    """--config, --env-file, --log-level, --log-json."""
    @load_options
    @click.option("--log-level", default="INFO", show_default=True,
                  type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
    @click.option("--log-json", is_flag=True, help="Log one JSON object per line.")
    @functools.wraps(fn)
    def wrapper(load, log_level, log_json, **kwargs):
        logs.setup(log_level, log_json)
        with handle_errors():
            settings, _ = load()
        return fn(settings=settings, **kwargs)
    return wrapper


class handle_errors:
    """Turn cachesync errors into a clear message and a documented exit code."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None:
            return False
        if isinstance(exc, ConfigError):
            click.echo(f"cachesync: configuration error: {exc}", err=True)
            sys.exit(EXIT_CONFIG)
        if isinstance(exc, FatalError):
            click.echo(f"cachesync: {exc}", err=True)
            sys.exit(EXIT_NOT_READY)
        if isinstance(exc, RetryableError):
            click.echo(f"cachesync: stopped: {exc}", err=True)
            sys.exit(EXIT_RUNTIME)
        return False


def on_termination(stop) -> None:
    """Call ``stop()`` on SIGTERM/SIGINT so the current batch finishes cleanly."""
    def handler(signum, _frame):
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop()
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
