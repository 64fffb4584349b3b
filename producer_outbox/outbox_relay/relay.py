"""The outbox relay: publish committed outbox rows to Kafka, at least once.

The producer pipeline (pipeline.Pipeline) fed by the outbox source
(relay_source.OutboxSource: leased rows, one group each) sends every row and hands
``OutboxCheckpoints`` the rows Kafka acknowledged, which marks them published. A row is
marked only after Kafka acknowledged it; a relay that dies leaves leased rows that any
relay redelivers once the lease ends, with the same event id, so the consumer drops the
duplicate. Unconfirmed sends are bounded.

Failures: a send Kafka did not acknowledge (after the client's retries, or at once), or
one the client neither acknowledged nor failed within its delivery timeout plus a margin
(a wedged client, pipeline.PublisherWedged), closes the Kafka producer and the pipeline
that used it; its unacknowledged rows are redelivered when their lease ends. A MySQL
error keeps both. Either way the relay backs off and goes on.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from kafka.errors import KafkaError

from cachesync.runtime.config import RelaySettings, TailerSettings
from cachesync.producer_outbox.publish.pipeline import Pipeline, PublisherWedged
from cachesync.producer_outbox.outbox_relay.change_source import OutboxSource
from cachesync.producer_outbox.outbox_relay.store import OutboxCheckpoints, OutboxStore
from cachesync.schema.errors import FatalError, RetryableError
from cachesync.schema.retry import RetryPolicy, Stopped, call, purge_in_batches

log = logging.getLogger(__name__)

SHUTDOWN_FLUSH_S = 10.0


class Relay:
    """Publishes one outbox table; ``run()`` until ``stop()``."""

    def __init__(self, store: OutboxStore, publisher_factory: Callable[[], object],
                 settings: RelaySettings, topic: str, db: str, server: str,
                 retry: RetryPolicy = RetryPolicy(base_s=0.2, cap_s=10.0),
                 clock: Callable[[], float] = time.monotonic, from_binlog: bool = False):
        """``from_binlog``: the tailer publishes this table too (tailer.outbox_tables); the
        purge then goes by creation time, since no row is ever marked published."""
        self._store, self._factory, self._opts = store, publisher_factory, settings
        self._clock = clock
        self._topic, self._db, self._retry, self._from_binlog = topic, db, retry, from_binlog
        self._stop = threading.Event()
        self.source = OutboxSource(store, settings, db, server, self._stop, clock, from_binlog)
        self._checkpoints = OutboxCheckpoints(store, self.source.forget)
        # one record per row (the consumer reads packs too, but rows of many aggregates
        # rarely share a pack); marks saved about once per poll. The source bounds what is
        # unconfirmed (and logs while it waits): above that bound, the pipeline's own
        # back-pressure (a wait for acknowledgements) never starts.
        self._pipeline_settings = TailerSettings(
            pack_rows=1, max_inflight=settings.max_unconfirmed + 1,
            checkpoint_interval_s=settings.poll_interval_s)
        self._publisher = None
        self._pipeline: Pipeline | None = None
        self._sent_before = 0       # rows sent by pipelines closed after a failure
        self.producers_wedged = 0   # producers given up: sends unsettled past their timeout

    def stop(self) -> None:
        self._stop.set()

    @property
    def from_binlog(self) -> bool:
        return self._from_binlog

    @property
    def sent(self) -> int:
        """Rows handed to Kafka by this process."""
        return self._sent_before + (self._pipeline.published if self._pipeline else 0)

    @property
    def published(self) -> int:
        """Rows marked published by this process."""
        return self._checkpoints.marked

    @property
    def unencodable(self) -> int:
        """Leases of rows that could not be encoded (each stays unpublished)."""
        return self.source.unencodable

    @property
    def last_published_at(self) -> float | None:
        """time.time() of the newest marking."""
        return self._checkpoints.last_marked_at

    def run(self) -> None:
        """Relay until stop(); transient errors back off and retry, FatalError raises."""
        log.info("relay starting: %s outbox -> topic %s (burst %d, redeliver after %.1fs)",
                 self._db, self._topic, self._opts.burst_limit,
                 self._opts.redeliver_interval_s)
        if self.from_binlog:
            log.warning("relay: the %s outbox is also in tailer.outbox_tables: both publish "
                        "every event (the consumer skips the second copy by id); run the relay "
                        "only to switch over, or `relay --purge-only`", self._db)
        try:
            while not self._stop.is_set():
                call(self._session, "relay", self._stop, self._retry)
        except Stopped:
            pass
        finally:
            self._shutdown()

    def purge_all(self, progress: Callable[[int], None] = lambda _n: None) -> int:
        """Purge every row published longer than the retention ago, in bounded batches;
        ``progress`` hears each batch's count."""
        def batch(n: int) -> int:
            done = self.source.purge(n)
            progress(done)
            return done
        return purge_in_batches(batch, self._opts.purge_batch)

    def _session(self) -> None:
        """Feed the pipeline until stop() or a failure. A failure after rows were marked
        published returns (the next session starts with a fresh backoff); otherwise it
        raises for ``call`` to back off."""
        pipeline, marked = self._ensure_pipeline(), self.published
        try:
            pipeline.run(self.source)
        except (RetryableError, FatalError) as e:
            error = self._after_failure(pipeline, e)
            if (isinstance(error, FatalError) or self.published == marked
                    or self._stop.is_set()):
                if error is e:
                    raise
                raise error from e
            log.warning("relay: %s; retrying at once (rows were published before it)", error)

    def _ensure_pipeline(self) -> Pipeline:
        if self._pipeline is None:
            if self._publisher is None:
                self._publisher = self._factory()   # raises RetryableError if Kafka is down
                log.info("relay connected to Kafka")
            self._pipeline = Pipeline(self._publisher, self._checkpoints, self._topic,
                                      self._pipeline_settings, self._clock)
        return self._pipeline

    def _after_failure(self, pipeline: Pipeline, error: Exception) -> Exception:
        """Mark what Kafka acknowledged; after a failed send, drop the pipeline and its
        producer (its unconfirmed rows come back when their lease ends). Returns the error
        to retry on: a send Kafka refused for good is retried too, since the row is
        redelivered and warned about at every relay.warn_after_attempts."""
        try:
            pipeline.save_checkpoint()
        except RetryableError as e:
            log.warning("relay: acknowledged rows not marked published (redelivered later): %s",
                        e)
        if not pipeline.failed:
            return error            # MySQL: the pipeline and the producer are fine
        if isinstance(error, PublisherWedged):      # the pipeline logged the WARNING
            self.producers_wedged += 1
        self._sent_before += pipeline.published
        self._pipeline = None
        self.source.forget_all()
        self._reset_publisher()
        return RetryableError(f"Kafka did not acknowledge outbox event(s) ({error}); they "
                              "will be redelivered after relay.redeliver_interval_s")

    def _reset_publisher(self) -> None:
        if self._publisher is not None:
            publisher, self._publisher = self._publisher, None
            try:
                publisher.close(0)
            except KafkaError as e:
                log.info("closing the Kafka producer: %s", e)

    def _shutdown(self) -> None:
        if self._pipeline is not None:
            try:
                self._pipeline.drain(SHUTDOWN_FLUSH_S)
            except (KafkaError, RetryableError) as e:
                log.warning("relay stopping with unconfirmed or unmarked rows (redelivered "
                            "later): %s", e)
        self._reset_publisher()
        self._checkpoints.close()
        log.info("relay stopped: %d sent, %d marked published", self.sent, self.published)
