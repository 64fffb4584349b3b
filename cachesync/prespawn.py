"""Child processes started at the very beginning of a command, before its own imports.

``cachesync tail`` publishes through a child process where ``tailer.publisher`` is
``process`` (``auto`` on kafka-python), whose interpreter and kafka-python take about as long
to start as the tail itself. Started when
the command line is read, before click, the settings and the tail's own imports, the child
imports kafka-python on the other core while the parent does the rest; the publisher then
adopts it (:func:`take`) and sends it its settings over the pipe as it would a child of its
own. A child that nobody adopts sees its input end when this process exits, and exits.

A child inherits the environment it was started with, which is the command's once its
``--env-file`` is loaded (read here too, as the command will load it). If the command changed
the environment otherwise since (``kafka.aws_region`` sets ``AWS_DEFAULT_REGION``), the
early child is not the one the settings describe, so :func:`take` ends it and returns None
(the publisher then starts its own, as without this module).

Only this module's names and the env file reader are imported here: anything heavier would
delay the very thing it is for.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
from typing import Mapping

from cachesync import NO_SPEEDUPS
from cachesync.runtime.env_file import with_env_file
from cachesync.schema.errors import ConfigError

PUBLISHER_MODULE = "cachesync.producer_outbox.publish.process_publisher"

log = logging.getLogger(__name__)

# name -> (the child, the environment it was started with); one per process at most
_early: dict[str, tuple[subprocess.Popen, dict[str, str]]] = {}


def for_command(argv: list[str], environ: Mapping[str, str] = os.environ) -> None:
    """Start the children ``argv``'s command will need (``tail``: its publisher process,
    where it will likely publish through one), in the environment the command will have
    once its ``--env-file`` is loaded (:func:`command_environ`)."""
    if argv[1:2] != ["tail"] or {"-h", "--help"} & set(argv[2:]):
        return
    env = command_environ(argv, environ)
    if env is not None and publisher_process_likely(env):
        start("publisher", PUBLISHER_MODULE, env)


def command_environ(argv: list[str], environ: Mapping[str, str]) -> dict[str, str] | None:
    """``environ`` with the command's env file added as ``--env-file`` adds it (the option,
    else CACHESYNC_ENV_FILE; the variables already set win), or None when the file cannot
    be read (the command says why)."""
    path = environ.get("CACHESYNC_ENV_FILE")
    for i, arg in enumerate(argv):
        if arg == "--env-file" and i + 1 < len(argv):
            path = argv[i + 1]
        elif arg.startswith("--env-file="):
            path = arg.split("=", 1)[1]
    try:
        return with_env_file(dict(environ), path)
    except ConfigError:
        return None


def publisher_process_likely(environ: Mapping[str, str]) -> bool:
    """Whether ``tail`` will publish through a child process, as far as the environment
    says before the settings are read: ``tailer.publisher`` set there, else ``auto``'s
    choice (a thread on librdkafka, wherever confluent-kafka is installed and neither
    ``kafka.client`` nor CACHESYNC_NO_SPEEDUPS rules it out). A guess the settings
    contradict costs only the start: an unused child is ended, a missing one started then."""
    placement = environ.get("CACHESYNC_TAILER_PUBLISHER", "auto")
    if placement != "auto":
        return placement == "process"
    return (environ.get("CACHESYNC_KAFKA_CLIENT") == "kafka-python"
            or bool(environ.get(NO_SPEEDUPS))
            or importlib.util.find_spec("confluent_kafka") is None)


def start(name: str, module: str, environ: Mapping[str, str] | None = None) -> None:
    """Start ``python -m module`` with pipes on its stdin and stdout, kept under ``name``,
    in ``environ`` (default: this process's)."""
    if name in _early:
        return
    env = dict(os.environ if environ is None else environ)
    try:
        child = subprocess.Popen([sys.executable, "-m", module], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, close_fds=True, env=env)
    except OSError:             # the command starts its own child later, and says why then
        return
    _early[name] = (child, env)


def take(name: str) -> subprocess.Popen | None:
    """The child started early under ``name``, once, if it still runs with the environment
    this process has now; else None (a child that does not fit is ended)."""
    found = _early.pop(name, None)
    if found is None:
        return None
    child, environ = found
    changed = sorted(k for k in set(environ) | set(os.environ) if environ.get(k) != os.environ.get(k))
    if child.poll() is None and not changed:
        return child
    log.debug("%s process started early not used (%s)", name,
              f"environment changed since: {', '.join(changed)}" if changed else "it exited")
    discard(child)
    return None


def discard_all() -> None:
    """End every child nobody adopted (a command that will not use them)."""
    for name in list(_early):
        discard(_early.pop(name)[0])


def discard(child: subprocess.Popen) -> None:
    """End ``child``: its input ends, so it exits; killed if it does not."""
    for pipe in (child.stdin, child.stdout):
        try:
            pipe.close()
        except (OSError, ValueError):
            pass
    try:
        child.wait(5)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
