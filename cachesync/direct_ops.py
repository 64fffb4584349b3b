"""Metrics, heartbeats and health for ``cachesync run --direct`` (there is no Kafka to probe).

Built from the same parts as ``cachesync.operate`` for ``tail`` and ``consume``: one
registry with the tailer's and the consumer's counters and the commit->apply lag
histogram, a heartbeat writer so lag stays measurable while idle, and /readyz =
MySQL and Redis answer and the lag is under ``metrics.ready_max_lag_s``.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Callable

from cachesync.runtime.config import Settings
from cachesync.runtime.metrics import TAILER_COUNTERS, ConsumerMetrics, counters
from cachesync.operate import Ops


class DirectOps:
    """Started on construction; ``metrics.on_batch`` is the engine's hook; ``close()`` stops all."""

    def __init__(self, settings: Settings, engine_stats: Callable[[], object],
                 tailer: Callable[[], object], tables: Callable[[], object] | None = None):
        self._closing = ExitStack()
        try:
            self._start(settings, engine_stats, tailer, tables)
        except BaseException:
            self._closing.close()
            raise

    def _start(self, settings, engine_stats, tailer, tables) -> None:
        ops = Ops(settings, "consume")
        self._closing.callback(ops.close)
        counters(ops.registry, tailer, TAILER_COUNTERS)
        self.metrics = ConsumerMetrics(ops.registry, engine_stats, tables=tables)
        ops.heartbeat()
        session, redis_ping = ops.session(), ops.redis_ping()

        def probe():
            session.run(lambda cur: cur.execute("SELECT 1"))
            redis_ping()

        max_lag = settings.metrics.ready_max_lag_s
        ops.start(probe, [lambda: self.metrics.lag_problem(max_lag)])

    def close(self) -> None:
        self._closing.close()
