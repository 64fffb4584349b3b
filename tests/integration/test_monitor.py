"""The consistency monitor on real MariaDB, Kafka and Redis: inside `cachesync consume` (a hook)
and as `cachesync monitor` (its own consumer group), it catches keys planted stale on purpose,
and reports no stale key while a racing write workload runs."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from bench.monitor import Workload
from tests.support import add_config_sections, address, scrape, wait_for

TABLES = {"users": {"keys": ["user:{id}"]},                      # delete mode: the app fills
          "items": {"keys": ["item:{id}"], "mode": "update"}}    # cachesync writes the value
MONITOR = {"sample_ratio": 1.0, "window_s": 3.0, "max_checks_per_s": 1000}
ROWS = 200


def start(lab, monitor=None, tailer=None):
    lab.sql("CREATE TABLE users (id INT PRIMARY KEY, name VARCHAR(50))")
    lab.sql("CREATE TABLE items (id INT PRIMARY KEY, price INT, name VARCHAR(50))")
    cfg = add_config_sections(lab.write_config(TABLES, tailer=tailer),
                              monitor={**MONITOR, **(monitor or {})})
    lab.start_tailer(cfg)
    return cfg


def checks(addr: str) -> dict:
    """{(table suffix, result): count} of cachesync_monitor_checks_total, and the rest."""
    out = {}
    for (name, labels), value in scrape(addr).items():
        if name == "cachesync_monitor_checks_total":
            d = dict(labels)
            out[(d["table"].split(".", 1)[1], d["result"])] = value
        elif name.startswith("cachesync_monitor_") or name == "cachesync_consumer_events_applied_total":
            out[name] = value
    return out


def settled(addr: str, expect) -> dict:
    """The counts once nothing is pending and ``expect(counts)`` holds."""
    def done():
        c = checks(addr)
        return c if c.get("cachesync_monitor_pending") == 0 and expect(c) else None
    return wait_for(done, 120, interval=0.5, what=f"the monitor at {addr} to settle")


def test_the_monitor_catches_keys_planted_stale(lab):
    cfg = start(lab)
    consume, monitor = lab.spawn("consume", cfg), lab.spawn("monitor", cfg)
    c_addr, m_addr = address(lab, consume), address(lab, monitor)
    # `cachesync monitor` starts at the newest offsets: write until it has checked a row
    warmed = []

    def followed():
        warmed.append(1000 + len(warmed))
        lab.sql("INSERT INTO users VALUES (%s, 'w')", (warmed[-1],))
        return checks(m_addr).get(("users", "missing"))
    wait_for(followed, 60, interval=1.0, what="the monitor to follow the change topic")
    lab.sql("INSERT INTO items VALUES (1, 10, 'a'), (2, 20, 'b')")
    lab.sql("INSERT INTO users VALUES (1, 'ann'), (2, 'bob')")

    # update mode: once cachesync wrote the values, the row changes behind its back (no binlog)
    wait_for(lambda: lab.redis.get(lab.prefix + "item:1") and lab.redis.get(lab.prefix + "item:2"),
             60, interval=0.05, what="cachesync's values of item:1 and item:2")
    with lab.stack.admin(lab.db) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("UPDATE items SET price = 11 WHERE id = 1")
    # delete mode: once the inserts were applied, an application fills one key wrong, one right
    wait_for(lambda: checks(c_addr).get("cachesync_consumer_events_applied_total") == len(warmed) + 4, 60,
             interval=0.05, what="the consumer to apply every insert")
    lab.redis.set(lab.prefix + "user:1", json.dumps({"id": 1, "name": "eve"}), ex=600)
    lab.redis.set(lab.prefix + "user:2", json.dumps({"id": 2, "name": "bob"}), ex=600)

    for addr, proc in ((c_addr, consume), (m_addr, monitor)):
        c = settled(addr, lambda c: c.get(("items", "stale")) and c.get(("users", "stale")))
        assert c[("items", "stale")] == 1 and c[("users", "stale")] == 1, c
        assert c[("items", "consistent")] == 1 and c[("users", "consistent")] == 1, c
        assert ("items", "unsettled") not in c and ("users", "unsettled") not in c, c
        assert c["cachesync_monitor_check_errors_total"] == 0
        assert c["cachesync_monitor_mysql_reads_total"] > 0
        # a check is counted before its WARNING is written: await the lines (in the whole log)
        def warned():
            found = re.findall(r"WARNING.*stale cache key (\S+) of (\S+):",
                               pathlib.Path(proc.log_path).read_text())
            return found if len(found) >= 2 else None
        warnings = wait_for(warned, 60, interval=0.2, what=f"two stale-key WARNINGs at {addr}")
        assert sorted(warnings) == [(lab.prefix + "item:1", f"{lab.db}.items"),
                                    (lab.prefix + "user:1", f"{lab.db}.users")]


def test_no_stale_key_is_reported_under_a_racing_write_workload(lab):
    cfg = start(lab, {"window_s": 1.0})
    consume = lab.spawn("consume", cfg)
    addr = address(lab, consume)
    rows = range(ROWS)
    lab.sql("INSERT INTO items VALUES " + ",".join(f"({i}, 0, 'i')" for i in rows))
    lab.sql("INSERT INTO users VALUES " + ",".join(f"({i}, 'u')" for i in rows))
    # racing: each row changes every ~2 s on average, two readers fill users meanwhile
    work = Workload(lab, rows=ROWS, write_rate=100, readers=2, seconds=40)
    work.run()
    applied = 2 * ROWS + work.events
    c = settled(addr, lambda c: c.get("cachesync_consumer_events_applied_total") == applied)
    stale = {k: v for k, v in c.items() if isinstance(k, tuple) and k[1] == "stale"}
    assert stale == {}, c
    # the checks did compare values: cachesync's own (items) and the readers' fills (users)
    assert c[("items", "consistent")] >= 200, c
    assert c.get(("users", "consistent"), 0) >= 20, c
    assert c["cachesync_monitor_check_errors_total"] == 0
    assert "stale cache key" not in lab.log(consume)


def test_a_blocked_monitor_drops_samples_and_never_holds_up_the_consumer(lab):
    # the monitor's reads wait on a table lock; the consumer keeps applying, samples beyond
    # the bounded queue are dropped and counted, and the checks finish once the lock is gone
    cfg = start(lab, {"window_s": 0.2, "queue_size": 5})
    consume = lab.spawn("consume", cfg)
    addr = address(lab, consume)
    lab.sql("INSERT INTO items VALUES " + ",".join(f"({i}, 0, 'i')" for i in range(40)))
    dropped_name = "cachesync_monitor_samples_dropped_total"

    def every_sample_accounted(c) -> bool:
        # the batch is counted as applied before its samples are offered to the monitor
        return c.get("cachesync_consumer_events_applied_total") == 40 and \
            c.get(("items", "consistent"), 0) + c.get(dropped_name, 0) == 40
    c0 = settled(addr, every_sample_accounted)
    checked0, dropped0 = c0.get(("items", "consistent"), 0), c0.get(dropped_name, 0)
    assert checked0 + dropped0 == 40            # one batch of 40 samples, a queue of 5
    with lab.stack.admin(lab.db) as conn, conn.cursor() as cur:
        cur.execute("LOCK TABLES items WRITE")          # plain SELECTs of others now wait
        for i in range(40):
            cur.execute("UPDATE items SET price = 1 WHERE id = %s", (i,))

        def applied():
            values = lab.redis.mget([f"{lab.prefix}item:{i}" for i in range(40)])
            c = checks(addr)
            done = all(v and json.loads(v)["price"] == 1 for v in values)
            # every sample is dropped or pending (waiting, or the one check blocked on the lock)
            waiting = c.get(dropped_name, 0) - dropped0 + c["cachesync_monitor_pending"]
            return c if done and c["cachesync_consumer_events_applied_total"] == 80 and waiting == 40 \
                else None
        c = wait_for(applied, 60, interval=0.1, what="the 40 updates applied while the monitor waits")
        assert c[("items", "consistent")] == checked0            # nothing checked since the lock
        dropped = c[dropped_name] - dropped0
        # pending: at most a queue and a heap of 5, the check in hand taken from the heap
        assert dropped > 0 and c["cachesync_monitor_pending"] <= 2 * 5, c
        cur.execute("UNLOCK TABLES")
    c = settled(addr, lambda c: c.get(("items", "consistent"), 0) == checked0 + 40 - dropped)
    assert ("items", "stale") not in c and ("items", "unsettled") not in c, c
    assert c["cachesync_monitor_check_errors_total"] == 0
    assert scrape(addr)[(dropped_name, (("reason", "queue_full"),))] == dropped0 + dropped


def figure(addr: str, prefix: str) -> dict:
    """The per-change figure a process exports: {(metric suffix, kind, label): value}."""
    out = {}
    for (name, labels), value in scrape(addr).items():
        if name.startswith(prefix + "_changes") or name.startswith(prefix + "_commit_to_apply_q"):
            d = dict(labels)
            out[(name[len(prefix) + 1:], d["kind"], d.get("within") or d.get("quantile"))] = value
    return out


def test_the_monitor_states_the_per_change_figure_from_the_consumers_done_marks(lab):
    """`cachesync monitor` times the consumer's applies by the dedup store's done marks and
    exports and logs the share applied within 100 ms and 1 s and the percentiles, as the
    consumer itself does."""
    cfg = start(lab, tailer={"heartbeat_interval_s": 0.5})
    consume, monitor = lab.spawn("consume", cfg), lab.spawn("monitor", cfg)
    c_addr, m_addr = address(lab, consume), address(lab, monitor)
    n = [0]

    def counted():
        n[0] += 1
        lab.sql("INSERT INTO users VALUES (%s, 'w')", (n[0],))
        f = figure(m_addr, "cachesync_monitor")
        rows = f.get(("changes_total", "rows", None), 0)
        beats = f.get(("changes_total", "heartbeats", None), 0)
        return f if rows >= 20 and beats >= 3 else None
    f = wait_for(counted, 180, interval=0.2, what="the monitor to time 20 row changes, 3 beats")
    for kind in ("rows", "heartbeats"):
        for within in ("100ms", "1s"):
            ratio = f[("changes_within_ratio", kind, within)]
            late = f[("changes_late_total", kind, within)]
            total = f[("changes_total", kind, None)]
            assert ratio == pytest.approx((total - late) / total), f
        quantiles = [f[("commit_to_apply_quantile_seconds", kind, q)]
                     for q in ("0.5", "0.99", "0.999")]
        assert 0 <= quantiles[0] <= quantiles[1] <= quantiles[2] < 60, f
    # heartbeats carry their exact write time: an idle devstack applies them within a second
    assert f[("changes_within_ratio", "heartbeats", "1s")] > 0.5, f
    c = figure(c_addr, "cachesync_consumer")               # the consumer states the same
    assert c[("changes_total", "rows", None)] >= 20 and ("changes_within_ratio", "heartbeats",
                                                          "1s") in c, c
    monitor.terminate()                                   # SIGTERM: the figure is logged at exit
    monitor.wait(60)
    text = lab.log(monitor)
    line = re.search(r"commit -> apply, heartbeats: ([\d,]+) changes: .*within 100ms.*"
                     r"within 1s.*p50 [\d.]+ ms, p99 [\d.]+ ms, p99.9 [\d.]+ ms", text)
    assert line, text[-3000:]
    assert re.search(r"commit -> apply, rows: [\d,]+ changes: ", text), text[-3000:]
