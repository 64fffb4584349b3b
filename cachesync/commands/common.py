"""Options and error handling shared by the commands."""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys

import click

from cachesync.runtime import config, logs, startup
from cachesync.runtime.env_file import with_env_file
from cachesync import install_hint
from cachesync.schema.errors import ConfigError, FatalError, RetryableError

EXIT_RUNTIME, EXIT_CONFIG, EXIT_NOT_READY = 1, 2, 3
log = logging.getLogger(__name__)


def load_options(fn):
    """--config and --env-file; the command gets ``load()``, which returns the settings and
    where each value came from (see :func:`cachesync.runtime.config.load_with_origins`)."""
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
            with_env_file(os.environ, env_file)
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
        startup.mark("command")          # the interpreter, the imports, the arguments
        logs.setup(log_level, log_json, role=_role(click.get_current_context()))
        with handle_errors():
            settings, _ = load()
        startup.mark("settings")
        return fn(settings=settings, **kwargs)
    return wrapper


def _role(ctx: click.Context) -> str:
    """The command as typed, without the program: ``consume``, ``dedup purge``."""
    names = []
    while ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(reversed(names))


class handle_errors:
    """Turn every failure into one ``cachesync:`` message (a JSON line under --log-json) and a
    documented exit code; never a traceback (an unexpected error's goes to DEBUG)."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None or not isinstance(exc, Exception) or isinstance(exc, click.ClickException):
            return False
        message, code = failure(exc)
        if code == EXIT_RUNTIME and message.startswith("internal error"):
            log.debug("traceback of the internal error", exc_info=exc)
        logs.final(message, code)
        sys.exit(code)


def failure(exc: Exception) -> tuple[str, int]:
    """What to tell the operator about ``exc``, and the exit code."""
    if isinstance(exc, ConfigError):
        return f"configuration error: {exc}", EXIT_CONFIG
    if isinstance(exc, FatalError):
        return str(exc), EXIT_NOT_READY
    if isinstance(exc, RetryableError):
        return f"stopped: {exc}", EXIT_RUNTIME
    unavailable = _unavailable(exc)
    if unavailable:
        text = str(exc) if str(exc).startswith(type(exc).__name__) else f"{type(exc).__name__}: {exc}"
        return f"stopped: {unavailable} unavailable: {text}", EXIT_RUNTIME
    if isinstance(exc, ModuleNotFoundError):
        package = (exc.name or "?").split(".")[0]
        extra = "spark" if package in ("pyspark", "py4j") else "sidecar"
        return f"{package} is not installed; it comes with {install_hint(extra)}", EXIT_CONFIG
    return (f"internal error: {type(exc).__name__}: {exc} (run with --log-level DEBUG for "
            f"the traceback)", EXIT_RUNTIME)


def _unavailable(exc: Exception) -> str | None:
    """The dependency a client library's error says is unreachable, or None."""
    module = type(exc).__module__.split(".")[0]
    names = {"kafka": "Kafka", "redis": "Redis", "pymysql": "MySQL", "pymysqlreplication": "MySQL"}
    if module in names:
        return names[module]
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return "a dependency"
    return None


def on_termination(stop=None) -> None:
    """Call ``stop()`` on SIGTERM/SIGINT so the current batch finishes cleanly. Without
    ``stop`` (still starting: a client library may block for its whole bootstrap timeout, and
    nothing is committed yet) exit at once with code 0: an exception raised from a signal
    handler could land in any frame, a ``__del__`` included, and be swallowed there."""
    def handler(signum, _frame):
        log.info("received %s, stopping", signal.Signals(signum).name)
        if stop is None:
            logging.shutdown()
            os._exit(0)
        stop()
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
