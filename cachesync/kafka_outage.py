"""The tailer through a Kafka outage (``tailer.on_kafka_outage: invalidate``).

Without it a broker outage stops every invalidation for its length: the tailer waits for
acknowledgements, the consumer for records. With it, a tailer run whose sends stay
unacknowledged for ``tailer.kafka_outage_after_s`` stops (``KafkaUnreachable``), and the
tailer applies the changes itself, as direct mode does, until the consumer is back at the
head of the stream:

- the direct run starts from the checkpoint stored ``tailer.kafka_outage_lookback_s``
  before Kafka's last acknowledgement: the stored checkpoint never passed what Kafka did not
  acknowledge, and the lookback covers what a broker going away acknowledged but no longer
  handed to the consumer;
- ids are claimed and confirmed in the consumer group's dedup namespace, so the consumer
  skips them when they arrive (and the direct run skips what the consumer had applied);
- its progress is kept in memory: the stored checkpoint does not move;
- once every partition of the topic answers, a new tailer run publishes from the stored
  checkpoint, the range applied directly included (Kafka keeps the whole stream; the
  consumer finds those ids done). The direct run goes on beside it until that run's
  acknowledged position passed where the direct run was when Kafka came back, and the
  consumer group committed the offsets Kafka had then (it read what was published again):
  changes committed meanwhile do not wait behind the range the consumer skips.

The binlog is the buffer: nothing queues for the broker. A fallback that cannot reach
Redis (or is refused) says so and the tailer waits for Kafka, as without it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from cachesync.producer_outbox.publish.pipeline import KafkaUnreachable
from cachesync.schema.errors import CachesyncError, FatalError, RetryableError
from cachesync.resync import position_ordinal

log = logging.getLogger(__name__)

PROBE_EVERY_S = 0.2     # how often Kafka is asked during an outage and its handover
RETRY_DIRECT_S = 1.0    # a direct run that failed transiently starts again after this
# Kafka that serves the topic when first asked after an "outage" is slow to acknowledge, not
# away: the limit doubles (up to this) so that the tailer does not stop over and over
MAX_LIMIT_S = 60.0
# the direct run ends this long after Kafka served at the latest, caught up or not
HANDOVER_MAX_S = 60.0


def ordinal(checkpoint) -> int | None:
    """A checkpoint's place in the history (resync.position_ordinal; None: no checkpoint)."""
    return position_ordinal(checkpoint) if checkpoint is not None else None


