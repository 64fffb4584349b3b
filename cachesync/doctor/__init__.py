"""``cachesync doctor``: everything that can be checked before running, each a PASS, NOTE,
WARN or FAIL with the fix. ``tail`` and ``consume`` run the same checks at start and log what
is not PASS (a NOTE at INFO, the others as a WARNING); the server's settings and grants stay the tailer's preflight
(``producer_outbox.binlog.preflight``), whose functions these checks reuse.
"""

from __future__ import annotations

import logging
import time

from cachesync.runtime import startup
from cachesync.runtime.config import Settings
from cachesync.doctor.check import (EXIT_CODES, FAIL, LEVELS, NOTE, PASS, WARN, Check,  # noqa: F401
                                    guard, worst)
from cachesync.doctor.kafka import acls_or_hidden, group_check, topic_checks
from cachesync.doctor.mysql import mysql_checks
from cachesync.doctor.services import (first_start_check, has_checkpoint, mysql_clock,
                                       redis_check, skew_check)

log = logging.getLogger(__name__)


def unsafe_settings(settings: Settings) -> list[str]:
    """Settings that load but work against each other (the documented safe ranges)."""
    k, c = settings.kafka, settings.consumer
    out = []
    if c.claim_lease_s * 1000 >= k.session_timeout_ms:
        out.append(f"consumer.claim_lease_s ({c.claim_lease_s:g} s) is not below "
                   f"kafka.session_timeout_ms ({k.session_timeout_ms} ms): a partition's new "
                   "owner waits out the lease, stalling failover")
    if c.dedup_retention_s and c.dedup_retention_s <= k.topic_retention_s:
        out.append(f"consumer.dedup_retention_s ({c.dedup_retention_s:g} s) is not above "
                   f"kafka.topic_retention_s ({k.topic_retention_s:g} s): a redelivered record "
                   "older than its dedup record is applied twice")
    return out


def settings_check(settings: Settings) -> Check:
    found = unsafe_settings(settings)
    if found:
        return Check("settings", WARN, "; ".join(found), "change the settings named")
    return Check("settings", PASS, "within the documented safe ranges")


def run_checks(settings: Settings, role: str = "all", had_checkpoint: bool | None = None
               ) -> list[Check]:
    """Every check for ``role`` (all, tail, consume; direct: tail's and Redis's, no Kafka);
    a service that does not answer is a FAIL naming it, never an exception.
    ``had_checkpoint``: whether the tailer had a checkpoint before this process started
    (None: read it now)."""
    from cachesync import wiring
    from cachesync.topics import admin_client
    out: list[Check] = [settings_check(settings)]
    params = wiring.mysql_params(settings)
    if role in ("all", "tail", "direct"):
        out += guard("mysql", lambda: mysql_checks(settings, wiring.source_params(settings).connect,
                                                   params.connect))
    out += guard("clock-skew", lambda: [skew_check("mysql", mysql_clock(params.connect),
                                                    time.time())])

    def kafka() -> list[Check]:
        admin = admin_client(settings)
        try:
            found = topic_checks(settings, admin) + [acls_or_hidden(settings, admin, role)]
            return found + ([group_check(settings, admin)] if role in ("all", "consume") else [])
        finally:
            admin.close()
    if role != "direct":
        out += guard("kafka", kafka)
    def redis_checks() -> list[Check]:
        client = wiring.redis_client(settings, 5)
        try:
            # the tailer uses Redis while Kafka is away (tailer.on_kafka_outage: invalidate)
            uses = role != "tail" or settings.tailer.on_kafka_outage == "invalidate"
            found = redis_check(settings, client) if uses else []
            if role != "consume":
                found.append(first_start_check(settings, has_checkpoint(
                    params.connect, settings) if had_checkpoint is None else had_checkpoint,
                    client))
            return found
        finally:
            client.close()
    out += guard("redis", redis_checks)
    return out


def start_checks(settings: Settings, role: str) -> None:
    """At tail/consume start: create the topics if configured (before anything subscribes or
    publishes: a broker that creates topics on first use would make them with its own
    defaults); doctor's checks, which only log what is not PASS, run in the background once
    the process reads (the tailer's preflight still refuses a server that is not ready,
    before it reads)."""
    from cachesync.topics import ensure_topics
    if role != "direct":
        ensure_topics(settings)
    startup.mark("topics")
    # read now: the tailer's first start stores a checkpoint before the checks run
    had = _had_checkpoint(settings) if role != "consume" else None
    startup.after_start(lambda: log_checks(settings, role, had), "doctor-checks")


def _had_checkpoint(settings: Settings) -> bool | None:
    """Whether the tailer has a stored checkpoint; None when MySQL does not answer (the
    preflight says so next)."""
    from cachesync import wiring
    from cachesync.schema.errors import CachesyncError
    try:
        return has_checkpoint(wiring.mysql_params(settings).connect, settings)
    except CachesyncError:
        return None


def log_checks(settings: Settings, role: str, had_checkpoint: bool | None = None) -> None:
    """Log each of ``role``'s checks that is not PASS: a NOTE at INFO, the others as a WARNING."""
    for check in run_checks(settings, role, had_checkpoint):
        if check.level != PASS:
            log.log(logging.INFO if check.level == NOTE else logging.WARNING,
                    "doctor: %s %s: %s%s", check.level, check.name, check.detail,
                    f" (fix: {check.fix})" if check.fix else "")
