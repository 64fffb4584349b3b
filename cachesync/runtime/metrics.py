"""Prometheus metrics, one registry per process (never the global default).

Counters are read at scrape time from the components' own ``stats`` objects, so
they cannot drift from what the pipeline did; the commit->apply lag histogram is
fed by the engine's ``on_batch`` hook. Heartbeat events (see
``cachesync.producer_outbox.binlog.heartbeat``) carry a microsecond write time and give an exact lag;
binlog timestamps are whole seconds, so a row's lag is measured from the start of
its commit second and may read up to 1 s high.
"""

from __future__ import annotations

import logging
import threading
import time
from array import array
from bisect import bisect_right
from dataclasses import dataclass
from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from cachesync.consumer.core.nines import QUANTILES, LagFigures, quantile_name
from cachesync.schema.event import HEARTBEAT_KIND, beat_time

log = logging.getLogger(__name__)

# seconds; a healthy pipeline sits in the first few, a stalled one shows in the last
LAG_FLUSH_S = 1.0            # the consumer's lags go into the histogram this often at most
LAG_FLUSH_VALUES = 4096      # or once this many wait (and whenever it is read)
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.5, 5.0, 10.0, 30.0, 60.0,
               300.0)

# metric name -> (help, attribute on the engine's Stats); "fenced" arrives with update mode
CONSUMER_COUNTERS = {
    "cachesync_consumer_events_consumed": ("change events consumed (each element of a packed record; an undecodable record counts once)", "consumed"),
    "cachesync_consumer_events_applied": ("Events whose cache operations were applied", "applied"),
    "cachesync_consumer_duplicates_skipped": ("Events skipped as already done (dedup table)", "duplicates"),
    "cachesync_consumer_fenced_writes_refused": ("Cache writes refused as older than the cached version",
                                        "fenced"),
    "cachesync_consumer_retries": ("Transient failures retried (Kafka, MySQL, Redis)", "retries"),
    "cachesync_consumer_dead_letters": ("Records sent to the dead-letter topic", "dead_lettered"),
    "cachesync_consumer_keys_deleted": ("Redis keys that existed and were deleted", "keys_deleted"),
    "cachesync_consumer_batches": ("Batches processed", "batches"),
    "cachesync_consumer_table_invalidations": ("Table-level events applied (TRUNCATE, DROP, RENAME, "
                                      "statement-logged DML): every key of the table removed",
                                      "table_invalidations"),
    "cachesync_consumer_table_keys_deleted": ("Keys removed by table-level invalidations",
                                              "table_keys_deleted"),
    "cachesync_consumer_dedup_purged": ("Done dedup records purged by the periodic purge",
                                        "purged"),
    "cachesync_consumer_dedup_purge_failures": ("Periodic dedup purges that failed (retried "
                                                "at the next consumer.purge_interval_s)",
                                                "purge_failures"),
    "cachesync_consumer_table_scans": ("Table-level scans run: one per table-level event, "
                                       "whatever its partition copies", "table_scans"),
    "cachesync_consumer_table_scans_reused": ("Table-level events whose scan another consumer "
                                              "of the group ran", "table_scans_reused"),
}
TAILER_COUNTERS = {
    "cachesync_tailer_kafka_outages": ("Times the tailer's sends went unacknowledged for "
                                       "tailer.kafka_outage_after_s (Kafka not serving)",
                                       "kafka_outages"),
    "cachesync_tailer_outage_events_applied": ("Events the tailer applied to Redis itself "
                                               "while Kafka did not serve "
                                               "(tailer.on_kafka_outage: invalidate)",
                                               "outage_applied"),
    "cachesync_tailer_rows_published": ("Binlog row events sent to Kafka", "published"),
    "cachesync_tailer_table_events": ("Table-level changes of mapped tables published "
                                      "(TRUNCATE, DROP, RENAME, DROP DATABASE, statement DML)",
                                      "table_events"),
    "cachesync_tailer_undecoded_events": ("Binlog events that may carry row changes cachesync "
                                          "cannot decode (docs/binlog-formats.md): their "
                                          "tables invalidated as a whole", "undecoded_events"),
    "cachesync_tailer_rows_oversized": ("Rows over Kafka's record limit, published "
                                        "invalidate-only (keys, no values)", "oversized"),
    "cachesync_tailer_rows_partial_json_unknown": ("Updates whose partial JSON after image "
                                                   "could not be computed (the before image "
                                                   "lacks the document): keys or table "
                                                   "invalidated, no value written",
                                                   "json_unknown"),
    "cachesync_tailer_rows_partial_image": ("Rows logged with a partial row image "
                                            "(binlog_row_image other than FULL in the writing "
                                            "session), published with the columns they know",
                                            "partial_rows"),
    "cachesync_tailer_rows_unkeyable": ("Rows whose Kafka key or value could not be rendered "
                                        "(e.g. the primary key not logged), plus one per rows "
                                        "event of a table map without column names (its rows "
                                        "are never decoded, so they are not counted one by "
                                        "one): their table was invalidated as a whole",
                                        "unkeyable"),
    "cachesync_tailer_fk_cascade_rows": ("Parent rows deleted or re-keyed whose foreign-key "
                                         "cascade (not logged by the server) reached a mapped "
                                         "table: its keys invalidated from the parent's row",
                                         "fk_cascade_rows"),
    "cachesync_tailer_fk_cascade_table_events": ("Tables invalidated as a whole because a "
                                                 "foreign-key cascade changed rows of them "
                                                 "(one per transaction and table)",
                                                 "fk_cascade_tables"),
    "cachesync_tailer_rows_events_undecodable": ("Rows events of mapped tables whose bytes "
                                                 "could not be decoded (malformed): their "
                                                 "table was invalidated as a whole",
                                                 "undecodable_rows"),
    "cachesync_tailer_versions_not_newer": ("Transactions whose GTID did not advance the "
                                            "history, so their update-mode versions are not "
                                            "newer (MariaDB without gtid_strict_mode)",
                                            "versions_not_newer"),
    "cachesync_tailer_unlogged_change_risks": ("Ways mapped tables may change without binlog "
                                               "events, found at each start (binlog filters "
                                               "excluding a mapped schema, accounts that may "
                                               "set sql_log_bin=0), each named in a WARNING",
                                               "unlogged_risks"),
    "cachesync_tailer_schema_read_failures": ("Reads of the server's schema that failed, each "
                                              "named in a WARNING: column types and foreign "
                                              "keys (what was known before is used until a "
                                              "later read succeeds; meanwhile update-mode rows "
                                              "of a table whose types are unread are published "
                                              "invalidate-only), and the check at start for "
                                              "changes the binlog does not carry",
                                              "schema_read_failures"),
    "cachesync_tailer_outbox_events": ("Outbox events published from the binlog "
                                       "(tailer.outbox_tables)", "outbox_events"),
    "cachesync_tailer_outbox_rows_invalid": ("Outbox rows published without their payload or "
                                             "keys (not valid JSON, or over the record limit)",
                                             "outbox_invalid"),
}
RELAY_COUNTERS = {
    "cachesync_relay_rows_sent": ("Outbox rows sent to Kafka", "sent"),
    "cachesync_relay_rows_published": ("Outbox rows marked published after Kafka's ack",
                                       "published"),
    "cachesync_relay_rows_unencodable": ("Leases of outbox rows that could not be encoded "
                                         "(payload or cache_keys not JSON): each stays "
                                         "unpublished and its keys uninvalidated, with a "
                                         "WARNING naming it", "unencodable"),
    "cachesync_relay_kafka_producers_wedged": ("Kafka producers the relay closed and replaced "
                                               "because sends stayed neither acknowledged nor "
                                               "failed past their delivery timeout (their "
                                               "rows are sent again)", "producers_wedged"),
}