class KafkaOutageFallback:
    """A Runnable: tailer runs (``build()``), each followed, when it stopped for a Kafka
    outage, by direct runs (``build_direct(start)``, from the outage's ``lookback``) until
    Kafka serves the topic and the consumer group ``group`` read what the next tailer run
    published again. Other errors propagate (the caller restarts); attributes of the last
    tailer read through."""

    def __init__(self, build: Callable[[], object], build_direct: Callable[[object], object],
                 probe: Callable[[], object], topic: str, group: str,
                 probe_every_s: float = PROBE_EVERY_S, handover_max_s: float = HANDOVER_MAX_S):
        """``probe()``: a Kafka admin client (cachesync.probes.KafkaOffsets: ``serving``,
        ``end_offsets``, ``committed_offsets``, ``close``), one per outage."""
        self._build, self._build_direct = build, build_direct
        self._probe, self._topic, self._group = probe, topic, group
        self._probe_every_s, self._handover_max_s = probe_every_s, handover_max_s
        self._stopping = threading.Event()
        self._guard = threading.Lock()
        self._current = None                    # the tailer running (stop() stops it)
        self._direct: _DirectRuns | None = None     # the outage's direct runs, if going on
        self.tailer = None                      # the last tailer run
        self.outages = 0
        self._limit_s: float | None = None      # a raised outage limit (MAX_LIMIT_S)

    def __getattr__(self, name: str):
        if name.startswith("_") or self.__dict__.get("tailer") is None:
            raise AttributeError(name)
        return getattr(self.tailer, name)

    def run(self) -> None:
        try:
            while not self._stopping.is_set():
                self.tailer = self._start()
                if self.tailer is None:
                    return
                pipeline = self.tailer.pipeline
                if self._limit_s is not None:
                    pipeline.outage_after_s = self._limit_s
                try:
                    self.tailer.run()
                    return
                except KafkaUnreachable as e:
                    outage = e
                self.outages += 1
                self._end_direct()      # a handover still going on: this outage starts anew
                if self._invalidate_until_served(outage, pipeline.outage_after_s):
                    self._raise_limit(pipeline.outage_after_s)
                else:       # away, then back: the configured limit again
                    self._limit_s = None
        finally:
            self._end_direct()

    def stop(self) -> None:
        self._stopping.set()
        with self._guard:
            if self._current is not None:
                self._current.stop()
        direct = self._direct
        if direct is not None:
            direct.end()

    def _start(self):
        """Build a tailer and make it the one stop() stops (None after a stop)."""
        tailer = self._build()
        with self._guard:
            if self._stopping.is_set():
                return None
            self._current = tailer
        return tailer

    def _raise_limit(self, limit_s: float) -> None:
        """Kafka served the topic when first asked: its acknowledgements are slower than
        ``limit_s``, it is not away. Wait twice as long for them from now on."""
        self._limit_s = min(MAX_LIMIT_S, 2 * limit_s)
        log.warning("Kafka served the topic when first asked, yet acknowledged nothing for "
                    "%gs: the tailer waits up to %gs for acknowledgements from now on (raise "
                    "tailer.kafka_outage_after_s if they take that long)", limit_s,
                    self._limit_s)

    def _end_direct(self) -> None:
        direct, self._direct = self._direct, None
        if direct is not None:
            direct.end()
            direct.join()

    # -- the outage -----------------------------------------------------------------------
    def _invalidate_until_served(self, outage: KafkaUnreachable, limit_s: float) -> bool:
        """Direct runs from the outage's lookback, then (Kafka serving again) their handover
        to the next tailer run started; True when Kafka served at the first ask, within
        ``limit_s`` (slow acknowledgements, not an outage)."""
        started = time.monotonic()
        log.warning("%s: applying changes to Redis directly from the checkpoint until Kafka "
                    "serves the topic again, then publishing from there "
                    "(tailer.on_kafka_outage: invalidate)", outage)
        direct = self._direct = _DirectRuns(self.tailer, lambda: self._build_direct(
            outage.lookback), self._stopping)
        direct.start()
        probe = self._probe()
        asks = self._await_serving(probe)
        if not asks:
            probe.close()
            return False
        took = time.monotonic() - started
        log.warning("Kafka serves the topic again after %.1fs: publishing from the checkpoint "
                    "(%d event(s) applied directly so far; the consumer skips them), and "
                    "applying directly until the consumer has read them", took,
                    direct.applied)
        threading.Thread(target=self._hand_over, args=(direct, probe, self.tailer),
                         name="cachesync-kafka-handover", daemon=True).start()
        return asks == 1 and took < limit_s

    def _await_serving(self, probe) -> int:
        """Ask Kafka for the topic until every partition answers; how many asks it took
        (0: stopped first)."""
        asks = 0
        while not self._stopping.is_set():
            asks += 1
            try:
                probe.serving(self._topic)
                return asks
            except RetryableError as e:     # a FatalError (a refused login) stops the tailer
                log.debug("Kafka not serving yet: %s", e)
                self._stopping.wait(self._probe_every_s)
        return 0

    def _hand_over(self, direct: "_DirectRuns", probe, stopped) -> None:
        """End ``direct`` once the tailer run after ``stopped`` acknowledged past where it
        was when Kafka came back and the consumer group committed Kafka's end offsets of
        then, or after HANDOVER_MAX_S; say so once it ended. Kafka's errors meanwhile (a
        coordinator still loading after a restart) are asked again."""
        deadline = time.monotonic() + self._handover_max_s
        reached = ordinal(direct.position)
        ends: dict[int, int] = {}

        def read_ends() -> bool:
            ends.update(probe.end_offsets(self._topic))
            return True
        try:
            caught_up = (self._wait(direct, deadline, lambda: self._published_past(stopped, reached))
                         and self._wait(direct, deadline, read_ends)
                         and self._wait(direct, deadline, lambda: self._consumed(probe, ends)))
        except FatalError as e:     # the tailer run meets it too, and stops
            caught_up = False
            log.warning("the tailer stopped applying changes directly: %s", e)
        finally:
            direct.end()
            direct.join()
            probe.close()
        if caught_up:
            log.info("the consumer has read what was published again: the tailer stopped "
                     "applying changes directly")
        elif not self._stopping.is_set() and time.monotonic() >= deadline:
            log.warning("the consumer group %s did not read what was published again within "
                        "%.0fs of Kafka serving: the tailer stopped applying changes directly "
                        "(the consumer applies them)", self._group, self._handover_max_s)

    def _wait(self, direct: "_DirectRuns", deadline: float, done: Callable[[], bool]) -> bool:
        """Ask ``done()`` until it is true (True), or the deadline or the end of ``direct``;
        a Kafka error counts as not yet."""
        while not direct.ended and time.monotonic() < deadline:
            try:
                if done():
                    return True
            except RetryableError as e:
                log.debug("handover: Kafka did not answer yet: %s", e)
            direct.wait(self._probe_every_s)
        return False

    def _published_past(self, stopped, reached: int | None) -> bool:
        tailer = self.tailer
        if tailer is stopped or tailer is None:
            return False
        acknowledged = ordinal(tailer.committed)
        return reached is None or (acknowledged is not None and acknowledged >= reached)

    def _consumed(self, probe, ends: dict[int, int]) -> bool:
        committed = probe.committed_offsets(self._group, self._topic)
        # a partition the group never committed to is caught up only while it is empty
        return all(committed.get(partition, 0) >= end for partition, end in ends.items())


