"""A publisher started in a thread, so that a tailer's start does not wait for it.

Starting the Kafka publisher (the child process's interpreter and kafka-python, the
bootstrap) takes as long as the tailer's own start (preflight, checkpoint, column types, the
binlog connect). ``StartingPublisher`` runs the two side by side: the first call that needs
the publisher waits for it, and raises what its start raised (RetryableError: Kafka
unreachable; FatalError: login refused), so the tailer stops before it reads a record it
could not send, exactly as if the publisher had failed to start first.
"""

from __future__ import annotations

import threading
from typing import Callable

from cachesync.runtime import startup
from cachesync.schema.errors import RetryableError

# A call bounded by ``timeout_s`` (the tailer's outage limit, tailer.kafka_outage_after_s)
# waits this much longer for the publisher's start: a start is slower than a metadata
# request (a child interpreter, a client's first connection, a host short of CPU), and a
# start that outlasts both is one waiting for an unreachable Kafka (its own bootstrap gives
# up only after BOOTSTRAP_TIMEOUT_MS, 10 s)
START_SLACK_S = 2.0


def _nothing_to_serve(alone: bool = False) -> None:
    """``serve_acks`` of a publisher that serves its acknowledgements itself."""


class StartingPublisher:
    """The publisher ``start()`` returns, started in a daemon thread at construction."""

    def __init__(self, start: Callable[[], object], delivery_timeout_s: float | None = None):
        """``delivery_timeout_s``: the started publisher's (the pipeline's wedge check)."""
        self.delivery_timeout_s = delivery_timeout_s
        self._ready = threading.Event()
        self._publisher: object | None = None
        self._error: BaseException | None = None
        threading.Thread(target=self._start, args=(start,), name="cachesync-publisher-start",
                         daemon=True).start()

    def _start(self, start: Callable[[], object]) -> None:
        try:
            self._publisher = start()
            startup.mark("publisher")
        except BaseException as e:       # raised again in the tailer's thread, at first use
            self._error = e
        finally:
            self._ready.set()

    def started(self, timeout_s: float | None = None):
        """The publisher, once started; raises what its start raised, or RetryableError
        when it has not started within ``timeout_s`` (None: waits for it)."""
        if not self._ready.wait(timeout_s):
            raise RetryableError(f"the Kafka publisher has not started within {timeout_s:g}s "
                                 "(is Kafka reachable?)")
        if self._error is not None:
            raise self._error
        publisher = self._publisher
        # from now on the tailer calls the publisher itself: nothing is added per record
        self.send, self.partitions, self.flush = publisher.send, publisher.partitions, publisher.flush
        self.serve_acks = getattr(publisher, "serve_acks", _nothing_to_serve)
        return publisher

    def send(self, *args, **kwargs) -> None:
        self.started().send(*args, **kwargs)

    def partitions(self, topic: str, timeout_s: float | None = None) -> list[int]:
        """The topic's partitions; with ``timeout_s`` a start still going on is waited for
        at most START_SLACK_S longer (RetryableError after that), and the request then gets
        ``timeout_s``."""
        if timeout_s is None:
            return self.started().partitions(topic)
        return self.started(timeout_s + START_SLACK_S).partitions(topic, timeout_s=timeout_s)

    def flush(self, *args, **kwargs) -> None:
        self.started().flush(*args, **kwargs)

    def serve_acks(self, alone: bool = False) -> None:
        """The started publisher's ``serve_acks`` (RdKafkaPublisher), if it has one; before
        its start ends nothing was sent, so there is nothing to serve."""
        if self._ready.is_set() and self._error is None:
            self.started().serve_acks(alone)

    def close(self, *args, **kwargs) -> None:
        """Close the publisher once its start ended (nothing to close if it failed)."""
        self._ready.wait()
        if self._publisher is not None:
            self._publisher.close(*args, **kwargs)

    def __repr__(self) -> str:
        state = (repr(self._publisher) if self._publisher is not None else
                 "failed" if self._error is not None else "starting")
        return f"StartingPublisher({state})"