# Metrics renamed to the cachesync_<role>_... form: the old name is still exported beside the
# new one, its help text naming the new one, for one more version (then removed)
# consumer counters that never had an old name
_NEW_CONSUMER_COUNTERS = {"cachesync_consumer_dedup_purged", "cachesync_consumer_dedup_purge_failures",
                          "cachesync_consumer_table_scans", "cachesync_consumer_table_scans_reused"}
# per-table counters of what was not applied exactly, table-level scans: consumer's
_CONSUMER_PREFIXED = ("null_key_skips", "version_backwards", "unrenderable_templates",
                      "invalidated_instead_of_written", "unwatched_updates", "untrusted_keys",
                      "table_scan_keys", "table_scan_seconds", "table_scan_running",
                      "commit_to_apply_seconds", "last_commit_to_apply_seconds")
# the consistency monitor's (it runs in consume, run and monitor): cachesync_monitor_...
_MONITOR_RENAMED = ("checks", "samples_dropped", "check_errors", "mysql_reads", "pending")
DEPRECATED_ALIASES = {
    **{new: new.replace("cachesync_consumer_", "cachesync_", 1)
       for new in CONSUMER_COUNTERS if new not in _NEW_CONSUMER_COUNTERS},
    **{f"cachesync_consumer_{n}": f"cachesync_{n}" for n in _CONSUMER_PREFIXED},
    "cachesync_consumer_kafka_lag_messages": "cachesync_kafka_consumer_lag_messages",
    **{f"cachesync_monitor_{n}": f"cachesync_consistency_{n}" for n in _MONITOR_RENAMED},
    "cachesync_tailer_heartbeats_written": "cachesync_heartbeats_written",
    "cachesync_tailer_heartbeat_failures": "cachesync_heartbeat_failures",
    "cachesync_tailer_checkpoint_age_seconds": "cachesync_checkpoint_age_seconds",
    "cachesync_tailer_binlog_format_row": "cachesync_binlog_format_row",
}