class _DirectRuns:
    """Direct runs in a thread of their own until ``end()``: one that fails transiently is
    started again after a pause, one that cannot run at all (Redis refusing the credentials,
    say) leaves the cache waiting for Kafka. Each is added to ``tailer.outage_fallbacks``
    (its metrics)."""

    def __init__(self, tailer, build: Callable[[], object], stopping: threading.Event):
        self._tailer, self._build, self._stopping = tailer, build, stopping
        self._ended = threading.Event()
        self._guard = threading.Lock()
        self._runs: list = []
        self._thread = threading.Thread(target=self._loop, name="cachesync-kafka-outage",
                                        daemon=True)

    @property
    def ended(self) -> bool:
        return self._ended.is_set() or self._stopping.is_set()

    @property
    def applied(self) -> int:
        return sum(run.engine.stats.applied for run in self._runs)

    @property
    def position(self):
        """Where the running direct run's progress is (its last checkpoint)."""
        return self._runs[-1].committed if self._runs else None

    def start(self) -> None:
        self._thread.start()

    def wait(self, seconds: float) -> None:
        self._ended.wait(seconds)

    def end(self) -> None:
        self._ended.set()
        with self._guard:
            for run in self._runs:
                run.stop()

    def join(self) -> None:
        self._thread.join()

    def _loop(self) -> None:
        while not self.ended:
            try:
                run = self._build()
                with self._guard:
                    self._runs.append(run)
                    self._tailer.outage_fallbacks.append(run)
                    if self.ended:
                        return
                run.run()
            except RetryableError as e:
                log.warning("applying changes directly during the Kafka outage failed (%s); "
                            "starting again in %.0fs", e, RETRY_DIRECT_S)
                self._ended.wait(RETRY_DIRECT_S)
            except CachesyncError as e:
                log.error("cannot apply changes directly during the Kafka outage (%s): the "
                          "cache waits for Kafka", e)
                return
