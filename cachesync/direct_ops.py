"""Metrics, heartbeats and health for ``cachesync run --direct`` (there is no Kafka to probe).

Built from the same parts as ``cachesync.operate`` for ``tail`` and ``consume``: one
registry with the tailer's and the consumer's counters and the commit->apply lag
histogram, a heartbeat writer so lag stays measurable while idle, and /readyz =
MySQL and Redis answer and the lag is under ``metrics.ready_max_lag_s``.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from typing import Callable

import redis

from cachesync.config import Settings
from cachesync.metrics import TAILER_COUNTERS, ConsumerMetrics, counters, heartbeat_gauge
from cachesync.operate import REDIS_PROBE_TIMEOUT_S, Ops
from cachesync.wiring import mysql_params
from producer_outbox.heartbeat import HeartbeatWriter


class DirectOps:
    """Started on construction; ``metrics.on_batch`` is the engine's hook; ``close()`` stops all."""

    def __init__(self, settings: Settings, engine_stats: Callable[[], object],
                 tailer: Callable[[], object]):
        self._closing = ExitStack()
        try:
            self._start(settings, engine_stats, tailer)
        except BaseException:
            self._closing.close()
            raise

    def _start(self, settings, engine_stats, tailer) -> None:
        ops = Ops(settings, "consume")
        self._closing.callback(ops.close)
        counters(ops.registry, tailer, TAILER_COUNTERS)
        self.metrics = ConsumerMetrics(ops.registry, engine_stats, settings.mysql.state_db)
        t = settings.tailer
        if t.heartbeat_interval_s > 0:
            writer = HeartbeatWriter(mysql_params(settings).connect, t.name, t.heartbeat_interval_s)
            heartbeat_gauge(ops.registry, writer)
            stop = threading.Event()
            thread = threading.Thread(target=writer.run, args=(stop,), daemon=True,
                                      name="cachesync-heartbeat")
            thread.start()
            self._closing.callback(writer.close)
            self._closing.callback(stop.set)
        session = ops.session()
        cache = redis.Redis.from_url(str(settings.redis.url), socket_timeout=REDIS_PROBE_TIMEOUT_S,
                                     socket_connect_timeout=REDIS_PROBE_TIMEOUT_S)
        self._closing.callback(cache.close)

        def probe():
            session.run(lambda cur: cur.execute("SELECT 1"))
            try:
                cache.ping()
            except redis.RedisError as e:
                raise ConnectionError(f"Redis unavailable: {e}") from e

        max_lag = settings.metrics.ready_max_lag_s
        ops.start(probe, [lambda: self.metrics.lag_problem(max_lag)])

    def close(self) -> None:
        self._closing.close()
