"""The operator surface of each long-running command: metrics, probes, heartbeat, health server.

``consume``, ``tail`` and ``relay`` each build one ``Ops`` (its own registry, probe
thread and HTTP server) plus the role's metrics; the pipeline code itself only
exposes ``stats`` and hooks.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from prometheus_client import CollectorRegistry

from cachesync import __version__
from cachesync.runtime import startup
from cachesync.runtime.config import Settings
from cachesync.http import OpsServer, parse_listen
from cachesync.runtime.metrics import (RELAY_COUNTERS, TAILER_COUNTERS, CheckpointAge, ConsumerMetrics,
                               Cumulative, MonitorCollector, binlog_format_row, counters,
                               heartbeat_gauge, info, relay_published,
                               process_collectors)
from cachesync import wiring
from cachesync.probes import (BinlogFormatWatch, KafkaOffsets, NewestBeats, Prober,
                              checkpoint_info, record_applied_lags)
from cachesync.runtime.mysql import Session
from cachesync.schema.errors import CachesyncError

log = logging.getLogger(__name__)

REDIS_PROBE_TIMEOUT_S = 2.0
# consume and tail probe (and write heartbeats) from their first poll or binlog read on, or
# this long after their metrics started, whichever comes first: the first probe bootstraps a
# Kafka admin client and connects to MySQL and Redis, CPU the start needs on a small host
DEFER_TO_START_MAX_S = 2.0


class Ops:
    """One process's registry, probe thread and HTTP server; ``close()`` stops all three."""

    def __init__(self, settings: Settings, role: str):
        self.settings, self.role = settings, role
        self.registry = CollectorRegistry(auto_describe=False)
        info(self.registry, role, __version__)
        process_collectors(self.registry)
        # parsed now: a bad value stops the command before it starts
        self._address = parse_listen(settings.metrics.listen, role)
        self._closers: list[Callable[[], None]] = []
        self.server: OpsServer | None = None

    def session(self) -> Session:
        """A MySQL session on the state database for probes (closed with the Ops)."""
        s = wiring.state_session(self.settings)
        self._closers.append(s.close)
        return s

    def kafka(self) -> KafkaOffsets:
        k = wiring.kafka_offsets(self.settings)
        self._closers.append(k.close)
        return k

    def heartbeat(self, defer: bool = False) -> None:
        """Rewrite this tailer's heartbeat row every tailer.heartbeat_interval_s (0: never);
        ``defer``: from the first binlog read on (see DEFER_TO_START_MAX_S)."""
        t = self.settings.tailer
        if t.heartbeat_interval_s <= 0:
            return
        writer = wiring.build_heartbeat(self.settings)
        heartbeat_gauge(self.registry, writer)
        stop = threading.Event()
        thread = threading.Thread(target=writer.run, args=(stop,), name="cachesync-heartbeat",
                                  daemon=True)
        self._after_start(thread.start, "heartbeat", defer)
        self._closers.extend([writer.close, stop.set])

    def redis_ping(self) -> Callable[[], None]:
        """A probe step: raises RetryableError unless Redis answers within the probe timeout
        (FatalError when it refuses the credentials)."""
        cache = wiring.build_cache_reader(self.settings, REDIS_PROBE_TIMEOUT_S)
        self._closers.append(cache.close)
        return cache.ping

    def start(self, probe: Callable[[], None], checks: list[Callable[[], str | None]],
              defer: bool = False) -> "Ops":
        """Start probing and, unless ``metrics.listen`` is off, serving; raises ConfigError
        when the address is taken. ``defer``: probe from the process's first poll or binlog
        read on (see DEFER_TO_START_MAX_S); until the first probe, /readyz says not ready."""
        prober = Prober(probe, self.settings.metrics.probe_interval_s)
        if self._address is not None:
            self.server = OpsServer(self._address, self.registry, [prober.problem, *checks])
            self._closers.append(self.server.close)
            self.server.start()
        self._after_start(prober.start, "probe", defer)
        self._closers.append(prober.stop)
        return self

    @staticmethod
    def _after_start(start: Callable[[], object], name: str, defer: bool) -> None:
        if defer:
            startup.after_start(start, name, at_latest_s=DEFER_TO_START_MAX_S)
        else:
            start()

    def close(self) -> None:
        for close in reversed(self._closers):
            close()


