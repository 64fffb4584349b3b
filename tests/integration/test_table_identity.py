"""Issue 12, table identity: a row event is decoded only against the table map that
preceded it in the same binlog and server run (real MariaDB restarts)."""

from __future__ import annotations

import json
import re

import pytest

from tests.support import stack_command, wait_for

pytestmark = pytest.mark.integration

ACCT_DDL = ("CREATE TABLE acct (id BIGINT PRIMARY KEY, name VARCHAR(100) NOT NULL, "
            "version BIGINT NOT NULL)")
# Same shape as acct, not mapped: after a restart it can take acct's old table id.
OTHER_DDL = ACCT_DDL.replace("acct", "other")
ACCT = {"acct": {"keys": ["acct:{id}"], "mode": "update", "version_column": "version",
                 "value_columns": ["id", "name", "version"]}}


def restart_mariadb(lab) -> None:
    stack_command("down", "mariadb")
    stack_command("up", "mariadb")
    wait_for(lambda: lab.sql("SELECT 1"), 60, what="MariaDB back after the restart")
    # stack.sh up resets the cachesync account's grants to the devstack's
    lab.sql(f"GRANT SELECT ON {lab.db}.* TO cachesync@'127.0.0.1'")


def table_ids(lab, log_file: str) -> dict[str, int]:
    """Table id per table name of the Table_map events of one binlog file."""
    ids = {}
    for row in lab.sql(f"SHOW BINLOG EVENTS IN '{log_file}'"):
        m = re.search(r"table_id: (\d+) \(([^)]+)\)", row[5] or "")
        if row[2] == "Table_map" and m:
            ids[m.group(2)] = int(m.group(1))
    return ids


def current_log(lab) -> str:
    return lab.sql("SHOW MASTER STATUS")[0][0]


def cached_value(lab, key: str):
    raw = lab.redis.get(lab.prefix + key)
    return None if raw is None else json.loads(raw)


def test_reused_table_id_after_restart_never_poisons_the_cache(lab):
    """The issue's sequence: acct updated with table id N, MariaDB restarted, the
    unmapped `other` written with the same id N, then the tailer catches up over both.
    Before the fix Redis held other's row under acct:1 with version 999 and later
    updates of acct were fenced out."""
    lab.sql(ACCT_DDL)
    lab.sql(OTHER_DDL)
    cfg = lab.write_config(ACCT, consumer={"dedup_store": "redis"})
    tailer = lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    lab.sql("INSERT INTO acct VALUES (1, 'ada', 1)")
    wait_for(lambda: cached_value(lab, "acct:1") == {"id": 1, "name": "ada", "version": 1},
             what="acct:1 written")
    tailer.terminate()
    tailer.wait(30)

    # Each table first opened right after a restart: both get the same table id.
    restart_mariadb(lab)
    acct_log = current_log(lab)
    lab.sql("UPDATE acct SET name = 'bea', version = 2 WHERE id = 1")
    restart_mariadb(lab)
    other_log = current_log(lab)
    lab.sql("INSERT INTO other VALUES (1, 'foreign', 999)")
    acct_id = table_ids(lab, acct_log)[f"{lab.db}.acct"]
    assert table_ids(lab, other_log)[f"{lab.db}.other"] == acct_id, \
        "precondition: the unmapped table reuses acct's table id"

    lab.start_tailer(cfg)
    wait_for(lambda: cached_value(lab, "acct:1") == {"id": 1, "name": "bea", "version": 2},
             what="acct:1 = the committed update")
    lab.sql("UPDATE acct SET name = 'cy', version = 3 WHERE id = 1")
    wait_for(lambda: cached_value(lab, "acct:1") == {"id": 1, "name": "cy", "version": 3},
             what="a later update of acct applied, not fenced out")
    assert engine.stats.fenced == 0
    assert all(e.key.decode().startswith(f"{lab.db}.acct:") for e in lab.topic_events())
