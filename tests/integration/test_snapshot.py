"""`cachesync snapshot` (python engine) on the real services: update-mode keys filled from
MySQL at a low watermark, with the tailer and the consumer running. A row updated and a row
deleted after the snapshot read them (and applied by the consumer before the snapshot
writes) keep the stream's newer state; a row updated before its page is read ends right too."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cachesync.cli import cli
from cachesync.commands.snapshot import run_snapshot
from cachesync.schema.keys import LEASE_HOLD
from tests.support import wait_for
from tests.integration.test_update_mode import db_state, redis_state

pytestmark = pytest.mark.integration

USERS_DDL = ("CREATE TABLE users (id INT PRIMARY KEY, email VARCHAR(100) NOT NULL, "
             "name VARCHAR(100) NOT NULL)")
USERS = {"users": {"keys": ["user:{id}", "user:email:{email}"], "mode": "update"}}
ROWS = 60



def fill(lab, rows: int = ROWS) -> None:
    lab.sql(USERS_DDL)
    with lab.stack.admin(lab.db) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO users VALUES (%s, %s, %s)",
                        [(i, f"u{i}@x", f"name {i}") for i in range(rows)])


def users_pipeline(lab, tables: dict, rows: int = ROWS):
    """``rows`` users in MySQL before the tailer starts (not in the stream), then the tailer
    and a consumer on ``tables``; returns (config path, engine)."""
    fill(lab, rows)
    cfg = lab.write_config(tables)
    lab.start_tailer(cfg)
    return cfg, lab.start_engine(cfg)


def test_snapshot_never_overwrites_an_update_nor_resurrects_a_delete_made_while_it_reads(lab):
    fill(lab)                                     # before the tailer: not in the stream
    cfg = lab.write_config(USERS)
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)

    def race(table, rows):
        if race.done:
            return
        race.done = True
        assert {5, 6} <= {r["id"] for r in rows}          # both were read, as they were
        lab.sql("UPDATE users SET name = 'changed after the read' WHERE id = 5")
        lab.sql("DELETE FROM users WHERE id = 6")
        lab.sql("UPDATE users SET name = 'changed before its read' WHERE id = 45")
        wait_for(lambda: engine.stats.applied >= 3, 60, what="the consumer applying the changes")
        assert redis_state(lab)[f"{lab.prefix}user:5"]["name"] == "changed after the read"
    race.done = False

    report = run_snapshot(lab.settings(cfg), chunk=20, on_chunk=race, show_progress=False)
    summary = report.tables[f"{lab.db}.users"]
    assert redis_state(lab) == db_state(lab)      # the update kept, the delete not undone
    assert f"{lab.prefix}user:6" not in redis_state(lab)
    assert (summary.rows, summary.keys) == (ROWS, 2 * ROWS)
    # rows 5 and 6 (two keys each) were refused by the fence; row 45 was read after its
    # change, so its write at the watermark's version was applied or refused, same value
    assert summary.refused in (4, 6) and summary.written + summary.refused == 2 * ROWS
    assert report.watermark


def test_snapshot_dry_run_renders_every_key_and_writes_nothing_and_refuses_delete_mode(lab):
    fill(lab)
    cfg = lab.write_config({**USERS, "orders": {"keys": ["order:{id}"]}})
    runner = CliRunner()
    result = runner.invoke(cli, ["snapshot", "--config", cfg, "--dry-run"], env=lab.stack.env)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["dry_run"] is True and list(doc["tables"]) == [f"{lab.db}.users"]
    assert {k: doc["tables"][f"{lab.db}.users"][k] for k in ("rows", "keys", "written")} == \
        {"rows": ROWS, "keys": 2 * ROWS, "written": 0}
    assert redis_state(lab) == {}

    result = runner.invoke(cli, ["snapshot", "--config", cfg, "--table", f"{lab.db}.orders"],
                           env=lab.stack.env)
    assert result.exit_code == 2 and "delete-mode" in result.output

    result = runner.invoke(cli, ["snapshot", "--config", cfg, "--rate", "100"], env=lab.stack.env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["tables"][f"{lab.db}.users"]["written"] == 2 * ROWS
    assert redis_state(lab) == db_state(lab)


PREFILL = {"users": {"keys": ["user:{id}", "user:email:{email}"], "prefill": "json"}}


def test_prefill_of_a_delete_mode_table_never_leaves_a_stale_or_resurrected_key(lab):
    """Changes between the first read and the leases hold their keys' leases
    (redis.fill_hold_ms): the prefill leaves those keys to readers; changes after the second
    read (applied by the consumer before the fills) void the leases."""
    cfg, engine = users_pipeline(lab, PREFILL)

    def before_leases(table, rows):
        if {5, 6} <= {r["id"] for r in rows}:
            lab.sql("UPDATE users SET name = 'changed before the leases' WHERE id = 5")
            lab.sql("DELETE FROM users WHERE id = 6")
            wait_for(lambda: engine.stats.applied >= 2, 60, what="the consumer applying them")

    def after_second_read(table, rows):
        if 8 in {r["id"] for r in rows}:
            assert not {5, 6} & {r["id"] for r in rows}     # held: not leased, not read again
            lab.sql("UPDATE users SET name = 'changed after the second read' WHERE id = 7")
            lab.sql("DELETE FROM users WHERE id = 8")
            lab.sql("UPDATE users SET email = 'moved@x' WHERE id = 9")
            wait_for(lambda: engine.stats.applied >= 5, 60, what="the consumer applying them")

    report = run_snapshot(lab.settings(cfg), chunk=20, on_chunk=before_leases,
                          on_reread=after_second_read, show_progress=False)
    summary = report.tables[f"{lab.db}.users"]
    cached, rows = redis_state(lab), db_state(lab)
    assert all(rows.get(key) == value for key, value in cached.items())   # nothing stale
    assert set(rows) - set(cached) == {f"{lab.prefix}{k}" for k in (
        "user:5", "user:email:u5@x", "user:7", "user:email:u7@x", "user:9",
        "user:email:moved@x")}                                            # left to readers
    leases = [lab.redis.get(k) for k in lab.redis.scan_iter(match=f"cachesync:lease:*{lab.prefix}*")]
    assert all(v.startswith(LEASE_HOLD.encode()) for v in leases if v)   # the prefill's:
    # every one filled or given back; what is left are the invalidations' holds
    assert (summary.rows, summary.keys, summary.written, summary.refused, summary.kept) == \
        (ROWS, 2 * ROWS, 2 * ROWS - 10, 6, 4)
    assert engine.stats.applied == 5


def test_a_delete_mode_table_without_prefill_or_with_an_unknown_column_is_refused(lab):
    fill(lab)
    cfg = lab.write_config({"users": {"keys": ["user:{id}"], "prefill": "json",
                                      "prefill_columns": ["id", "nickname"]},
                            "orders": {"keys": ["order:{id}"]}})
    runner = CliRunner()
    result = runner.invoke(cli, ["snapshot", "--config", cfg, "--table", f"{lab.db}.orders"],
                           env=lab.stack.env)
    assert result.exit_code == 2 and "without prefill" in result.output
    result = runner.invoke(cli, ["snapshot", "--config", cfg], env=lab.stack.env)
    assert result.exit_code == 2 and "nickname not in the table" in result.output
    assert redis_state(lab) == {}