def consumer_ops(settings: Settings, stats: Callable[[], object],
                 committed: Callable[[], dict[int, int]] | None = None,
                 tables: Callable[[], object] | None = None,
                 scans: Callable[[], object] | None = None) -> tuple[Ops, ConsumerMetrics]:
    """Metrics for ``consume``, started; pass ``metrics.on_batch`` to the engine. ``stats``
    returns the engine's Stats, ``tables`` its TableTally (or None before the engine
    exists) and ``scans`` its table-level scans; ``committed`` the next offset per partition when the group does not hold them
    (Spark's checkpoint)."""
    ops = Ops(settings, "consume")
    probe_session = ops.session()
    ns, k = settings.dedup_namespace, settings.kafka
    recorder = _WarnOnce("could not record applied heartbeat lag in cachesync_lag")
    # the newest applied heartbeat per tailer, recorded in cachesync_lag by the probe: one
    # upsert per probe instead of a MySQL round trip on the consumer's thread per heartbeat
    # (and a binlog transaction for the tailer to read)
    beats = NewestBeats()
    metrics = ConsumerMetrics(ops.registry, stats, on_heartbeat=beats.add, tables=tables,
                              scans=scans)
    kafka, redis_ping = ops.kafka(), ops.redis_ping()

    def probe():
        if committed is None:
            metrics.set_kafka_lag(kafka.consumer_lag(k.group_id, k.topic))
        else:
            metrics.set_kafka_lag(kafka.lag_behind(k.topic, committed()))
        newest = beats.take()
        if not (newest and recorder.run(lambda: record_applied_lags(probe_session, ns, newest))):
            beats.put_back(newest)
            probe_session.run(lambda cur: cur.execute("SELECT 1"))   # MySQL answers
        redis_ping()

    ops.start(probe, [lambda: metrics.lag_problem(settings.metrics.ready_max_lag_s)], defer=True)
    return ops, metrics


def monitor_hook(settings: Settings, ops: Ops) -> list:
    """The consistency monitor as a consumer hook, its metrics in ``ops`` (none when
    ``monitor.enabled`` is false or nothing is sampled)."""
    if not settings.monitor.enabled or settings.monitor.sample_ratio <= 0:
        return []
    from cachesync.monitor import build_monitor
    monitor = build_monitor(settings)
    ops.registry.register(MonitorCollector(monitor))
    ops._closers.append(monitor.close)      # also when the engine never starts
    return [monitor.start()]


def tail_ops(settings: Settings, tailers: Cumulative) -> Ops:
    """Metrics, heartbeat writer and checkpoint-age probe for ``tail``; started."""
    ops = Ops(settings, "tail")
    counters(ops.registry, lambda: tailers, TAILER_COUNTERS)
    t, max_lag = settings.tailer, settings.metrics.ready_max_lag_s
    ops.heartbeat(defer=True)
    age, session, kafka = CheckpointAge(ops.registry), ops.session(), ops.kafka()
    binlog_format = BinlogFormatWatch(binlog_format_row(ops.registry))

    def probe():
        found = checkpoint_info(session, t.name)
        if found:
            age.set(found[0].age_s)
        binlog_format.check(session)
        kafka.check_topic(settings.kafka.topic)  # proves Kafka answers for our topic

    def checkpoint_fresh():
        # Without heartbeats an idle database leaves the checkpoint still: not a fault.
        if t.heartbeat_interval_s > 0 and age.value is not None and age.value > max_lag:
            return f"checkpoint has not moved for {age.value:.1f}s (limit {max_lag:.1f}s)"
        return None
    return ops.start(probe, [checkpoint_fresh], defer=True)


def relay_ops(settings: Settings, relay) -> Ops:
    """Metrics for ``relay``; started."""
    ops = Ops(settings, "relay")
    counters(ops.registry, lambda: relay, RELAY_COUNTERS)
    relay_published(ops.registry, lambda: relay)
    kafka = ops.kafka()
    return ops.start(lambda: kafka.check_topic(settings.kafka.topic), [])


class _WarnOnce:
    """Runs side work that must not stop the pipeline; logs the first failure of each outage."""

    def __init__(self, what: str):
        self._what, self._failing = what, False

    def run(self, fn) -> bool:
        """``fn()``; False (and a WARNING the first time) when it raised a cachesync error."""
        try:
            fn()
            self._failing = False
            return True
        except CachesyncError as e:
            if not self._failing:
                log.warning("%s: %s", self._what, e)
            self._failing = True
            return False