def deprecated_help(new: str) -> str:
    return f"Deprecated: renamed to {new}; this name goes in the next version"


def with_aliases(families):
    """Each scrape-time family, followed by the same samples under its deprecated old name."""
    for family in families:
        yield family
        old = DEPRECATED_ALIASES.get(family.name)
        if old is not None:
            alias = Metric(old, deprecated_help(family.name), family.type, family.unit)
            alias.samples = [s._replace(name=old + s.name[len(family.name):])
                             for s in family.samples]
            yield alias


class Aliased:
    """A metric and its deprecated twin under the old name, fed the same values."""

    def __init__(self, *metrics):
        self._metrics = metrics

    @classmethod
    def of(cls, metric, registry: CollectorRegistry, **kwargs) -> "Aliased":
        """``metric`` (a prometheus_client Gauge or Histogram) plus its old name's twin;
        ``kwargs`` are the twin's other constructor arguments (buckets)."""
        twin = type(metric)(DEPRECATED_ALIASES[metric._name], deprecated_help(metric._name),
                            metric._labelnames, registry=registry, **kwargs)
        return cls(metric, twin)

    def labels(self, *values) -> "Aliased":
        return Aliased(*(m.labels(*values) for m in self._metrics))

    def observe(self, value: float) -> None:
        for m in self._metrics:
            m.observe(value)

    def observe_many(self, values: list[float]) -> None:
        """``observe`` of every value, in one step per bucket (see ``observe_all``)."""
        for m in self._metrics:
            observe_all(m, values)

    def set(self, value: float) -> None:
        for m in self._metrics:
            m.set(value)


def observe_all(histogram: Histogram, values: list[float]) -> None:
    """What ``histogram.observe`` of each value records (the same bucket counts, the sum up to
    float rounding), at the cost of a sort instead of a Python call per value: a Spark
    micro-batch brings 20,000 lags at once. Falls back to ``observe`` per value if the
    histogram does not keep prometheus_client's buckets and sum as this expects."""
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for value in values:
            histogram.observe(value)
        return
    ordered = sorted(values)
    below = 0
    for bound, bucket in zip(bounds, buckets):
        upto = bisect_right(ordered, bound)         # values <= bound, as observe compares
        if upto > below:
            bucket.inc(upto - below)
            below = upto
    total.inc(sum(values))


class HeldHistogram(Histogram):
    """A Histogram whose ``collect`` first runs ``before_collect`` (set after it is made),
    so that observations held elsewhere are in it whenever it is read, a read of some names
    only (``restricted_registry``) included."""

    before_collect: Callable[[], None] | None = None

    def collect(self):
        if self.before_collect is not None:
            self.before_collect()
        return super().collect()


