"""What the operator surface measures outside the pipeline's own counters.

Kafka consumer lag (end offsets minus committed), topic depth (dead letters), the
tailer's checkpoint age and the newest applied heartbeat, read from Kafka and
MySQL. Used by the ``/metrics`` probe thread and by ``cachesync status``. Every
function raises RetryableError when its server is unreachable.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import OffsetSpec
from kafka.errors import KafkaError

from cachesync.consumer.adapters.kafka_source import RECONNECT_BACKOFF_MAX_MS
from cachesync.producer_outbox.binlog.leader import lock_name
from cachesync.runtime.kafka_login import refused_login_is_fatal
from cachesync.schema.errors import FatalError, RetryableError

log = logging.getLogger(__name__)

KAFKA_TIMEOUT_MS = 5000


class KafkaOffsets:
    """One lazily created admin client; dropped after any error so the next call reconnects."""

    def __init__(self, bootstrap_servers: str, timeout_ms: int = KAFKA_TIMEOUT_MS,
                 security: Mapping | None = None):
        self._bootstrap, self._timeout_ms = bootstrap_servers.split(","), timeout_ms
        self._security = dict(security or {})
        self._admin: KafkaAdminClient | None = None

    def consumer_lag(self, group: str, topic: str) -> dict[int, int]:
        """Per partition: end offset minus the group's committed offset (start if none)."""
        return self._lag(topic, lambda admin: self._committed(admin, group, topic))

    def lag_behind(self, topic: str, offsets: dict[int, int]) -> dict[int, int]:
        """Per partition: end offset minus ``offsets`` (a Spark checkpoint's; start if none)."""
        return self._lag(topic, lambda admin: offsets)

    def _lag(self, topic: str, committed: Callable) -> dict[int, int]:
        # the earliest offsets only of partitions with nothing committed: a probe runs every
        # metrics.probe_interval_s in every process, and each request costs the client
        def work(admin):
            parts = self._partitions(admin, topic)
            ends = self._offsets(admin, parts, OffsetSpec.LATEST)
            done = committed(admin)
            starts = self._offsets(admin, [tp for tp in parts if tp.partition not in done],
                                   OffsetSpec.EARLIEST)
            return {tp.partition: max(0, end - done.get(tp.partition, starts.get(tp, 0)))
                    for tp, end in ends.items()}
        return self._run(work)

    def depth(self, topic: str) -> int:
        """Records currently held by ``topic`` (end minus earliest offset, all partitions)."""
        def work(admin):
            parts = self._partitions(admin, topic)
            ends = self._offsets(admin, parts, OffsetSpec.LATEST)
            starts = self._offsets(admin, parts, OffsetSpec.EARLIEST)
            return sum(ends[tp] - starts[tp] for tp in ends)
        return self._run(work)

    def check_topic(self, topic: str) -> None:
        """Raises RetryableError unless Kafka answers with ``topic``'s partitions (one
        metadata request)."""
        self._run(lambda admin: self._partitions(admin, topic))

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Per partition of ``topic``: its end offset (one past the last record)."""
        return self._run(lambda admin: {tp.partition: offset for tp, offset in self._offsets(
            admin, self._partitions(admin, topic), OffsetSpec.LATEST).items()})

    def committed_offsets(self, group: str, topic: str) -> dict[int, int]:
        """Per partition of ``topic`` the group committed an offset for: that offset."""
        return self._run(lambda admin: self._committed(admin, group, topic))

    @staticmethod
    def _committed(admin, group: str, topic: str) -> dict[int, int]:
        found = admin.list_group_offsets({group: None}).get(group, {})
        return {tp.partition: m.offset for tp, m in found.items()
                if tp.topic == topic and m is not None and m.offset >= 0}

    def serving(self, topic: str) -> None:
        """Raises RetryableError unless every partition of ``topic`` has a leader that
        answers (its latest offset): the topic takes sends again."""
        self.end_offsets(topic)

    @staticmethod
    def _partitions(admin, topic: str) -> list[TopicPartition]:
        described = admin.describe_topics([topic])
        parts = [p["partition_index"] for t in described for p in t.get("partitions") or []]
        if not parts:
            raise RetryableError(f"topic {topic!r} has no partitions (does it exist?)")
        return [TopicPartition(topic, p) for p in parts]

    def _offsets(self, admin, parts: list[TopicPartition], spec: OffsetSpec
                 ) -> dict[TopicPartition, int]:
        if not parts:
            return {}
        found = admin.list_partition_offsets(dict.fromkeys(parts, spec),
                                             timeout_ms=self._timeout_ms)
        return {tp: o.offset for tp, o in found.items()}

    def _run(self, work):
        """``work(admin)``; RetryableError when Kafka does not answer, FatalError when it
        refused the login (retrying cannot fix a wrong password)."""
        try:
            with refused_login_is_fatal(",".join(self._bootstrap)):
                if self._admin is None:
                    self._admin = KafkaAdminClient(bootstrap_servers=self._bootstrap,
                                                   client_id="cachesync-probe",
                                                   **{"request_timeout_ms": self._timeout_ms,
                                                      # the lag probe sees a broker back as
                                                      # soon as the consumers do
                                                      "reconnect_backoff_max_ms":
                                                          RECONNECT_BACKOFF_MAX_MS,
                                                      **self._security})
                return work(self._admin)
        except (KafkaError, OSError) as e:
            self.close()
            raise RetryableError(f"Kafka unavailable at {','.join(self._bootstrap)}: {e}") from e
        except FatalError:
            self.close()
            raise

    def close(self) -> None:
        if self._admin is not None:
            try:
                self._admin.close()
            except (KafkaError, OSError):
                pass    # closing a broken client; nothing left to release
        self._admin = None


@dataclass(frozen=True)
class CheckpointInfo:
    name: str
    server: str
    position: str
    updated_at: str
    age_s: float
    active: str | None = None          # host:pid of the tailer holding the name's lock
    active_since: str | None = None


def checkpoint_info(session, name: str | None = None) -> list[CheckpointInfo]:
    """Stored tailer checkpoints (all, or the one named), age measured on the server's clock,
    with the active tailer of each name (None when no process holds its lock)."""
    def work(cur):
        cur.execute("SELECT c.name, c.server, c.gtid, c.log_file, c.log_pos, c.updated_at, "
                    "TIMESTAMPDIFF(MICROSECOND, c.updated_at, NOW(6)), l.holder, l.since "
                    "FROM cachesync_checkpoint c LEFT JOIN cachesync_tailer_lock l "
                    "ON l.name = c.name" + (" WHERE c.name = %s" if name else "")
                    + " ORDER BY c.name", (name,) if name else ())
        rows = cur.fetchall()
        live = {}
        for n, *_ in rows:
            cur.execute("SELECT IS_USED_LOCK(%s)", (lock_name(n),))
            live[n] = cur.fetchone()[0] is not None
        return rows, live
    rows, live = session.run(work)
    return [CheckpointInfo(n, server, f"gtid={gtid}" if gtid else f"{f}:{pos}",
                           updated.isoformat(), age_us / 1e6,
                           holder if live[n] else None,
                           since.isoformat() if live[n] and since else None)
            for n, server, gtid, f, pos, updated, age_us, holder, since in rows]


@dataclass(frozen=True)
class AppliedLag:
    namespace: str
    source: str
    commit_to_apply_s: float
    measured_s_ago: float


def applied_lag(session, namespace: str) -> list[AppliedLag]:
    """The newest heartbeat each tailer got applied in ``namespace`` (cachesync_lag)."""
    def work(cur):
        cur.execute("SELECT source, committed_us, applied_us FROM cachesync_lag WHERE ns = %s "
                    "ORDER BY source", (namespace,))
        return cur.fetchall()
    now_us = time.time() * 1e6
    return [AppliedLag(namespace, src, (applied - committed) / 1e6, (now_us - applied) / 1e6)
            for src, committed, applied in session.run(work)]


def record_applied_lags(session, namespace: str, beats: Mapping[str, tuple[float, float]]) -> None:
    """Upsert the newest applied heartbeat of each source in ``beats`` (source ->
    (committed_s, applied_s)) for ``namespace``, in one statement."""
    rows = [(namespace, src, int(c * 1e6), int(a * 1e6)) for src, (c, a) in sorted(beats.items())]
    values = ", ".join(["(%s, %s, %s, %s)"] * len(rows))
    session.run(lambda cur: cur.execute(
        f"INSERT INTO cachesync_lag (ns, source, committed_us, applied_us) VALUES {values} "
        "ON DUPLICATE KEY UPDATE committed_us = VALUES(committed_us), applied_us = VALUES(applied_us)",
        [v for row in rows for v in row]))


class NewestBeats:
    """The newest applied heartbeat per source, kept by the consumer's thread until the
    probe's thread takes them to record (one upsert per probe, not one per heartbeat)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._beats: dict[str, tuple[float, float]] = {}

    def add(self, source: str, committed_s: float, applied_s: float) -> None:
        with self._lock:
            self._beats[source] = (committed_s, applied_s)

    def take(self) -> dict[str, tuple[float, float]]:
        with self._lock:
            beats, self._beats = self._beats, {}
        return beats

    def put_back(self, beats: Mapping[str, tuple[float, float]]) -> None:
        """Beats that could not be recorded, unless a newer one of the source came since."""
        with self._lock:
            for source, beat in beats.items():
                self._beats.setdefault(source, beat)


