"""The Kafka topics cachesync uses: create them with the configured partitions,
replication factor and retention, and describe what exists (``topics create``, ``doctor``,
and ``kafka.create_topics`` for tail and consume)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from cachesync.runtime.config import Settings
from cachesync.runtime.kafka_security import client_options
from cachesync.schema.errors import FatalError, RetryableError

log = logging.getLogger(__name__)

ADMIN_TIMEOUT_MS = 10_000
VISIBLE_POLL_S = 0.1     # how often a created topic's metadata is asked for until it shows


@dataclass(frozen=True)
class TopicState:
    """A topic as the broker describes it (``exists`` False: nothing else is known)."""

    name: str
    exists: bool
    partitions: int = 0
    retention_ms: int | None = None      # None: unknown; -1: unlimited
    created: bool = False

    def describe(self) -> str:
        if not self.exists:
            return f"{self.name}: missing"
        retention = ("unlimited" if self.retention_ms == -1 else
                     f"{self.retention_ms / 86_400_000:g} d" if self.retention_ms else "?")
        return (f"{self.name}: {'created' if self.created else 'exists'}, "
                f"{self.partitions} partition(s), retention {retention}")


def admin_client(settings: Settings) -> KafkaAdminClient:
    """An admin client; raises RetryableError when no broker answers."""
    try:
        return KafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers,
                                request_timeout_ms=ADMIN_TIMEOUT_MS,
                                client_id="cachesync-admin", **client_options(settings.kafka))
    except KafkaError as e:
        raise RetryableError(f"Kafka unavailable at {settings.kafka.bootstrap_servers}: {e}") from e


def topic_names(settings: Settings) -> tuple[str, str]:
    return settings.kafka.topic, settings.kafka.dead_letter_topic


def describe_topics(admin: KafkaAdminClient, names) -> list[TopicState]:
    """Each named topic: partitions and retention.ms (never creates one: a metadata request
    for named topics could, on a broker with auto-creation on, so all topics are listed)."""
    existing = set(admin.list_topics())
    present = [n for n in names if n in existing]
    partitions = {t["name"]: len(t["partitions"]) for t in admin.describe_topics(present)} \
        if present else {}
    retention = _retention(admin, present)
    return [TopicState(n, n in existing, partitions.get(n, 0), retention.get(n)) for n in names]


def _retention(admin: KafkaAdminClient, names) -> dict[str, int]:
    if not names:
        return {}
    reply = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, n) for n in names],
                                   config_filter="all")
    out = {}
    for name, configs in reply.get("topic", {}).items():
        value = (configs.get("retention.ms") or {}).get("value")
        if value is not None:
            out[name] = int(value)
    return out


def create_topics(settings: Settings) -> list[TopicState]:
    """Create the change and dead-letter topics that are missing (the configured
    partitions, replication factor, retention); those that exist are left as they are.
    Raises FatalError when the broker refuses (authorization, replication factor above
    the brokers), RetryableError when it cannot be reached."""
    k = settings.kafka
    admin = admin_client(settings)
    try:
        before = {t.name: t for t in describe_topics(admin, topic_names(settings))}
        missing = [n for n, t in before.items() if not t.exists]
        if missing:
            new = [NewTopic(n, k.topic_partitions, k.topic_replication_factor,
                            topic_configs={"retention.ms": str(int(k.topic_retention_s * 1000))})
                   for n in missing]
            try:
                admin.create_topics(new, timeout_ms=ADMIN_TIMEOUT_MS)
            except TopicAlreadyExistsError:
                pass                     # another process created it meanwhile
            except KafkaError as e:
                raise FatalError(f"Kafka refused to create {', '.join(missing)}: "
                                 f"{type(e).__name__}: {e}") from e
            for name in missing:
                log.info("created Kafka topic %s (%d partitions, replication factor %s, "
                         "retention %g s)", name, k.topic_partitions,
                         k.topic_replication_factor, k.topic_retention_s)
        after = _described_once_visible(admin, topic_names(settings), missing)
        return [TopicState(t.name, t.exists, t.partitions, t.retention_ms,
                           created=t.name in missing and t.exists) for t in after]
    except KafkaError as e:
        raise RetryableError(f"Kafka admin request failed: {type(e).__name__}: {e}") from e
    finally:
        admin.close()


def _described_once_visible(admin: KafkaAdminClient, names, created) -> list[TopicState]:
    """The topics described once every one just ``created`` shows in the broker's metadata.

    A broker acknowledges CreateTopics when the controller has committed it; the broker
    answering metadata may apply it a moment later (KRaft), and would describe the topic as
    missing. Waits at most ADMIN_TIMEOUT_MS, then describes what the broker shows."""
    deadline = time.monotonic() + ADMIN_TIMEOUT_MS / 1000
    while True:
        states = describe_topics(admin, names)
        unseen = [t.name for t in states if t.name in created and not t.exists]
        if not unseen or time.monotonic() >= deadline:
            if unseen:
                log.warning("Kafka acknowledged creating %s but its metadata does not show it "
                            "after %d s", ", ".join(unseen), ADMIN_TIMEOUT_MS // 1000)
            return states
        time.sleep(VISIBLE_POLL_S)


def ensure_topics(settings: Settings) -> None:
    """``kafka.create_topics``: create what is missing before tail or consume starts."""
    if settings.kafka.create_topics:
        for state in create_topics(settings):
            log.info("topic %s", state.describe())
