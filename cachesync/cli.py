"""The ``cachesync`` command line. Each command lives in ``cachesync/commands/``.

Exit codes: 0 success; 1 runtime failure (a dependency stayed unavailable);
2 usage or configuration error; 3 the server is not ready for cachesync
(settings, privileges, credentials) or the tailer's binlog position is gone (purged;
recover with ``cachesync resync``).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

try:
    import click
except ModuleNotFoundError:
    click = None
# the sidecar's dependencies, found (not imported: each command imports what it needs)
_MISSING = "click" if click is None else next(
    (name for name in ("kafka", "pymysql", "yaml") if importlib.util.find_spec(name) is None), None)
if _MISSING:                                # the base install is the application client only
    from cachesync import install_hint
    sys.stderr.write(f"cachesync: the command line needs the sidecar's dependencies "
                     f"({_MISSING} is missing): {install_hint('sidecar')}\n")
    sys.exit(2)

from cachesync import __version__

# Each command's module is imported when the command runs (or when help lists it): a
# restarted consumer or tailer pays for its own imports only. The order is --help's.
COMMANDS = {name: f"cachesync.commands.{module}" for name, module in (
    ("tail", "tail"), ("consume", "consume"), ("relay", "relay"), ("demo", "demo"),
    ("run", "run"), ("explain", "explain"), ("lint", "lint"), ("status", "status"),
    ("config", "config_cmd"), ("dlq", "dlq"), ("dedup", "dedup"), ("replay", "replay"),
    ("audit", "audit"), ("resync", "resync"), ("monitor", "monitor"), ("topics", "topics"),
    ("doctor", "doctor"), ("init", "init"), ("spark-submit", "spark_submit"),
    ("snapshot", "snapshot"))}


class LazyGroup(click.Group):
    """A group whose commands are the ``command`` of the modules in COMMANDS, each imported
    when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in COMMANDS:
            self.add_command(importlib.import_module(COMMANDS[name]).command, name)
        return self.commands.get(name)


@click.group(cls=LazyGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog="Exit codes: 0 ok, 1 runtime failure, 2 usage/config error, "
                    "3 server not ready (settings, grants, credentials) or binlog position lost, "
                    "4 explain/lint found a problem, audit over its staleness limit; "
                    "doctor: 5 worst check WARN, 6 a check FAILs.")
@click.version_option(__version__, prog_name="cachesync")
def cli() -> None:
    """Keep Redis consistent with MySQL: binlog -> Kafka -> idempotent cache invalidation.

    Settings come from a YAML file (--config) and CACHESYNC_<SECTION>_<FIELD>
    environment variables, which win; a ..._FILE variable reads a secret from a file.
    """


def main() -> None:
    cli()