class StatsCollector:
    """Exposes integer attributes of ``source()`` as counters, read at scrape time (a renamed
    counter under its deprecated old name too)."""

    def __init__(self, source: Callable[[], object], counters: dict[str, tuple[str, str]]):
        self._source, self._counters = source, counters

    def collect(self):
        stats = self._source()
        for name, (doc, attr) in self._counters.items():
            value = getattr(stats, attr, 0) if stats else 0
            yield CounterMetricFamily(name, doc, value=value)
            if name in DEPRECATED_ALIASES:
                yield CounterMetricFamily(DEPRECATED_ALIASES[name], deprecated_help(name),
                                          value=value)

    def describe(self):
        return []   # collected lazily; nothing to validate at registration


# per-table counts of what was not applied exactly (consumer.core.tally.TableTally)
TABLE_COUNTERS = {
    "null_key_skips": ("cachesync_consumer_null_key_skips",
                       "Key templates skipped because a key column is NULL, per table"),
    "version_backwards": ("cachesync_consumer_version_backwards",
                          "Keys invalidated because the version column went backwards, per table"),
    "unrenderable_templates": ("cachesync_consumer_unrenderable_templates",
                               "Templates naming a column the row lacks (the event is "
                               "dead-lettered, its other keys invalidated), per table"),
    "invalidated_instead_of_written": ("cachesync_consumer_invalidated_instead_of_written",
                                       "Update-mode keys invalidated instead of written, per "
                                       "table and reason (ambiguous_key, oversized_value, "
                                       "null_version)"),
    "unwatched_updates": ("cachesync_consumer_unwatched_updates",
                          "Updates that changed no watched column (watch_columns / "
                          "ignore_columns): nothing invalidated or written, per table"),
    "untrusted_keys": ("cachesync_consumer_untrusted_keys",
                       "Events dead-lettered at the trust boundary, per table and reason "
                       "(reserved_key, key_not_allowed)"),
}


_WITH_REASON = frozenset({"invalidated_instead_of_written", "untrusted_keys"})


class TableCollector:
    """Exposes a TableTally's counts as labelled counters, read at scrape time; every
    counter is present (with no samples) before its first count."""

    def __init__(self, source: Callable[[], object]):
        self._source = source

    def collect(self):
        return with_aliases(self._families())

    def _families(self):
        tally = self._source()
        counts = tally.snapshot() if tally is not None else {}
        for counter, (name, doc) in TABLE_COUNTERS.items():
            reasons = counter in _WITH_REASON
            family = CounterMetricFamily(name, doc, labels=["table", "reason"] if reasons
                                         else ["table"])
            for (c, table, reason), value in sorted(counts.items()):
                if c == counter:
                    family.add_metric([table, reason] if reasons else [table], value)
            yield family

    def describe(self):
        return []


class TableScanCollector:
    """The table-level scans this consumer ran or waited for (consumer.table_jobs.TableScan),
    per table: keys removed so far and seconds, of the one under way or the last one."""

    def __init__(self, source: Callable[[], object]):
        self._source = source

    def collect(self):
        return with_aliases(self._families())

    def _families(self):
        latest = {scan.table: scan for scan in (self._source() or ())}
        keys = GaugeMetricFamily("cachesync_consumer_table_scan_keys", "Keys removed by the "
                                 "table's running or last table-level scan", labels=["table"])
        seconds = GaugeMetricFamily("cachesync_consumer_table_scan_seconds", "How long the "
                                    "table's running or last table-level scan has taken",
                                    labels=["table"])
        running = GaugeMetricFamily("cachesync_consumer_table_scan_running", "1 while a "
                                    "table-level scan of the table is under way",
                                    labels=["table"])
        paused = GaugeMetricFamily("cachesync_consumer_table_scan_paused_seconds", "How much "
                                   "of the table's running or last table-level scan it paused to "
                                   "leave Redis to the row stream", labels=["table"])
        now = time.monotonic()
        for table, scan in sorted(latest.items()):
            keys.add_metric([table], scan.keys)
            seconds.add_metric([table], (scan.finished or now) - scan.started)
            running.add_metric([table], 0 if scan.done.is_set() else 1)
            paused.add_metric([table], scan.paused)
        yield from (keys, seconds, running, paused)

    def describe(self):
        return []


class Cumulative:
    """Counters summed over successive instances (the tail command rebuilds its tailer on
    every restart, and each tailer counts from zero)."""

    def __init__(self, attrs: tuple[str, ...]):
        self._attrs, self._done, self._current = attrs, dict.fromkeys(attrs, 0), None
        self._lock = threading.Lock()

    def track(self, obj):
        with self._lock:
            if self._current is not None:
                for a in self._attrs:
                    self._done[a] += getattr(self._current, a, 0)
            self._current = obj
        return obj

    def __getattr__(self, attr):
        if attr.startswith("_") or attr not in self._attrs:
            raise AttributeError(attr)
        with self._lock:
            return self._done[attr] + getattr(self._current, attr, 0)


