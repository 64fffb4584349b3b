"""The tailer's runtime stack, built in one place for ``tail`` and ``run`` (``--direct`` too).

From the inside out: ``build()`` makes one tailer (publishing to Kafka, or applying in
process); ``while_held`` refuses to build it once this process lost the tailer lock;
``RestartingTailer`` rebuilds it from the checkpoint after a transient failure;
``KafkaOutageFallback`` applies changes directly while Kafka does not serve
(``tailer.on_kafka_outage``, with a ``fallback`` builder);
``ResyncingTailer`` handles a purged checkpoint position (``tailer.on_lost_position``);
``ActiveStandby`` takes the lock, or runs the preflight and waits for the lock as a hot
standby, and runs the rest while it holds it.
"""

from __future__ import annotations

from typing import Callable

from cachesync.runtime import startup
from cachesync.kafka_outage import KafkaOutageFallback
from cachesync.runtime.config import Settings
from cachesync.resync import ResyncingTailer
from cachesync.standby import ActiveStandby, while_held
from cachesync.supervisor import RestartingTailer
from cachesync.wiring import build_tailer_lock, kafka_offsets, tailer_preflight


def tailer_stack(settings: Settings, build: Callable[[], object],
                 fallback: Callable[[], object] | None = None) -> ActiveStandby:
    """The Runnable that tails as ``tailer.name`` while it holds the lock; ``build()`` is
    called for every (re)start and returns the tailer to run; ``fallback(start)``, for a
    tailer publishing to Kafka, the direct run of a Kafka outage from ``start``
    (``tailer.on_kafka_outage: invalidate``)."""
    lock = build_tailer_lock(settings)
    preflight = tailer_preflight(settings)

    def checked():
        preflight()
        startup.mark("preflight")

    def held():
        startup.mark("lock")        # built once this process holds the lock
        term = while_held(lock, build)
        if fallback is not None and settings.tailer.on_kafka_outage == "invalidate":
            tailer, direct = term, while_held(lock, fallback)

            def term():
                return KafkaOutageFallback(tailer, direct, lambda: kafka_offsets(settings),
                                           settings.kafka.topic, settings.kafka.group_id)
        return ResyncingTailer(settings, RestartingTailer(term))
    return ActiveStandby(lock, held, checked)
