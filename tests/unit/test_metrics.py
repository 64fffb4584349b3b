"""Metrics, readiness and the HTTP server, without services (real sockets on loopback)."""

from __future__ import annotations

import pickle
import threading
import urllib.error
import urllib.request
from dataclasses import astuple, dataclass, field

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from cachesync.http import OpsServer, parse_listen
from cachesync.runtime.metrics import ConsumerMetrics, Cumulative
from cachesync.consumer.core.plan import EventPlan, plan_batch
from cachesync.producer_outbox.binlog.heartbeat import own_rows_only, with_heartbeat
from cachesync.schema.errors import ConfigError
from cachesync.producer_outbox.decode.rows import TxnContext, row_change
from cachesync.schema.event import ChangeEvent, Source, decode, encode
from cachesync.schema.mapping import parse_mappings


@dataclass
class Stats:
    consumed: int = 7
    applied: int = 5
    duplicates: int = 1
    dead_lettered: int = 1
    retries: int = 2


@dataclass
class Batch:
    applied: list = field(default_factory=list)
    applied_at: float = 0.0


def event(db="app", table="users", commit_ts=100.0, kind="binlog", after=None) -> EventPlan:
    e = ChangeEvent(id="x", source=Source(kind, "s", "0-1-1", commit_ts), db=db, table=table,
                    op="update", pk=(("name", "t1"),), before=None, after=after or {"id": 1},
                    version=1)
    return EventPlan(e, ())


def samples(registry) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in registry.collect() for s in fam.samples}


def test_counters_come_from_stats_and_fenced_defaults_to_zero():
    reg = CollectorRegistry()
    ConsumerMetrics(reg, lambda: Stats())
    m = samples(reg)
    assert m[("cachesync_events_consumed_total", ())] == 7
    assert m[("cachesync_retries_total", ())] == 2
    assert m[("cachesync_fenced_writes_refused_total", ())] == 0   # Stats has no `fenced` yet


def test_lag_uses_commit_time_and_the_heartbeats_microsecond_time():
    reg, beats = CollectorRegistry(), []
    cm = ConsumerMetrics(reg, lambda: None, on_heartbeat=lambda *a: beats.append(a))
    hb = event("cachesync", "cachesync_heartbeat", commit_ts=100.0, kind="heartbeat",
               after={"name": "t1", "beat_us": 100_400_000})
    cm.on_batch(Batch([event(commit_ts=100.0), hb], applied_at=100.5))
    m = samples(reg)
    assert m[("cachesync_consumer_commit_to_apply_seconds_sum", (("kind", "binlog"),))] == pytest.approx(0.5)
    assert m[("cachesync_consumer_commit_to_apply_seconds_sum", (("kind", "heartbeat"),))] == pytest.approx(0.1)
    assert m[("cachesync_consumer_commit_to_apply_seconds_bucket", (("kind", "binlog"), ("le", "0.5")))] == 1
    assert beats == [("t1", 100.4, 100.5)]


def test_a_spark_tasks_lag_batch_records_what_its_samples_would():
    """A Spark task ships each chunk's lags as one LagBatch (commit times per kind); the
    driver's metrics come out as from one LagSample per event, heartbeats included."""
    from cachesync.runtime.metrics import lag_batch, lag_samples
    hb = event("cachesync", "cachesync_heartbeat", commit_ts=100.0, kind="heartbeat",
               after={"name": "t1", "beat_us": 100_400_000})
    batch = Batch([event(commit_ts=100.0), hb, event(commit_ts=99.0, kind="outbox"),
                   event(commit_ts=98.0)], applied_at=100.5)
    shipped = pickle.loads(pickle.dumps(lag_batch(batch)))
    assert sorted(map(astuple, shipped.samples())) == sorted(map(astuple, lag_samples(batch)))
    registries, beats = [], []
    for observe in (lambda cm: cm.on_batch(batch), lambda cm: cm.observe_batch(shipped)):
        reg = CollectorRegistry()
        cm = ConsumerMetrics(reg, lambda: None, on_heartbeat=lambda *a: beats.append(a))
        observe(cm)
        found = {k: v for k, v in samples(reg).items() if not k[0].endswith("_created")}
        registries.append((found, cm.last_lag_s, cm.last_apply_at))
    assert registries[0] == registries[1]
    assert registries[1][1] == pytest.approx(2.5)          # the batch's last event
    assert beats == [("t1", 100.4, 100.5)] * 2
    assert lag_batch(Batch([], applied_at=1.0)).last is None