def tailer_totals() -> Cumulative:
    """The tailer counters of ``TAILER_COUNTERS`` summed over a command's successive
    tailers: every one of them, so none reads 0 for want of being listed."""
    return Cumulative(tuple(attr for _, attr in TAILER_COUNTERS.values()))


class ConsumerMetrics:
    """The consumer's metrics; ``on_batch`` is the engine's hook."""

    def __init__(self, registry: CollectorRegistry, stats: Callable[[], object],
                 on_heartbeat: Callable[[str, float, float], None] | None = None,
                 tables: Callable[[], object] | None = None,
                 scans: Callable[[], object] | None = None):
        self._on_heartbeat = on_heartbeat
        registry.register(StatsCollector(stats, CONSUMER_COUNTERS))
        if tables is not None:          # the engine's TableTally (or None before it exists)
            registry.register(TableCollector(tables))
        if scans is not None:           # the engine's table-level scans (TableInvalidator.scans)
            registry.register(TableScanCollector(scans))
        # the lags of row changes wait here and go into the histogram with the batch that
        # comes LAG_FLUSH_S after the last time, or LAG_FLUSH_VALUES values, or when the
        # histogram is read
        self._lags: dict[str, list[float]] = {}
        self._lags_count, self._lags_at = 0, time.monotonic()
        self._lags_lock = threading.Lock()
        self.lag = Aliased.of(HeldHistogram(
            "cachesync_consumer_commit_to_apply_seconds", "Source commit -> cache applied, per "
            "event (kind: binlog, outbox, heartbeat)", ["kind"], buckets=LAG_BUCKETS,
            registry=registry), registry, buckets=LAG_BUCKETS)
        for histogram in self.lag._metrics:
            histogram.before_collect = self.flush
        self.last_lag = Aliased.of(Gauge(
            "cachesync_consumer_last_commit_to_apply_seconds", "Commit->apply lag of the "
            "newest applied event", registry=registry), registry)
        self.kafka_lag = Aliased.of(Gauge(
            "cachesync_consumer_kafka_lag_messages", "End offset minus committed offset, per "
            "partition", ["partition"], registry=registry), registry)
        Gauge("cachesync_consumer_last_apply_timestamp_seconds", "Unix time of the newest "
              "applied batch (0 before the first)", registry=registry).set_function(
                  lambda: self.last_apply_at or 0.0)
        self.last_apply_at: float | None = None        # time.time() of the newest applied batch
        self.last_lag_s: float | None = None
        self.backlog: int | None = None                 # total Kafka consumer lag, last probe
        self._started_at = time.time()
        # the per-change figure (share applied within 100 ms and 1 s, percentiles): row
        # changes (commit times in whole seconds from the binlog) and heartbeats (exact)
        self.changes = ChangeFigures()
        registry.register(ChangeFiguresCollector("cachesync_consumer", self.changes))

    def on_batch(self, result) -> None:
        """The engine's hook: observe every applied event's lag; never raises into the engine."""
        self.observe_batch(lag_batch(result))

    def observe_batch(self, batch: "LagBatch") -> None:
        """Record the lags of one applied batch (``lag_batch``: the python engine's batch or a
        Spark task's chunk); a batch that applied nothing records nothing; never raises."""
        if batch.last is None:
            return
        try:
            applied_at = batch.applied_at
            for kind, committed in batch.committed.items():
                lags = [applied_at - at if applied_at > at else 0.0 for at in committed]
                self._hold(kind, lags)
                self.changes.add(ROWS, lags)
            for beat in batch.beats:
                self._observe(beat)
                self.changes.add(HEARTBEATS, [max(0.0, beat.applied_at - beat.committed)])
            self.last_lag_s = max(0.0, applied_at - batch.last.committed)
            self.last_lag.set(self.last_lag_s)
            self.last_apply_at = max(self.last_apply_at or 0.0, applied_at)
        except Exception:   # noqa: BLE001 - metrics must never stop consumption
            log.exception("could not record lag metrics for a batch")

    def _hold(self, kind: str, lags: list[float]) -> None:
        """Keep ``lags`` for the histogram; flush when enough wait or long enough."""
        with self._lags_lock:
            held = self._lags.get(kind)
            if held is None:
                self._lags[kind] = list(lags)
            else:
                held += lags
            self._lags_count += len(lags)
            due = (self._lags_count >= LAG_FLUSH_VALUES
                   or time.monotonic() - self._lags_at >= LAG_FLUSH_S)
        if due:
            self.flush()

    def flush(self) -> None:
        """Put the lags held so far into the histogram (at the head of the binlog every
        commit is its own batch, and observing each batch's lags at once cost more than
        the rest of the batch's bookkeeping)."""
        with self._lags_lock:
            held, self._lags = self._lags, {}
            self._lags_count, self._lags_at = 0, time.monotonic()
        for kind, lags in held.items():
            self.lag.labels(kind).observe_many(lags)

    def _observe(self, sample: "LagSample") -> None:
        lag = max(0.0, sample.applied_at - sample.committed)
        self.lag.labels(sample.kind).observe(lag)
        self.last_lag.set(lag)
        self.last_lag_s = lag
        if sample.beat_name is not None and self._on_heartbeat is not None:
            self._on_heartbeat(sample.beat_name, sample.committed, sample.applied_at)

    def set_kafka_lag(self, per_partition: dict[int, int]) -> None:
        for partition, lag in per_partition.items():
            self.kafka_lag.labels(str(partition)).set(lag)
        self.backlog = sum(per_partition.values())

    def lag_problem(self, max_lag_s: float, now: float | None = None) -> str | None:
        """Why the consumer is behind, or None. With a backlog in Kafka, time since the last
        applied batch counts as lag too, so a stalled consumer does not look fresh."""
        now = time.time() if now is None else now
        lag = self.last_lag_s or 0.0
        if self.backlog:
            lag = max(lag, now - (self.last_apply_at or self._started_at))
        if lag > max_lag_s:
            return f"commit->apply lag {lag:.1f}s exceeds {max_lag_s:.1f}s"
        return None


