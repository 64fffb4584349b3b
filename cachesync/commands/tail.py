"""``cachesync tail``: publish binlog row changes of the mapped tables to Kafka."""

from __future__ import annotations

import logging

import click

from cachesync.runtime import startup
from cachesync.doctor import start_checks
from cachesync.commands.common import handle_errors, on_termination, settings_options
from cachesync.runtime.metrics import tailer_active, tailer_totals
from cachesync.operate import tail_ops
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
from cachesync.tailer_stack import tailer_stack
from cachesync.wiring import build_outage_fallback, build_tailer, start_publisher

log = logging.getLogger(__name__)


@click.command("tail")
@settings_options
@click.option("--from-gtid", metavar="GTID",
              help="re-tail from this GTID state (MariaDB 0-1-42, MySQL uuid:1-42): the "
                   "transactions after it are published again, not the stored checkpoint's.")
@click.option("--from-file", metavar="FILE", help="re-tail from this binlog file (with --from-pos).")
@click.option("--from-pos", type=click.IntRange(min=4), metavar="POS",
              help="position in --from-file, at a transaction boundary.")
def command(settings, from_gtid, from_file, from_pos) -> None:
    """Tail the MySQL binlog and publish every committed row change to Kafka.

    Starts at the stored checkpoint (table cachesync.cachesync_checkpoint, named by
    tailer.name) or, on first start, at the server's current position (if keys were
    cached before, run `cachesync resync` once first). The
    checkpoint advances only past transactions Kafka fully acknowledged. When Kafka
    acknowledges nothing for tailer.kafka_outage_after_s (1 s), tail applies the changes to
    Redis itself, with the consumer's redis and dedup settings, until Kafka serves the topic
    and the consumer group has read them again (tailer.on_kafka_outage: invalidate, the
    default; wait: the cache waits for Kafka). Requires
    binlog_format=ROW, binlog_row_image=FULL, binlog_row_metadata=FULL and the
    REPLICATION SLAVE + REPLICATION CLIENT grants; says which one is missing.

    The outbox tables listed in tailer.outbox_tables (db.table,...) are read from the
    binlog too: each inserted row goes out as the outbox event it carries (the event
    the relay would publish, same id), deletes and updates of them are ignored.

    --from-gtid / --from-file --from-pos start at an operator's position instead (replay
    by binlog position; the consumer's dedup store skips what it already applied), and
    the checkpoint moves on from there. If the checkpoint's binlog was purged, tail stops
    with exit code 3 naming it; recover with `cachesync resync`, or set
    tailer.on_lost_position: resync to do that automatically.

    Any number of `tail` processes may run with one tailer.name: the one holding the MySQL
    lock cachesync:tailer:<name> tails, the others wait as hot standbys and take over from
    the checkpoint when it dies (at once when its process dies; within tailer.lock_lease_s
    when its host or network is lost). `cachesync status` shows which one is active.
    --from-gtid / --from-file applies to the first tailer this process builds only.

    tailer.source_hosts reads the binlog of other servers (a replica with log_slave_updates;
    the first that answers) while the checkpoint, lock and heartbeat stay on mysql.host.
    After a failover, point mysql.host at the new primary and restart: the tailer resumes by
    GTID from the checkpoint the new primary holds (a file:pos checkpoint of another server
    is refused, exit 3).

    Every tailer.heartbeat_interval_s it rewrites its row in cachesync.cachesync_heartbeat
    so the consumer measures lag while the application is idle. Serves /metrics,
    /healthz and /readyz on metrics.listen (default 127.0.0.1:9465); ready = MySQL and
    Kafka answer and the checkpoint moved within metrics.ready_max_lag_s.
    """
    start = start_option(from_gtid, from_file, from_pos)
    with handle_errors():
        on_termination()            # until the pipeline is built and can stop cleanly
        # the first tailer's publisher starts now, beside the topic check, preflight and lock
        # (a standby's waits ready); a restarted tailer starts its own
        spare = [start_publisher(settings)]
        try:
            _tail(settings, start, spare)
        finally:
            if spare[0] is not None:
                spare[0].close()


def _tail(settings, start: Checkpoint | None, spare: list) -> None:
    """Checks, metrics and the tailer stack, run until stopped."""
    start_checks(settings, "tail")     # kafka.create_topics; doctor's checks once reading
    tailers = tailer_totals()
    ops = tail_ops(settings, tailers)
    startup.mark("metrics")
    first = [start]

    def build():
        once, first[0] = first[0], None     # a restart resumes from the checkpoint
        started, spare[0] = spare[0], None
        return tailers.track(build_tailer(settings, once, started=started))
    supervisor = tailer_stack(settings, build, lambda start: build_outage_fallback(settings, start))
    tailer_active(ops.registry, settings.tailer.name, lambda: supervisor.active)
    on_termination(supervisor.stop)
    try:
        supervisor.run()
    finally:
        ops.close()
    tailer = supervisor.last
    if tailer is not None:
        log.info("tailer stopped after %d row events; checkpoint %s", tailer.published,
                 tailer.committed.describe() if tailer.committed else "-")


def start_option(gtid: str | None, log_file: str | None, pos: int | None) -> Checkpoint | None:
    """The --from-... position; raises UsageError for an incomplete or mixed one."""
    if gtid and (log_file or pos):
        raise click.UsageError("--from-gtid excludes --from-file/--from-pos")
    if bool(log_file) != bool(pos):
        raise click.UsageError("--from-file and --from-pos go together")
    if gtid:
        return Checkpoint("", gtid=gtid)
    return Checkpoint("", log_file=log_file, log_pos=pos) if log_file else None