class Prober:
    """Runs ``probe()`` every ``interval_s`` on a daemon thread and remembers the outcome.

    ``probe`` raises RetryableError (or any cachesync error) when a dependency is down;
    ``error`` is then its message and ``ok_at`` stops moving.
    """

    def __init__(self, probe: Callable[[], None], interval_s: float,
                 clock: Callable[[], float] = time.monotonic):
        self._probe, self._interval, self._clock = probe, interval_s, clock
        self._stop = threading.Event()
        self.ok_at: float | None = None
        self.error: str | None = "not probed yet"
        self._thread = threading.Thread(target=self._loop, name="cachesync-probe", daemon=True)

    def start(self) -> "Prober":
        self._thread.start()
        return self

    def stale_after(self) -> float:
        return 2 * self._interval + KAFKA_TIMEOUT_MS / 1000

    def problem(self) -> str | None:
        """Why the dependencies do not look healthy, or None."""
        if self.error:
            return self.error
        if self.ok_at is None or self._clock() - self.ok_at > self.stale_after():
            return "probe has not succeeded recently"
        return None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._probe()
                if self.error and self.ok_at is not None:
                    log.info("dependencies reachable again")
                self.ok_at, self.error = self._clock(), None
            except Exception as e:   # noqa: BLE001 - any probe failure means "not ready", never a crash
                if self.error != str(e):
                    log.warning("probe failed: %s", e)
                self.error = str(e)
            self._stop.wait(self._interval)

    def stop(self) -> None:
        self._stop.set()


class BinlogFormatWatch:
    """Re-reads the server's global binlog_format on every probe; warns once per change
    away from ROW (a session can still log statements; the tailer turns those into
    table-level invalidations, but the operator should know)."""

    def __init__(self, gauge):
        self._gauge, self.value = gauge, None

    def check(self, session) -> None:
        def work(cur):
            cur.execute("SELECT @@GLOBAL.binlog_format")
            return str(cur.fetchone()[0]).upper()
        value = session.run(work)
        if value != "ROW" and value != self.value:
            log.warning("binlog_format is %s, not ROW: statement-logged writes of mapped tables "
                        "will invalidate whole tables; set binlog_format=ROW", value)
        self.value = value
        self._gauge.set(1 if value == "ROW" else 0)
