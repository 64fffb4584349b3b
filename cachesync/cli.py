"""The ``cachesync`` command line. Each command lives in ``cachesync/commands/``.

Exit codes: 0 success; 1 runtime failure (a dependency stayed unavailable);
2 usage or configuration error; 3 the server is not ready for cachesync
(settings, privileges, credentials) or the tailer's binlog position is gone (purged;
recover with ``cachesync resync``).
"""

from __future__ import annotations

import sys

try:
    import click
    import kafka  # noqa: F401 - the sidecar's dependencies, checked before any command
    import pymysql  # noqa: F401
    import yaml  # noqa: F401
except ModuleNotFoundError as missing:      # the base install is the application client only
    sys.stderr.write(f"cachesync: the command line needs the sidecar's dependencies "
                     f"({missing.name} is missing): pip install 'cachesync[sidecar]'\n")
    sys.exit(2)

from cachesync import __version__
from cachesync.commands import (audit, config_cmd, consume, dedup, demo, dlq, doctor, explain,
                                init, lint, monitor, relay, replay, resync, run, snapshot,
                                spark_submit, status, tail, topics)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
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


cli.add_command(tail.command)
cli.add_command(consume.command)
cli.add_command(relay.command)
cli.add_command(demo.command)
cli.add_command(run.command)
cli.add_command(explain.command)
cli.add_command(lint.command)
cli.add_command(status.command)
cli.add_command(config_cmd.command)
cli.add_command(dlq.command)
cli.add_command(dedup.command)
cli.add_command(replay.command)
cli.add_command(audit.command)
cli.add_command(resync.command)
cli.add_command(monitor.command)
cli.add_command(topics.command)
cli.add_command(doctor.command)
cli.add_command(init.command)
cli.add_command(spark_submit.command)
cli.add_command(snapshot.command)


def main() -> None:
    cli()