def test_observing_many_lags_at_once_records_what_observing_each_does():
    """A micro-batch's lags go into the histogram in one step per bucket: the same bucket
    counts as one observe per value (values on a bound, at zero, past the last bound), the
    same sum up to rounding; a histogram without prometheus_client's internals is fed per
    value."""
    import random
    from prometheus_client import Histogram
    from cachesync.runtime.metrics import LAG_BUCKETS, observe_all
    rng = random.Random(7)
    values = ([rng.expovariate(4.0) for _ in range(5000)] + list(LAG_BUCKETS[:-1])
              + [0.0, 0.0, 1e9])
    found = []
    for feed in (lambda h: [h.observe(v) for v in values], lambda h: observe_all(h, values)):
        reg = CollectorRegistry()
        feed(Histogram("lag_seconds", "lag", buckets=LAG_BUCKETS, registry=reg))
        found.append(samples(reg))
    each, many = found
    assert {k: v for k, v in each.items() if "_bucket" in k[0] or "_count" in k[0]} == \
        {k: v for k, v in many.items() if "_bucket" in k[0] or "_count" in k[0]}
    assert many[("lag_seconds_sum", ())] == pytest.approx(each[("lag_seconds_sum", ())])

    class Plain:                          # no buckets of its own to add to
        def __init__(self):
            self.seen = []

        def observe(self, value):
            self.seen.append(value)
    plain = Plain()
    observe_all(plain, values[:3])
    assert plain.seen == values[:3]


def test_a_failing_hook_never_raises_into_the_engine():
    cm = ConsumerMetrics(CollectorRegistry(), lambda: None,
                         on_heartbeat=lambda *a: 1 / 0)
    hb = event("cachesync", "cachesync_heartbeat", kind="heartbeat",
               after={"name": "t", "beat_us": 1})
    cm.on_batch(Batch([hb], applied_at=2.0))          # logged, not raised


@pytest.mark.parametrize("last_lag, backlog, last_apply, now, ready", [
    (0.5, 0, 0.0, 1000.0, True),      # idle and caught up: old applies do not matter
    (45.0, 0, 990.0, 1000.0, False),  # the newest event arrived 45 s late
    (0.5, 10, 990.0, 1000.0, True),   # backlog, but applying within the limit
    (0.5, 10, 900.0, 1000.0, False),  # backlog and nothing applied for 100 s: stalled
])
def test_lag_problem(last_lag, backlog, last_apply, now, ready):
    cm = ConsumerMetrics(CollectorRegistry(), lambda: None)
    cm.last_lag_s, cm.last_apply_at = last_lag, last_apply
    cm.set_kafka_lag({0: backlog})
    assert (cm.lag_problem(30.0, now=now) is None) is ready


def test_cumulative_sums_restarted_instances():
    @dataclass
    class T:
        published: int = 0
    c, a, b = Cumulative(("published",)), T(3), T(0)
    c.track(a)
    a.published = 5
    c.track(b)
    b.published = 2
    assert c.published == 7


def test_every_tailer_counter_is_summed_for_the_tail_and_run_commands():
    """``tail`` and ``run`` export TAILER_COUNTERS from the tailers they restart: each counter
    must read what the tailers counted, none 0 for want of being listed."""
    from cachesync.runtime.metrics import TAILER_COUNTERS, counters, tailer_totals

    class T:
        pass
    first, second = T(), T()
    for n, (_, attr) in enumerate(TAILER_COUNTERS.values(), start=1):
        setattr(first, attr, n)
        setattr(second, attr, 100)
    totals, registry = tailer_totals(), CollectorRegistry()
    counters(registry, lambda: totals, TAILER_COUNTERS)
    totals.track(first)
    totals.track(second)
    for n, name in enumerate(TAILER_COUNTERS, start=1):
        assert registry.get_sample_value(f"{name}_total") == 100 + n, name


def test_registries_are_per_process_objects_not_the_global_default():
    a, b = CollectorRegistry(), CollectorRegistry()
    ConsumerMetrics(a, lambda: Stats())
    ConsumerMetrics(b, lambda: Stats())      # no "duplicated timeseries" error
    assert b"cachesync_events_applied_total 5.0" in generate_latest(a)


@pytest.mark.parametrize("listen, expected", [
    ("127.0.0.1:9464", ("127.0.0.1", 9464)), ("0.0.0.0:0", ("0.0.0.0", 0)),
    ("[::1]:9000", ("::1", 9000)), ("auto", ("127.0.0.1", 9465)), ("off", None)])
def test_parse_listen(listen, expected):
    assert parse_listen(listen, "tail") == expected


@pytest.mark.parametrize("listen", ["9464", "host:", "host:http", "h:70000"])
def test_parse_listen_rejects(listen):
    with pytest.raises(ConfigError, match="metrics.listen"):
        parse_listen(listen, "tail")


