"""``cachesync status``: checkpoint, lag, Kafka consumer lag, dedup records, dead letters."""

from __future__ import annotations

import json
import sys

import click

from cachesync.runtime import logs
from cachesync.commands.common import EXIT_RUNTIME, handle_errors, settings_options
from cachesync import wiring
from cachesync.probes import applied_lag, checkpoint_info
from cachesync.schema.errors import CachesyncError

SCHEMA_VERSION = 1


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a table.")
@settings_options
def command(settings, as_json: bool) -> None:
    """Show the pipeline's state as stored in MySQL and Kafka (and Redis: its dedup store).

    Checkpoint position and age, and the active process, of every tailer; commit->apply lag of the newest
    heartbeat the consumer group applied, Kafka consumer lag (end minus committed
    offsets), dedup records of the group's namespace in consumer.dedup_store, dead-letter
    topic depth.
    A part whose server is unreachable shows its error; the exit code is then 1.
    """
    with handle_errors():
        report = collect(settings)
    click.echo(json.dumps(report, indent=2) if as_json else render(report))
    if report["errors"]:
        logs.final(f"status incomplete: {', '.join(sorted(report['errors']))} could not be read",
                   EXIT_RUNTIME)
        sys.exit(EXIT_RUNTIME)


def collect(settings) -> dict:
    """The status document (schema version SCHEMA_VERSION); errors are collected, not raised."""
    k, ns = settings.kafka, settings.dedup_namespace
    session, kafka = wiring.state_session(settings), wiring.kafka_offsets(settings)
    dedup_store = wiring.build_dedup(settings)
    errors: dict[str, str] = {}

    def part(name, fn):
        try:
            return fn()
        except CachesyncError as e:
            errors[name] = str(e)
            return None
    try:
        checkpoints = part("checkpoints", lambda: [vars(c) for c in checkpoint_info(session)])
        lag = part("lag", lambda: [vars(a) for a in applied_lag(session, ns)])
        dedup = part("dedup", dedup_store.counts)
        per_partition = part("kafka", lambda: kafka.consumer_lag(k.group_id, k.topic))
        if "kafka" in errors:        # unreachable: do not wait for the same timeout twice
            errors["dead_letters"], depth = errors["kafka"], None
        else:
            depth = part("dead_letters", lambda: kafka.depth(k.dead_letter_topic))
    finally:
        session.close()
        kafka.close()
        dedup_store.close()
    return {
        "schema_version": SCHEMA_VERSION,
        "checkpoints": checkpoints,
        "lag": lag,
        "kafka": None if per_partition is None else {
            "topic": k.topic, "group": k.group_id, "consumer_lag": sum(per_partition.values()),
            "partitions": {str(p): n for p, n in sorted(per_partition.items())}},
        "dedup": None if dedup is None else {"namespace": ns, **dedup,
                                             "total": sum(dedup.values())},
        "dead_letters": None if depth is None else {"topic": k.dead_letter_topic, "depth": depth},
        "errors": errors,
    }


def render(report: dict) -> str:
    rows: list[tuple[str, str]] = []
    for c in report["checkpoints"] or []:
        rows.append((f"checkpoint {c['name']}", f"{c['position']}  (moved {c['age_s']:.1f}s ago)"))
        rows.append((f"active tailer {c['name']}",
                     f"{c['active']} (since {c['active_since']})" if c["active"] else "none"))
    if report["checkpoints"] == []:
        rows.append(("checkpoint", "none stored yet"))
    for a in report["lag"] or []:
        rows.append((f"commit->apply lag ({a['source']})",
                     f"{a['commit_to_apply_s'] * 1000:.1f} ms  (measured {a['measured_s_ago']:.1f}s ago)"))
    if report["lag"] == []:
        rows.append(("commit->apply lag", "no heartbeat applied yet (is `cachesync tail` running?)"))
    if report["kafka"]:
        kf = report["kafka"]
        rows.append((f"kafka consumer lag ({kf['group']})", f"{kf['consumer_lag']} messages on {kf['topic']}"))
    if report["dedup"]:
        d = report["dedup"]
        rows.append((f"dedup records ({d['namespace']})", f"{d['total']} ({d['done']} done, {d['claimed']} claimed)"))
    if report["dead_letters"]:
        rows.append((f"dead letters ({report['dead_letters']['topic']})", str(report["dead_letters"]["depth"])))
    for name, error in report["errors"].items():
        rows.append((f"{name}", f"ERROR: {error}"))
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)
