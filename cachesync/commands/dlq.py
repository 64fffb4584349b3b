"""``cachesync dlq list`` and ``cachesync dlq replay``: the dead-letter topic for operators."""

from __future__ import annotations

import json

import click

from cachesync.commands.common import handle_errors, settings_options
from cachesync.consumer.adapters.dlq_tools import read_dead_letters, replay_dead_letters
from cachesync.runtime.kafka_security import client_options
from cachesync.progress import Progress


@click.group("dlq")
def command() -> None:
    """Inspect and replay the dead-letter topic (kafka.dead_letter_topic).

    A dead letter is the original record's bytes with headers: reason, detail, the
    origin topic/partition/offset, attempts (how often it was dead-lettered) and
    the message id.
    """


@command.command("list")
@settings_options
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True,
              help="Show at most this many dead letters, oldest first.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per dead letter.")
def list_command(settings, limit, as_json) -> None:
    """List dead letters from the start of the topic."""
    with handle_errors():
        letters = read_dead_letters(settings.kafka.bootstrap_servers,
                                    settings.kafka.dead_letter_topic, limit=limit,
                                    security=client_options(settings.kafka))
    if as_json:
        for d in letters:
            click.echo(json.dumps(d.summary(), ensure_ascii=False))
        return
    if not letters:
        click.echo(f"no dead letters in {settings.kafka.dead_letter_topic}")
        return
    click.echo(f"{'PART':>4} {'OFFSET':>8} {'ATT':>3}  {'REASON':<20} {'ORIGIN':<32} {'BYTES':>7}  DETAIL")
    for d in letters:
        s = d.summary()
        origin = f"{s['topic']}/{s['partition']}/{s['offset']}"
        click.echo(f"{d.partition:>4} {d.offset:>8} {s['attempts'] or '-':>3}  {s['reason']:<20} "
                   f"{origin:<32} {s['bytes']:>7}  {s['detail'][:80]}")


@command.command("replay")
@settings_options
@click.option("--reason", "reasons", multiple=True,
              help="Replay only dead letters with this reason (repeatable); others are "
                   "skipped and not offered again.")
@click.option("--dry-run", is_flag=True, help="Count what would be replayed; publish nothing.")
def replay_command(settings, reasons, dry_run) -> None:
    """Re-publish dead letters to the change topic, after fixing their cause.

    Typical use: a table was missing from the mapping (reason unknown_table); add it,
    restart the consumer, then replay. Letters still poison are dead-lettered again
    with attempts + 1. Progress is kept by the consumer group
    <kafka.group_id>.dlq-replay, so a second run replays only newer dead letters.
    """
    k = settings.kafka
    accept = (lambda d: d.header("reason") in reasons) if reasons else (lambda d: True)
    with handle_errors(), Progress(f"dlq replay {k.dead_letter_topic} (dead letters read)") as bar:
        replayed, skipped = replay_dead_letters(k.bootstrap_servers, k.dead_letter_topic, k.topic,
                                                f"{k.group_id}.dlq-replay", accept=accept,
                                                dry_run=dry_run, security=client_options(k),
                                                progress=bar.update, total=bar.set_total)
    verb = "would replay" if dry_run else "replayed"
    click.echo(f"{verb} {replayed} dead letter(s) to {k.topic}; skipped {skipped}")