def get(addr, path):
    try:
        with urllib.request.urlopen(f"http://{addr}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_server_endpoints_and_a_taken_port():
    reg, problems = CollectorRegistry(), []
    ConsumerMetrics(reg, lambda: Stats())
    server = OpsServer(("127.0.0.1", 0), reg, [lambda: problems[0] if problems else None]).start()
    try:
        assert server.address.startswith("127.0.0.1:")
        assert get(server.address, "/healthz") == (200, "ok\n")
        assert get(server.address, "/readyz") == (200, "ready\n")
        problems.append("Kafka unavailable")
        assert get(server.address, "/readyz") == (503, "Kafka unavailable\n")
        assert "cachesync_events_applied_total 5.0" in get(server.address, "/metrics")[1]
        assert get(server.address, "/nope")[0] == 404
        host, port = server.address.split(":")
        with pytest.raises(ConfigError, match="cannot listen"):
            OpsServer((host, int(port)), reg, [])
    finally:
        server.close()


def test_the_server_thread_waits_for_a_connection_without_a_beat(monkeypatch):
    """Between requests the server's thread sleeps in one wait with no timeout (no wake-up
    twice a second with nothing to serve); ``close`` wakes it at once."""
    import selectors
    import time
    waits, waiting = [], threading.Event()

    class Recording(selectors.DefaultSelector):
        def select(self, timeout=None):
            waits.append(timeout)
            waiting.set()
            return super().select(timeout)
    monkeypatch.setattr(selectors, "DefaultSelector", Recording)
    server = OpsServer(("127.0.0.1", 0), CollectorRegistry(), []).start()
    try:
        assert waiting.wait(10)
        assert get(server.address, "/healthz") == (200, "ok\n")
        assert set(waits) == {None}
    finally:
        started = time.monotonic()
        server.close()
    assert time.monotonic() - started < 1.0 and not server._thread.is_alive()


def heartbeat(kind: str) -> ChangeEvent:
    return ChangeEvent("h", Source(kind, "s", "0-1-1", 0.0), "cachesync", "cachesync_heartbeat",
                       "update", (("name", "a"),), {"name": "a", "beat_us": 1},
                       {"name": "a", "beat_us": 2}, 1)


def test_the_planner_passes_over_heartbeats_and_tailers_keep_only_their_row():
    users = parse_mappings({"app.users": {"keys": ["user:{id}"]}})
    plan = plan_batch([heartbeat("heartbeat")], users)         # no mapping needed
    assert not plan.poison and not plan.keys and not plan.writes and plan.null_skips == 0
    # a heartbeat of a tailer older than the heartbeat kind: the keyless mapping plans it
    legacy = plan_batch([heartbeat("binlog")], with_heartbeat(users, "cachesync"))
    assert not legacy.poison and not legacy.keys and legacy.null_skips == 0
    keep = own_rows_only("cachesync", "t1")
    assert keep("cachesync", "cachesync_heartbeat", {"name": "t1"})
    assert not keep("cachesync", "cachesync_heartbeat", {"name": "t2"})
    assert keep("app", "users", {"id": 1})


def test_heartbeat_rows_go_out_as_the_heartbeat_kind_and_the_name_is_reserved():
    ctx = TxnContext("s", "0-1-5", 5, 1.0)
    beat = row_change(ctx, 0, "cachesync", "cachesync_heartbeat", "update", "name",
                      {"name": "t1", "beat_us": 1}, {"name": "t1", "beat_us": 2})
    user = row_change(ctx, 1, "app", "users", "update", "id", {"id": 1}, {"id": 1})
    assert (beat.source.kind, user.source.kind) == ("heartbeat", "binlog")
    assert decode(encode(beat)).source.kind == "heartbeat"
    with pytest.raises(ConfigError, match="app.cachesync_heartbeat"):
        with_heartbeat(parse_mappings({"app.cachesync_heartbeat": {"keys": ["x:{id}"]}}),
                       "cachesync")


class Tally:
    def snapshot(self):
        return {("null_key_skips", "app.users", ""): 2,
                ("untrusted_keys", "app.users", "reserved_key"): 1}


class Monitor:
    pending, last_check_at = 3, 1234.5

    def snapshot(self):
        return {("app.users", "stale"): 4}, {"rate_limit": 1}, 0, 9


def test_renamed_metrics_keep_their_old_names_for_one_version():
    """Every name in DEPRECATED_ALIASES that a registry exports under its new name is also
    exported under the old one, with the same samples and a help text naming the new one."""
    from cachesync.runtime.metrics import (DEPRECATED_ALIASES, CheckpointAge, MonitorCollector,
                                   binlog_format_row)
    reg = CollectorRegistry()
    cm = ConsumerMetrics(reg, lambda: Stats(), tables=lambda: Tally(), scans=lambda: ())
    cm.on_batch(Batch([event(commit_ts=100.0)], applied_at=100.25))
    cm.set_kafka_lag({0: 7})
    reg.register(MonitorCollector(Monitor()))
    CheckpointAge(reg).set(3.0, now=1000.0)
    binlog_format_row(reg).set(1)
    families = {f.name: f for f in reg.collect()}
    checked = 0
    for new, old in DEPRECATED_ALIASES.items():
        if new not in families:
            continue
        assert old in families, old
        assert families[old].documentation == f"Deprecated: renamed to {new}; this name goes in the next version"
        def values(name):       # _created: when each twin was made, microseconds apart
            return [(s.name.replace(name, new, 1), s.labels, s.value)
                    for s in families[name].samples if not s.name.endswith("_created")]
        assert values(old) == values(new), new
        checked += 1
    assert checked >= 25, checked      # consumer, per-table, monitor, lag, checkpoint, binlog
    m = samples(reg)
    assert m[("cachesync_commit_to_apply_seconds_sum", (("kind", "binlog"),))] == pytest.approx(0.25)
    assert m[("cachesync_kafka_consumer_lag_messages", (("partition", "0"),))] == 7
    assert m[("cachesync_consistency_checks_total", (("result", "stale"), ("table", "app.users")))] == 4
    assert m[("cachesync_monitor_last_check_timestamp_seconds", ())] == 1234.5
    assert m[("cachesync_tailer_checkpoint_last_advance_timestamp_seconds", ())] == 997.0


def test_every_exported_name_has_its_role_after_cachesync():
    """cachesync_<role>_...: the consumer's, the tailer's, the relay's, the monitor's, or the
    process-wide cachesync_info; old names only as deprecated aliases."""
    from cachesync.runtime.metrics import DEPRECATED_ALIASES, MonitorCollector
    reg = CollectorRegistry()
    ConsumerMetrics(reg, lambda: Stats(), tables=lambda: Tally(), scans=lambda: ())
    reg.register(MonitorCollector(Monitor()))
    old = set(DEPRECATED_ALIASES.values())
    names = {f.name for f in reg.collect() if f.name.startswith("cachesync_")} - old
    assert names and all(n.split("_")[1] in ("consumer", "tailer", "relay", "monitor")
                         for n in names), sorted(names)


def test_newest_beats_keep_the_newest_per_source_until_the_probe_takes_them():
    from cachesync.probes import NewestBeats
    beats = NewestBeats()
    beats.add("t1", 1.0, 1.1)
    beats.add("t1", 3.0, 3.2)
    beats.add("t2", 2.0, 2.5)
    taken = beats.take()
    assert taken == {"t1": (3.0, 3.2), "t2": (2.0, 2.5)} and beats.take() == {}
    beats.add("t1", 5.0, 5.1)                 # newer than what could not be recorded
    beats.put_back(taken)
    assert beats.take() == {"t1": (5.0, 5.1), "t2": (2.0, 2.5)}


def test_applied_lags_are_recorded_in_one_statement():
    from cachesync.probes import record_applied_lags
    statements = []

    class Cursor:
        def execute(self, sql, params):
            statements.append((sql, params))

    class Session:
        def run(self, fn):
            return fn(Cursor())
    record_applied_lags(Session(), "ns", {"t2": (2.0, 2.5), "t1": (1.0, 1.25)})
    (sql, params), = statements
    assert sql.count("(%s, %s, %s, %s)") == 2 and "ON DUPLICATE KEY UPDATE" in sql
    assert params == ["ns", "t1", 1_000_000, 1_250_000, "ns", "t2", 2_000_000, 2_500_000]


def test_held_lags_are_in_the_histogram_whenever_it_is_read():
    """The lags wait to be observed (at most a second, or 4,096 of them); any read of the
    histogram, a read of its names only included, finds them there."""
    reg = CollectorRegistry()
    cm = ConsumerMetrics(reg, lambda: None)
    for i in range(3):
        cm.on_batch(Batch([event(commit_ts=100.0)], applied_at=100.25 + i))
    count = ("cachesync_consumer_commit_to_apply_seconds_count", (("kind", "binlog"),))
    only = reg.restricted_registry(["cachesync_consumer_commit_to_apply_seconds_count"])
    assert samples(only)[count] == 3
    cm.on_batch(Batch([event(commit_ts=100.0)], applied_at=101.0))
    assert samples(reg)[count] == 4
    assert samples(reg)[("cachesync_consumer_commit_to_apply_seconds_sum",
                         (("kind", "binlog"),))] == pytest.approx(0.25 + 1.25 + 2.25 + 1.0)
