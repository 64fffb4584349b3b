"""Kafka checks: topics against the dedup retention, ACLs where visible, the consumer
group's state and lag."""

from __future__ import annotations

from kafka.errors import (CoordinatorLoadInProgressError, CoordinatorNotAvailableError,
                          GroupIdNotFoundError, NotCoordinatorError)

from cachesync.runtime.config import Settings
from cachesync.doctor.check import FAIL, NOTE, PASS, WARN, Check

COORDINATOR_NOT_READY = (CoordinatorNotAvailableError, CoordinatorLoadInProgressError,
                         NotCoordinatorError, GroupIdNotFoundError)


def topic_checks(settings: Settings, admin) -> list[Check]:
    """Each topic exists, has partitions, and keeps records no longer than the dedup store
    keeps ids (or a redelivered record older than its id would be applied twice)."""
    from cachesync.topics import describe_topics, topic_names
    out = []
    dedup_ms = settings.consumer.dedup_retention_s * 1000
    for t in describe_topics(admin, topic_names(settings)):
        if not t.exists and settings.kafka.create_topics:
            out.append(Check("topic", NOTE, f"{t.name} does not exist yet: kafka.create_topics "
                             "makes it when tail, consume or run starts"))
        elif not t.exists:
            out.append(Check("topic", FAIL, f"{t.name} does not exist",
                             "cachesync topics create (or kafka.create_topics: true)"))
        elif dedup_ms and (t.retention_ms == -1 or (t.retention_ms or 0) >= dedup_ms):
            out.append(Check("topic", WARN, f"{t.describe()}: longer than "
                             f"consumer.dedup_retention_s ({settings.consumer.dedup_retention_s:g} s)",
                             "lower the topic's retention.ms or raise consumer.dedup_retention_s"))
        else:
            out.append(Check("topic", PASS, t.describe()))
    return out


# what each role does on each topic (Kafka ACL operations)
TOPIC_OPERATIONS = {"tail": {"topic": ("WRITE", "DESCRIBE")},
                    "consume": {"topic": ("READ", "DESCRIBE"), "dead_letter_topic": ("WRITE",)}}


def acl_check(settings: Settings, admin, role: str) -> Check:
    """The ACLs of ``kafka.sasl_username`` on the topics, where the brokers show them."""
    from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             ResourcePatternFilter, ResourceType)
    user = settings.kafka.sasl_username
    if not user:
        return Check("kafka-acls", PASS, "no SASL user: ACLs not checked (the principal of a "
                     "plaintext or TLS client is the broker's to name)")
    needed: dict[str, set[str]] = {}
    for r, ops in TOPIC_OPERATIONS.items():
        if role in ("all", r):
            for field, names in ops.items():
                needed.setdefault(getattr(settings.kafka, field), set()).update(names)
    gaps = []
    for topic, ops in needed.items():
        found = admin.describe_acls(ACLFilter(
            principal=f"User:{user}", host="*", operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY, resource_pattern=ResourcePatternFilter(
                ResourceType.TOPIC, topic, ACLResourcePatternType.MATCH)))
        acls = found[0] if isinstance(found, tuple) else found
        allowed = {a.operation.name for a in acls if a.permission_type == ACLPermissionType.ALLOW}
        denied = {a.operation.name for a in acls if a.permission_type == ACLPermissionType.DENY}
        blocked = sorted(op for op in ops if op in denied or "ALL" in denied)
        if blocked:
            gaps.append(f"{topic}: {', '.join(blocked)} denied")
        elif acls and "ALL" not in allowed and ops - allowed:
            gaps.append(f"{topic}: {', '.join(sorted(ops - allowed))} not allowed")
    if gaps:
        return Check("kafka-acls", WARN, f"User:{user}: " + "; ".join(gaps),
                     "kafka-acls --add --allow-principal User:<user> --operation <op> --topic <topic>")
    return Check("kafka-acls", PASS, f"User:{user}: no ACL denies what it needs")


def acls_or_hidden(settings: Settings, admin, role: str) -> Check:
    from kafka.errors import ClusterAuthorizationFailedError, SecurityDisabledError
    try:
        return acl_check(settings, admin, role)
    except SecurityDisabledError:
        return Check("kafka-acls", PASS, "no authorizer on the brokers: ACLs are not enforced")
    except ClusterAuthorizationFailedError:
        return Check("kafka-acls", PASS, "ACLs not visible to this account (DESCRIBE on the "
                     "cluster is needed to read them)")
    except Exception as e:        # the other Kafka checks stand on their own
        return Check("kafka-acls", WARN, f"could not read the ACLs: {type(e).__name__}: {e}")


def group_check(settings: Settings, admin) -> Check:
    """The consumer group's state and its lag (end offsets minus committed): a lag with no
    member consuming is a WARN; no group yet (a new pipeline) is a NOTE."""
    from cachesync.wiring import range_reader
    group, topic = settings.kafka.group_id, settings.kafka.topic
    try:
        state = admin.describe_groups([group])[group]["group_state"]
        committed = admin.list_group_offsets(group)[group]
    except COORDINATOR_NOT_READY:
        return Check("consumer-group", NOTE, f"no group {group} yet: nothing has consumed "
                     "from these brokers (a first `cachesync consume` or `run` makes it and "
                     "begins at the earliest offset)")
    mine = {tp: o.offset for tp, o in committed.items() if tp.topic == topic and o.offset >= 0}
    if not mine:
        return Check("consumer-group", PASS, f"group {group} has not consumed {topic} yet (a "
                     "first start begins at the earliest offset)")
    consumer = range_reader(settings)     # group-less, commits nothing
    try:
        ends = consumer.end_offsets(list(mine))
    finally:
        consumer.close()
    lag = sum(max(0, ends[tp] - off) for tp, off in mine.items())
    if lag and state in ("Empty", "Dead"):
        return Check("consumer-group", WARN, f"group {group} has no member ({state}) and "
                     f"{lag} record(s) of {topic} wait: nothing applies them to Redis",
                     "start `cachesync consume` (or `cachesync run`)")
    return Check("consumer-group", PASS, f"group {group} {state}, lag {lag} record(s) over "
                 f"{len(mine)} partition(s)")
