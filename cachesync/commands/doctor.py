"""``cachesync doctor``: check a deployment before running it."""

from __future__ import annotations

import json
import sys

import click

from cachesync.commands.common import handle_errors, settings_options


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: checks and the worst level.")
@click.option("--role", type=click.Choice(["all", "tail", "consume", "direct"]), default="all",
              show_default=True, help="Only the checks one process needs (direct: `run --direct`, "
                                      "MySQL and Redis, no Kafka check).")
@settings_options
def command(settings, as_json: bool, role: str) -> None:
    """Check everything that can be checked before running; each check PASS, NOTE, WARN or
    FAIL with the fix.

    \b
    settings          settings that work against each other (claim lease, retention)
    binlog-settings   log_bin, binlog_format, binlog_row_image, binlog_row_metadata
                      (and log_slave_updates for tailer.source_hosts)
    binlog-shaping    every other setting that shapes the binlog, and what cachesync does
                      about it (a degraded one: WARN)
    grants            REPLICATION SLAVE and REPLICATION CLIENT of the cachesync user
    grants-state      its SELECT, INSERT, UPDATE, DELETE, CREATE on mysql.state_db
    grants-tables     its SELECT on the mapped databases (lint, init, monitor, audit)
    gtid              GTIDs on (MySQL gtid_mode, MariaDB gtid_strict_mode)
    fk-cascade        each foreign key that cascades into a mapped table without the
                      server logging the rows it changes, and what cachesync does (WARN)
    binlog-retention  the checkpoint's binlog still kept, its age against the retention
    topic             each topic exists (NOTE if kafka.create_topics makes it at start);
                      its retention against consumer.dedup_retention_s
    kafka-acls        ACLs of kafka.sasl_username on the topics, where visible
    consumer-group    the group's state and lag (no group yet: NOTE)
    redis             reachable, a master, its mode
    clock-skew        MySQL's and Redis's clocks against this host's (over 1 s: WARN)
    first-start       no checkpoint yet, but Redis holds mapped keys (a bounded SCAN
                      sample): run `cachesync resync` first

    NOTE is what a new pipeline is expected to show: nothing to fix.
    `tail` and `consume` run the same checks at start and log what is not PASS.
    Exit 0 when every check is PASS or NOTE (ready to run: `cachesync doctor &&
    cachesync run`), 5 when the worst is a WARN (it runs, something needs attention),
    6 when something FAILs (it will not work).
    """
    from cachesync.doctor import EXIT_CODES, run_checks, worst
    with handle_errors():
        checks = run_checks(settings, role)
    level = worst(checks)
    if as_json:
        click.echo(json.dumps({"worst": level, "checks": [c.to_dict() for c in checks]}, indent=2))
    else:
        for check in checks:
            click.echo(check.line())
        click.echo(f"{len(checks)} check(s), worst: {level}")
    sys.exit(EXIT_CODES[level])
