"""The tailer through a Kafka outage (``tailer.on_kafka_outage: invalidate``).

Without it a broker outage stops every invalidation for its length: the tailer waits for
acknowledgements, the consumer for records. With it, a tailer run whose sends stay
unacknowledged for ``tailer.kafka_outage_after_s`` stops (``KafkaUnreachable``), and the
tailer applies the changes itself, as direct mode does, from the stored checkpoint (which
never passed what Kafka did not acknowledge) until Kafka serves the topic again:

- ids are claimed and confirmed in the consumer group's dedup namespace, so the consumer
  skips them when they arrive;
- its progress is kept in memory: the stored checkpoint does not move;
- once every partition of the topic answers, the direct run stops and a new tailer run
  publishes from the stored checkpoint, the range just applied included (Kafka keeps the
  whole stream; the consumer finds those ids done).

The binlog is the buffer: nothing queues for the broker. A fallback that cannot reach
Redis (or is refused) says so and the tailer waits for Kafka, as without it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from cachesync.producer_outbox.publish.pipeline import KafkaUnreachable
from cachesync.schema.errors import CachesyncError, RetryableError

log = logging.getLogger(__name__)

PROBE_EVERY_S = 0.2     # how often the topic is asked for during an outage
RETRY_DIRECT_S = 1.0    # a direct run that failed transiently starts again after this


class KafkaOutageFallback:
    """A Runnable: tailer runs (``build()``), each followed, when it stopped for a Kafka
    outage, by direct runs (``build_direct()``) until Kafka serves the topic. Other errors
    propagate (the caller restarts); attributes of the last tailer read through."""

    def __init__(self, build: Callable[[], object], build_direct: Callable[[], object],
                 probe: Callable[[], object], topic: str, probe_every_s: float = PROBE_EVERY_S):
        """``probe()``: a client whose ``serving(topic)`` raises RetryableError until every
        partition of the topic answers (cachesync.probes.KafkaOffsets), closed after the
        outage."""
        self._build, self._build_direct = build, build_direct
        self._probe, self._topic = probe, topic
        self._probe_every_s = probe_every_s
        self._stopping = threading.Event()
        self._guard = threading.Lock()
        self._current = None
        self.tailer = None          # the last tailer run
        self.outages = 0

    def __getattr__(self, name: str):
        if name.startswith("_") or self.__dict__.get("tailer") is None:
            raise AttributeError(name)
        return getattr(self.tailer, name)

    def run(self) -> None:
        while not self._stopping.is_set():
            self.tailer = self._start(self._build)
            if self.tailer is None:
                return
            try:
                self.tailer.run()
                return
            except KafkaUnreachable as e:
                outage = e
            self.outages += 1
            self._invalidate_until_served(outage)

    def stop(self) -> None:
        self._stopping.set()
        with self._guard:
            if self._current is not None:
                self._current.stop()

    def _start(self, build: Callable[[], object]):
        """Build a runnable and make it the one stop() stops (None after a stop)."""
        runnable = build()
        with self._guard:
            if self._stopping.is_set():
                return None
            self._current = runnable
        return runnable

    def _invalidate_until_served(self, outage: KafkaUnreachable) -> None:
        started = time.monotonic()
        log.warning("%s: applying changes to Redis directly from the checkpoint until Kafka "
                    "serves the topic again, then publishing from there "
                    "(tailer.on_kafka_outage: invalidate)", outage)
        served, ended = threading.Event(), threading.Event()
        watcher = threading.Thread(target=self._watch, args=(served, ended),
                                   name="cachesync-kafka-outage", daemon=True)
        watcher.start()
        applied = 0
        try:
            while not (served.is_set() or self._stopping.is_set()):
                applied += self._run_direct(served)
        finally:
            ended.set()
            watcher.join()
        if served.is_set() and not self._stopping.is_set():
            log.warning("Kafka serves the topic again after %.1fs: publishing from the "
                        "checkpoint (%d event(s) were applied directly; the consumer skips "
                        "them)", time.monotonic() - started, applied)

    def _run_direct(self, served: threading.Event) -> int:
        """One direct run until Kafka serves (the watcher stops it); what it applied. One
        that fails transiently is started again after a pause, one that cannot run at all
        (Redis refusing the credentials, say) leaves the tailer waiting for Kafka."""
        direct = None
        try:
            direct = self._start(self._build_direct)
            if direct is None:
                return 0
            self.tailer.outage_fallbacks.append(direct)
            if served.is_set():         # the watcher stopped the one before this
                return 0
            direct.run()
        except RetryableError as e:
            log.warning("applying changes directly during the Kafka outage failed (%s); "
                        "starting again in %.0fs", e, RETRY_DIRECT_S)
            served.wait(RETRY_DIRECT_S)
        except CachesyncError as e:
            log.error("cannot apply changes directly during the Kafka outage (%s): waiting "
                      "for Kafka; the cache waits with it", e)
            while not (served.is_set() or self._stopping.is_set()):
                served.wait(self._probe_every_s)
        finally:
            with self._guard:
                self._current = None
        return direct.engine.stats.applied if direct is not None else 0

    def _watch(self, served: threading.Event, ended: threading.Event) -> None:
        """Ask for the topic until it is served, then stop the direct run."""
        probe = self._probe()
        try:
            while not (ended.is_set() or self._stopping.is_set()):
                try:
                    probe.serving(self._topic)
                except CachesyncError as e:
                    log.debug("Kafka not serving yet: %s", e)
                    ended.wait(self._probe_every_s)
                    continue
                served.set()
                with self._guard:
                    if self._current is not None:
                        self._current.stop()
                return
        finally:
            probe.close()