ROWS, HEARTBEATS = "rows", "heartbeats"


class ChangeFigures:
    """The per-change figure of one process, per kind of change: ``rows`` (their binlog
    commit times are whole seconds, so a lag is counted from the start of its commit second:
    up to 1 s high, the share within a bound is a lower bound) and ``heartbeats`` (exact
    write times: the pipeline's true commit -> apply lag). Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._kinds = {ROWS: LagFigures(), HEARTBEATS: LagFigures()}

    def add(self, kind: str, lags: list[float]) -> None:
        with self._lock:
            self._kinds[kind].add(lags)

    def figures(self) -> dict[str, dict]:
        """kind -> :meth:`LagFigures.figures`."""
        with self._lock:
            return {kind: f.figures() for kind, f in self._kinds.items()}


class ChangeFiguresCollector:
    """``<prefix>_changes_total{kind}``, ``<prefix>_changes_late_total{kind,within}`` (applied
    later than the bound), ``<prefix>_changes_within_ratio{kind,within}`` and
    ``<prefix>_commit_to_apply_quantile_seconds{kind,quantile}``, read at scrape time."""

    def __init__(self, prefix: str, source: ChangeFigures):
        self._prefix, self._source = prefix, source

    def collect(self):
        p = self._prefix
        total = CounterMetricFamily(f"{p}_changes", "Changes whose commit -> apply lag was "
                                    "measured, per kind (rows, heartbeats)", labels=["kind"])
        late = CounterMetricFamily(f"{p}_changes_late", "Changes applied later than the "
                                   "bound after their commit, per kind and bound",
                                   labels=["kind", "within"])
        ratio = GaugeMetricFamily(f"{p}_changes_within_ratio", "Share of the changes applied "
                                  "within the bound after their commit, per kind",
                                  labels=["kind", "within"])
        quantile = GaugeMetricFamily(f"{p}_commit_to_apply_quantile_seconds", "Commit -> "
                                     "apply lag percentiles of the changes, per kind "
                                     "(at most 1 % high)", labels=["kind", "quantile"])
        for kind, fig in self._source.figures().items():
            total.add_metric([kind], fig["changes"])
            for within, s in fig["within"].items():
                late.add_metric([kind, within], s["failed"])
                if s["ratio"] is not None:
                    ratio.add_metric([kind, within], s["ratio"])
            for q in QUANTILES:
                value = fig[quantile_name(q)]
                if value is not None:
                    quantile.add_metric([kind, f"{q:g}"], value / 1000)
        yield from (total, late, ratio, quantile)

    def describe(self):
        return []


@dataclass(frozen=True)
class LagSample:
    """One applied event's commit->apply lag, small enough to ship from a Spark task."""

    kind: str                      # binlog | outbox | heartbeat
    committed: float               # source commit time (a heartbeat's exact write time)
    applied_at: float
    beat_name: str | None = None   # the tailer that wrote a heartbeat


