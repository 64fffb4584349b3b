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
from tests.support import wait_for
from tests.integration.test_update_mode import db_state, redis_state

pytestmark = pytest.mark.integration

USERS_DDL = ("CREATE TABLE users (id INT PRIMARY KEY, email VARCHAR(100) NOT NULL, "
             "name VARCHAR(100) NOT NULL)")
USERS = {"users": {"keys": ["user:{id}", "user:email:{email}"], "mode": "update"}}
ROWS = 60



def fill(lab) -> None:
    lab.sql(USERS_DDL)
    with lab.stack.admin(lab.db) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO users VALUES (%s, %s, %s)",
                        [(i, f"u{i}@x", f"name {i}") for i in range(ROWS)])


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
