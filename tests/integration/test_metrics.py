"""/metrics, /readyz and the heartbeat on real MariaDB, Kafka and Redis (`cachesync tail` and
`cachesync consume` as child processes, scraped over HTTP)."""

from __future__ import annotations

from tests.support import address, scrape, stack_command, status_of, wait_for

USERS = {"users": {"keys": ["user:{id}"]}}


def start_pipeline(lab, tailer=None):
    lab.sql("CREATE TABLE users (id INT PRIMARY KEY, name VARCHAR(50))")
    cfg = lab.write_config(USERS, tailer=tailer)
    tail = lab.start_tailer(cfg)
    consume = lab.spawn("consume", cfg)
    return cfg, tail, consume


def test_counters_and_lag_histogram_count_a_known_number_of_events(lab):
    _, tail, consume = start_pipeline(lab)
    addr, tail_addr = address(lab, consume), address(lab, tail)
    wait_for(lambda: status_of(addr, "/readyz") == 200, 60, interval=0.2, what="consumer ready")
    for i in range(4):   # 4 transactions x 5 rows, then 5 updates: 25 row events
        lab.sql("INSERT INTO users VALUES " + ",".join(f"({i * 5 + j}, 'u')" for j in range(5)))
    lab.sql("UPDATE users SET name = 'v' WHERE id < 5")
    first = wait_for(lambda: lab.topic_events(), 60, interval=0.2, what="a published event")[0]
    lab.produce_raw(first.value, first.key)     # the same message id again: a duplicate
    lab.produce_raw(b"not an event")            # undecodable: a dead letter

    binlog = (("kind", "binlog"),)
    lag_count = ("cachesync_consumer_commit_to_apply_seconds_count", binlog)

    def consumed_and_sampled(s):
        # the lag is sampled after a batch's offsets are committed, so after it was counted
        # as consumed: await both, then check every count exactly
        return s if s[("cachesync_events_consumed_total", ())] == 27 and \
            s.get(lag_count, 0) >= 25 else None
    m = wait_for(lambda: consumed_and_sampled(scrape(addr)), 60, interval=0.2,
                 what="27 records consumed and the last batch's lag sampled")
    assert m[("cachesync_consumer_events_applied_total", ())] == 25
    assert m[("cachesync_duplicates_skipped_total", ())] == 1
    assert m[("cachesync_dead_letters_total", ())] == 1
    assert m[("cachesync_fenced_writes_refused_total", ())] == 0
    assert m[("cachesync_retries_total", ())] == 0
    assert m[lag_count] == 25
    assert m[("cachesync_consumer_commit_to_apply_seconds_bucket", (*binlog, ("le", "+Inf")))] == 25
    # binlog commit times are whole seconds: each lag is under 1 s of rounding + real lag
    assert m[("cachesync_consumer_commit_to_apply_seconds_bucket", (*binlog, ("le", "10.0")))] == 25
    assert 0 < m[("cachesync_consumer_commit_to_apply_seconds_sum", binlog)] < 25 * 10
    assert ("cachesync_consumer_commit_to_apply_seconds_count", (("kind", "heartbeat"),)) not in m

    def caught_up():
        s = scrape(addr)
        lags = [v for (name, _), v in s.items() if name == "cachesync_consumer_kafka_lag_messages"]
        return len(lags) == 3 and sum(lags) == 0
    wait_for(caught_up, 60, interval=0.2, what="Kafka consumer lag 0 on all 3 partitions")
    t = scrape(tail_addr)
    assert t[("cachesync_tailer_rows_published_total", ())] == 25
    assert t[("cachesync_checkpoint_age_seconds", ())] >= 0
    assert status_of(addr, "/healthz") == 200 and status_of(tail_addr, "/readyz") == 200


def test_heartbeat_measures_lag_while_idle_without_touching_redis(lab):
    _, tail, consume = start_pipeline(lab, tailer={"heartbeat_interval_s": 0.2})
    addr, tail_addr = address(lab, consume), address(lab, tail)
    unlinks = lab.redis.info("commandstats").get("cmdstat_unlink", {}).get("calls", 0)
    beats = (("kind", "heartbeat"),)
    count, total = ("cachesync_consumer_commit_to_apply_seconds_count", beats), \
        ("cachesync_consumer_commit_to_apply_seconds_sum", beats)

    def beats_applied(at_least: int):
        return lambda: (lambda s: s if s.get(count, 0) >= at_least else None)(scrape(addr))

    # the first beats wait for the consumer to join its group: their lag is start-up, not idle lag
    settled = wait_for(beats_applied(5), 60, interval=0.2, what="5 heartbeats applied")
    m = wait_for(beats_applied(settled[count] + 5), 60, interval=0.2,
                 what="5 more heartbeats applied")
    applied = m[count]
    # heartbeats carry a microsecond write time: exact lag, well under a second once idle
    assert (m[total] - settled[total]) / (applied - settled[count]) < 1.0
    assert m[("cachesync_keys_deleted_total", ())] == 0
    assert m[("cachesync_dead_letters_total", ())] == 0
    assert lab.redis.info("commandstats").get("cmdstat_unlink", {}).get("calls", 0) == unlinks
    t = scrape(tail_addr)
    assert t[("cachesync_heartbeats_written_total", ())] >= applied
    assert t[("cachesync_checkpoint_age_seconds", ())] < 30


def test_readyz_is_unready_while_kafka_is_down_and_ready_after(lab):
    _, _, consume = start_pipeline(lab)
    addr = address(lab, consume)
    wait_for(lambda: status_of(addr, "/readyz") == 200, 60, interval=0.2, what="consumer ready")
    try:
        stack_command("down", "kafka")
        wait_for(lambda: status_of(addr, "/readyz") == 503, 60, interval=0.2,
                 what="/readyz 503 with Kafka down")
        assert status_of(addr, "/healthz") == 200        # alive, just not ready
    finally:
        stack_command("up", "kafka")
    wait_for(lambda: status_of(addr, "/readyz") == 200, 120, interval=0.5,
             what="/readyz 200 after Kafka is back")
    lab.sql("INSERT INTO users VALUES (1, 'after')")
    # consumed: applied by the consumer, or skipped as done when the tailer applied it itself
    # while the consumer caught up after the outage (tailer.on_kafka_outage: invalidate)
    wait_for(lambda: scrape(addr)[("cachesync_consumer_events_consumed_total", ())] >= 1, 120,
             interval=0.5, what="an event consumed after the restart")