def lag_samples(result) -> list[LagSample]:
    """The lag of every event a batch applied (``BatchResult``)."""
    return [_sample(ep.event, result.applied_at) for ep in result.applied]


def _sample(event, applied_at: float) -> LagSample:
    committed, kind, name = event.source.commit_ts, event.source.kind, None
    if kind == HEARTBEAT_KIND:
        committed = beat_time(event.after) or committed
        name = event.pk_dict.get("name", "?")
    return LagSample(kind, committed, applied_at, name)


@dataclass(frozen=True)
class LagBatch:
    """The lag of every event one batch applied, compact enough to ship from a Spark task.

    Every event of a batch was applied at ``applied_at``, so only commit times differ: one
    array of doubles per kind. One LagSample per event cost a Spark task about 3 us per
    record to build and pickle (a megabyte per 20,000 events) and the driver as much again
    to unpickle. Heartbeats stay LagSamples: each names its tailer."""

    applied_at: float
    committed: dict[str, array]          # kind -> commit times (heartbeats excluded)
    beats: tuple[LagSample, ...] = ()
    last: LagSample | None = None        # the batch's last event (the last-lag gauge)

    def samples(self) -> Iterator[LagSample]:
        """The batch as LagSamples (heartbeats last)."""
        for kind, committed in self.committed.items():
            for at in committed:
                yield LagSample(kind, at, self.applied_at)
        yield from self.beats


def lag_batch(result) -> LagBatch:
    """:func:`lag_samples` of a ``BatchResult`` as one LagBatch."""
    committed: dict[str, array] = {}
    beats = []
    for ep in result.applied:
        source = ep.event.source
        if source.kind == HEARTBEAT_KIND:
            beats.append(_sample(ep.event, result.applied_at))
            continue
        times = committed.get(source.kind)
        if times is None:
            times = committed[source.kind] = array("d")
        times.append(source.commit_ts)
    last = _sample(result.applied[-1].event, result.applied_at) if result.applied else None
    return LagBatch(result.applied_at, committed, tuple(beats), last)


class CheckpointAge:
    """How long ago the tailer's checkpoint last moved, and when (a timestamp: alert on
    ``time() - ..._timestamp_seconds``, which keeps growing while the process is stuck)."""

    def __init__(self, registry: CollectorRegistry):
        self.gauge = Gauge("cachesync_tailer_checkpoint_age_seconds",
                           "Seconds since the stored tailer checkpoint last advanced",
                           registry=registry)
        self._old = Gauge(DEPRECATED_ALIASES["cachesync_tailer_checkpoint_age_seconds"],
                          deprecated_help("cachesync_tailer_checkpoint_age_seconds"),
                          registry=registry)
        self.last_advance = Gauge("cachesync_tailer_checkpoint_last_advance_timestamp_seconds",
                                  "Unix time the stored tailer checkpoint last advanced",
                                  registry=registry)
        self.value: float | None = None

    def set(self, age_s: float, now: float | None = None) -> None:
        self.gauge.set(age_s)
        self._old.set(age_s)
        self.last_advance.set((time.time() if now is None else now) - age_s)
        self.value = age_s


def counters(registry: CollectorRegistry, source: Callable[[], object],
             spec: dict[str, tuple[str, str]]) -> None:
    registry.register(StatsCollector(source, spec))


