"""``cachesync monitor``: check a sample of the change events against MySQL and Redis."""

from __future__ import annotations

import logging
import threading
import time

import click

from cachesync.commands.common import handle_errors, on_termination, settings_options
from cachesync.runtime.config import Settings
from cachesync.consumer.core.delivery import decode_records
from cachesync.consumer.core.offsets import commit_offsets
from cachesync.consumer.consistency import sampled
from cachesync.consumer.core.plan import plan_batch
from cachesync.apply_watch import ApplyWatch
from cachesync.consumer.core.nines import summary
from cachesync.runtime.metrics import ChangeFiguresCollector, MonitorCollector
from cachesync.monitor import build_monitor
from cachesync.operate import Ops
from cachesync import wiring
from cachesync.consumer.adapters.kafka_source import KafkaSource
from cachesync.runtime.kafka_security import consumer_options
from cachesync.schema.event import HEARTBEAT_KIND
from cachesync.schema.retry import RetryPolicy, Stopped, call

log = logging.getLogger(__name__)

POLL_RECORDS = 500
GROUP_SUFFIX = "-monitor"
REPORT_S = 60.0          # how often the per-change figure is logged


@click.command("monitor")
@settings_options
def command(settings: Settings) -> None:
    """Check a sample of the change events: does Redis agree with MySQL once they applied?

    Reads the change topic (kafka.topic) in its own consumer group, kafka.group_id +
    "-monitor", from the newest events on; it applies nothing and claims nothing. Of
    the events, monitor.sample_ratio are checked monitor.window_s after they were read
    (at most monitor.max_checks_per_s; the rest are dropped and counted): the row is
    read from MySQL (read-only: SELECT on the mapped tables), the keys it renders from
    Redis, the row again. A key that disagrees is checked again a window later and
    counts as stale only if the row did not change meanwhile; one WARNING per table per
    monitor.warn_interval_s names a stale key. The same checks run inside consume
    (monitor.enabled); this command runs them beside any consumer, also Spark's.

    It also states the per-change figure of the consumers: for the heartbeats and the
    sampled row changes it reads, when the dedup store marked them done (Redis, or MySQL's
    default layout), so the share applied within 100 ms and 1 s of their commit (as nines,
    with the 95 % upper bound 3/n when none was late) and the commit -> apply p50, p99 and
    p99.9; logged every minute and at exit. A change not done 60 s after its commit counts
    as late.

    Serves cachesync_monitor_checks_total{table,result}, the monitor's cost
    (cachesync_monitor_mysql_reads_total) and the per-change figure
    (cachesync_monitor_changes_within_ratio{kind,within},
    cachesync_monitor_commit_to_apply_quantile_seconds{kind,quantile}) on metrics.listen
    (default 127.0.0.1:9467).
    """
    with handle_errors():
        stop = threading.Event()
        on_termination(stop.set)
        ops = Ops(settings, "monitor")
        monitor = build_monitor(settings)
        ops.registry.register(MonitorCollector(monitor))
        store = wiring.build_dedup(settings)
        watch = _watch(store, settings)
        if watch is not None:
            ops.registry.register(ChangeFiguresCollector("cachesync_monitor", watch.figures))
        try:
            probe_session, redis_ping = ops.session(), ops.redis_ping()
            ops.start(lambda: (probe_session.run(lambda cur: cur.execute("SELECT 1")),
                               redis_ping()), [])
            source = _source(settings)
            monitor.start()
            try:
                _follow(source, monitor, watch, settings, stop)
            finally:
                source.close()
        finally:
            monitor.close()
            store.close()
            ops.close()
        counts, dropped, errors, reads = monitor.snapshot()
        log.info("monitor stopped: %s; dropped %s; %d check error(s); %d MySQL read(s)",
                 dict(counts), dict(dropped), errors, reads)
        if watch is not None:
            _report(watch)


def _watch(store, settings: Settings) -> ApplyWatch | None:
    """The per-change figure's watch, or None (logged) when the store keeps no done times."""
    done_at = getattr(store, "done_at", None)
    if done_at is None:
        log.info("the dedup store (consumer.dedup_mysql_layout: compact) keeps no time of "
                 "apply: no per-change figure (cachesync consume exports its own)")
        return None
    return ApplyWatch(done_at, settings.monitor.window_s)


def _report(watch: ApplyWatch) -> None:
    for kind, figures in watch.figures.figures().items():
        if figures["changes"]:
            log.info("commit -> apply, %s: %s", kind, summary(figures))


def _source(settings: Settings) -> KafkaSource:
    k = settings.kafka
    return KafkaSource(k.bootstrap_servers, k.topic, k.group_id + GROUP_SUFFIX,
                       auto_offset_reset="latest", client_id="cachesync-monitor",
                       group=wiring.kafka_group(settings), security=consumer_options(k))


def _follow(source: KafkaSource, monitor, watch: ApplyWatch | None, settings: Settings,
            stop: threading.Event) -> None:
    """Offer every polled event to the monitor (and the sampled ones and heartbeats to the
    watch) until ``stop``; offsets are committed as read (a restarted monitor samples from
    there; a sample lost in a crash is only a sample)."""
    mappings, retry = wiring.mappings(settings), RetryPolicy()   # heartbeats plan, unchecked
    reported = time.monotonic()
    try:
        while not stop.is_set():
            records = call(lambda: source.poll(POLL_RECORDS, settings.consumer.poll_timeout_s),
                           "poll", stop, retry)
            if watch is not None:
                watch.check()
                if time.monotonic() - reported >= REPORT_S:
                    _report(watch)
                    reported = time.monotonic()
            if not records:
                continue
            ratio = settings.monitor.sample_ratio   # only sampled events are worth planning
            chosen = [d for d in decode_records(records).deliveries
                      if sampled(d.event.id, ratio) or d.event.source.kind == HEARTBEAT_KIND]
            if watch is not None:
                watch.offer(d.event for d in chosen)
            plan = plan_batch(chosen, mappings)
            monitor.offer(plan.events, time.time() + settings.monitor.window_s)
            call(lambda: source.commit(commit_offsets(records)), "commit offsets", stop, retry)
    except Stopped:
        pass
