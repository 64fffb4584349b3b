"""``cachesync topics``: create and show the Kafka topics cachesync uses."""

from __future__ import annotations

import click

from cachesync.commands.common import handle_errors, settings_options


@click.group("topics")
def command() -> None:
    """Create or show kafka.topic and kafka.dead_letter_topic."""


@command.command("create")
@settings_options
def create(settings) -> None:
    """Create the change and dead-letter topics when missing.

    Partitions, replication factor and retention come from kafka.topic_partitions,
    kafka.topic_replication_factor (-1: the broker's default) and kafka.topic_retention_s.
    An existing topic is left as it is and shown. Needs the CREATE permission on the
    topics (Kafka ACLs) on a secured cluster.
    """
    from cachesync.topics import create_topics
    with handle_errors():
        for state in create_topics(settings):
            click.echo(state.describe())


@command.command("show")
@settings_options
def show(settings) -> None:
    """Show the topics: partitions and retention (never creates one)."""
    from cachesync.topics import admin_client, describe_topics, topic_names
    with handle_errors():
        admin = admin_client(settings)
        try:
            for state in describe_topics(admin, topic_names(settings)):
                click.echo(state.describe())
        finally:
            admin.close()