def heartbeat_gauge(registry: CollectorRegistry, writer) -> None:
    registry.register(StatsCollector(lambda: writer, {
        "cachesync_tailer_heartbeats_written": ("Heartbeat rows written by this tailer",
                                                "written"),
        "cachesync_tailer_heartbeat_failures": ("Heartbeat writes that failed", "failures")}))
    Gauge("cachesync_tailer_last_heartbeat_timestamp_seconds", "Unix time of this tailer's "
          "newest written heartbeat (0 before the first)", registry=registry).set_function(
              lambda: writer.last_written_at or 0.0)


def relay_published(registry: CollectorRegistry, relay: Callable[[], object]) -> None:
    """``cachesync_relay_last_publish_timestamp_seconds``: when the relay last marked rows
    published (alert on ``time() - ...`` while the outbox has unpublished rows)."""
    Gauge("cachesync_relay_last_publish_timestamp_seconds", "Unix time the relay last marked "
          "outbox rows published after Kafka's ack (0 before the first)",
          registry=registry).set_function(
              lambda: getattr(relay(), "last_published_at", None) or 0.0)


def binlog_format_row(registry: CollectorRegistry) -> Aliased:
    """``cachesync_tailer_binlog_format_row`` (and its old name), set by the tailer's probe."""
    return Aliased.of(Gauge("cachesync_tailer_binlog_format_row", "1 when the server's global "
                            "binlog_format is ROW, re-read every metrics.probe_interval_s",
                            registry=registry), registry)


def tailer_active(registry: CollectorRegistry, name: str, active: Callable[[], bool]) -> None:
    """``cachesync_tailer_active{tailer}``: 1 while this process tails, 0 while it waits as a
    hot standby (alert when no process of a tailer name reports 0: no standby left)."""
    Gauge("cachesync_tailer_active", "1 while this process holds the tailer lock and tails, "
          "0 while it waits as a hot standby", ["tailer"],
          registry=registry).labels(name).set_function(lambda: 1 if active() else 0)


def info(registry: CollectorRegistry, role: str, version: str) -> None:
    Gauge("cachesync_info", "Process role and version", ["role", "version"],
          registry=registry).labels(role, version).set(1)


def process_collectors(registry: CollectorRegistry) -> None:
    """``process_*`` (CPU, memory, open files, start time), ``python_gc_*`` and
    ``python_info``, as the default registry would have them."""
    from prometheus_client import GCCollector, PlatformCollector, ProcessCollector
    ProcessCollector(registry=registry)
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)


# the consistency monitor (cachesync.monitor), in consume, run and monitor
class MonitorCollector:
    """A ConsistencyMonitor's counters (cachesync.monitor), read at scrape time."""

    def __init__(self, monitor):
        self._monitor = monitor

    def collect(self):
        return with_aliases(self._families())

    def _families(self):
        counts, dropped, errors, reads = self._monitor.snapshot()
        checks = CounterMetricFamily(
            "cachesync_monitor_checks", "Cache keys of sampled rows checked against MySQL, "
            "per table and result (consistent, stale, missing, unverifiable, unsettled)",
            labels=["table", "result"])
        for (table, result), n in sorted(counts.items()):
            checks.add_metric([table, result], n)
        yield checks
        drops = CounterMetricFamily("cachesync_monitor_samples_dropped", "Sampled events "
                                    "not checked, per reason (rate_limit, queue_full)",
                                    labels=["reason"])
        for reason, n in sorted(dropped.items()):
            drops.add_metric([reason], n)
        yield drops
        yield CounterMetricFamily("cachesync_monitor_check_errors", "Checks abandoned "
                                  "because MySQL or Redis failed", value=errors)
        yield CounterMetricFamily("cachesync_monitor_mysql_reads", "SELECTs the monitor "
                                  "ran (the extra read load on MySQL)", value=reads)
        yield GaugeMetricFamily("cachesync_monitor_pending", "Samples waiting for their "
                                "check", value=self._monitor.pending)
        yield GaugeMetricFamily("cachesync_monitor_last_check_timestamp_seconds", "Unix time "
                                "of the newest finished check (0 before the first)",
                                value=getattr(self._monitor, "last_check_at", None) or 0.0)

    def describe(self):
        return []


MONITOR_METRICS = ("cachesync_monitor_checks_total",
                   "cachesync_monitor_samples_dropped_total",
                   "cachesync_monitor_check_errors_total",
                   "cachesync_monitor_mysql_reads_total", "cachesync_monitor_pending")
