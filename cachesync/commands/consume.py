"""``cachesync consume``: apply change events from Kafka to Redis, idempotently."""

from __future__ import annotations

import click

from cachesync.commands.common import handle_errors, log, on_termination, settings_options
from cachesync.wiring import build_engine


@click.command("consume")
@settings_options
def command(settings) -> None:
    """Consume change events and invalidate the mapped Redis keys.

    Per batch: claim the message ids in the dedup table, skip those already done,
    delete the keys rendered from the before and after images, mark the ids done,
    then commit the Kafka offsets. Undecodable records and unknown tables go to the
    dead-letter topic (kafka.dead_letter_topic) with a reason; consumption goes on.
    """
    with handle_errors():
        engine = build_engine(settings)
        on_termination(engine.stop)
        try:
            engine.run()
        finally:
            engine.close()
        s = engine.stats
        log.info("consumer stopped: %d consumed, %d applied, %d duplicates, %d dead-lettered",
                 s.consumed, s.applied, s.duplicates, s.dead_lettered)
