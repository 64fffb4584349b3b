"""A sharded schema mapped by one pattern, on real MariaDB, Kafka and Redis: shards in two
databases, a shard created while the pipeline runs, column filters, an online schema
change's shadow table and swap."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from cachesync.consumer.core.tally import UNWATCHED
from tests.support import cli, wait_for

pytestmark = pytest.mark.integration

SHARD_DDL = ("CREATE TABLE {db}.{t} (id BIGINT PRIMARY KEY, email VARCHAR(100) NOT NULL, "
             "name VARCHAR(100) NOT NULL, view_count INT NOT NULL DEFAULT 0)")


def _config(lab, tables: dict) -> str:
    path = lab.write_config({"placeholder": {"keys": ["x:{id}"]}})
    doc = yaml.safe_load(open(path))
    doc["tables"] = tables
    open(path, "w").write(yaml.safe_dump(doc))
    return path


@pytest.fixture
def sharded(lab):
    """user_00..user_07 in lab.db, user_08..user_15 in lab.db + '_b', one row each."""
    other = f"{lab.db}_b"
    lab.sql(f"CREATE DATABASE {other}")
    lab.sql(f"GRANT SELECT ON {other}.* TO cachesync@'127.0.0.1'")
    dbs = {i: lab.db if i < 8 else other for i in range(16)}
    for i, db in dbs.items():
        lab.sql(SHARD_DDL.format(db=db, t=f"user_{i:02d}"))
        lab.sql(f"INSERT INTO {db}.user_{i:02d} VALUES (1, 'a@x', 'n', 0)")
    yield lab, dbs
    lab.sql(f"DROP DATABASE IF EXISTS {other}")
    lab.sql(f"REVOKE SELECT ON {other}.* FROM cachesync@'127.0.0.1'")


def test_one_pattern_maps_every_shard_filters_columns_and_finds_new_shards(sharded):
    lab, dbs = sharded
    cfg = _config(lab, {f"{lab.db}*.user_*": {
        "keys": [lab.prefix + "user:{_db}:{_table}:{id}"],
        "ignore_columns": ["view_count"]}})
    tailer = lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    keys = {i: f"user:{db}:user_{i:02d}:1" for i, db in dbs.items()}
    lab.cache(*keys.values())

    # a watched column in one shard of each database: only those keys go
    lab.sql(f"UPDATE {dbs[3]}.user_03 SET name = 'm' WHERE id = 1")
    lab.sql(f"UPDATE {dbs[12]}.user_12 SET name = 'm' WHERE id = 1")
    wait_for(lambda: not lab.cached(keys[3], keys[12]), what="the two updated shards' keys gone")
    assert lab.cached(*keys.values()) == [k for i, k in keys.items() if i not in (3, 12)]

    # an ignored column: nothing invalidated, counted
    lab.sql(f"UPDATE {dbs[5]}.user_05 SET view_count = view_count + 1 WHERE id = 1")
    wait_for(lambda: engine.tables.snapshot().get((UNWATCHED, f"{dbs[5]}.user_05", "")) == 1,
             what="the view_count update counted as unwatched")
    assert lab.cached(keys[5]) == [keys[5]]

    # a shard created while the pipeline runs: mapped from its first row, no restart
    lab.sql(SHARD_DDL.format(db=dbs[15], t="user_16"))
    lab.sql(f"INSERT INTO {dbs[15]}.user_16 VALUES (1, 'a@x', 'n', 0)")
    new_key = f"user:{dbs[15]}:user_16:1"
    lab.cache(new_key)
    lab.sql(f"UPDATE {dbs[15]}.user_16 SET email = 'b@x' WHERE id = 1")
    wait_for(lambda: not lab.cached(new_key), what="the new shard's key gone")
    wait_for(lambda: "now mapped (first seen in the binlog)" in lab.log(tailer),
             what="the INFO line naming the new shard")
    assert lab.log(tailer).count(f"table {dbs[15]}.user_16 matches") == 1

    # gh-ost: the shadow table's rows are not mapped; the swap invalidates the table
    shadow_key = f"user:{lab.db}:_user_00_gho:1"
    lab.sql(SHARD_DDL.format(db=lab.db, t="_user_00_gho"))
    lab.sql(f"INSERT INTO {lab.db}._user_00_gho VALUES (1, 'a@x', 'n', 0)")
    lab.cache(shadow_key)
    lab.sql(f"UPDATE {lab.db}._user_00_gho SET name = 'z' WHERE id = 1")
    lab.sql(f"RENAME TABLE {lab.db}.user_00 TO {lab.db}._user_00_del, "
            f"{lab.db}._user_00_gho TO {lab.db}.user_00")
    wait_for(lambda: not lab.cached(keys[0]), what="user_00's keys gone at the swap")
    assert lab.cached(shadow_key) == [shadow_key]
    shadows = [e for e in lab.topic_events() if e.event.table.endswith("_gho")]
    assert shadows == []


def test_init_on_the_demo_schema_lints_clean_and_runs(lab):
    from cachesync.demo_run import DEMO_SCHEMA
    for statement in DEMO_SCHEMA[1:]:                  # the demo's tables, in this lab's db
        lab.sql(statement.replace("demo.", f"{lab.db}."))
    lab.sql(f"INSERT INTO {lab.db}.users (id, email, name) VALUES (1, 'a@x', 'n')")
    out = lab.tmp / "init.yaml"
    made = subprocess.run([sys.executable, "-m", "cachesync", "init", lab.db, "-o", str(out)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **lab.stack.env})
    assert made.returncode == 0, made.stdout + made.stderr       # lint found nothing
    assert "0 warning(s)" in made.stdout
    proposed = yaml.safe_load(out.read_text())["tables"]
    assert proposed == {f"{lab.db}.orders": {"keys": ["orders:{id}"]},
                        f"{lab.db}.users": {"keys": ["users:{id}"]}}
    # it runs: the proposed entries (with this lab's key prefix) in a full config
    cfg = _config(lab, {name: lab._prefixed(spec) for name, spec in proposed.items()})
    lab.start_tailer(cfg)
    lab.start_engine(cfg)
    lab.cache("users:1")
    lab.sql(f"UPDATE {lab.db}.users SET name = 'm' WHERE id = 1")
    wait_for(lambda: not lab.cached("users:1"), what="the proposed key invalidated")


def test_first_start_over_a_filled_cache_warns_and_names_resync(lab):
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY)")
    cfg = lab.write_config({"users": {"keys": ["user:{id}"]}})
    lab.cache("user:1")                       # cached before cachesync ever ran
    tailer = lab.start_tailer(cfg)
    # doctor's checks run once the tailer reads; the warning is about the state before it
    text = wait_for(lambda: (lambda t: "WARN first-start" in t and t)(lab.log(tailer)), 60,
                    what="the first-start warning")
    assert "cachesync resync" in text
    assert f"{lab.prefix}user:1" in text


def test_explain_lists_and_resync_invalidates_every_shard_of_a_pattern(sharded):
    lab, dbs = sharded
    cfg = _config(lab, {f"{lab.db}*.user_*": {"keys": [lab.prefix + "user:{_db}:{_table}:{id}"]},
                        f"{lab.db}.user_00": {"keys": [lab.prefix + "first:{id}"]}})
    env = {**os.environ, **lab.stack.env}
    listed = subprocess.run([sys.executable, "-m", "cachesync", "explain", "--tables", "-c", cfg],
                            capture_output=True, text=True, timeout=120, env=env)
    assert listed.returncode == 0, listed.stderr
    lines = dict(line.split(": ", 1) for line in listed.stdout.splitlines())
    assert lines[f"{lab.db}.user_00"] == f"1 table(s): {lab.db}.user_00"
    assert lines[f"{lab.db}*.user_*"].startswith("15 table(s): ")   # the exact entry wins
    keys = [f"user:{db}:user_{i:02d}:1" for i, db in dbs.items() if i] + ["first:1"]
    lab.cache(*keys)
    done = subprocess.run([sys.executable, "-m", "cachesync", "resync", "-c", cfg],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert lab.cached(*keys) == []


def test_pattern_tables_with_uuid_keys_render_the_server_text(lab):
    """MariaDB carries UUID columns as BINARY in the binlog; the tailer reads their types for
    a pattern's tables too, those existing at start and one created while it runs."""
    uuid_ddl = "CREATE TABLE {t} (id UUID PRIMARY KEY, name VARCHAR(20) NOT NULL)"
    lab.sql(uuid_ddl.format(t="acct_00"))
    cfg = _config(lab, {f"{lab.db}.acct_*": {"keys": [lab.prefix + "acct:{_table}:{id}"]}})
    lab.start_tailer(cfg)
    lab.start_engine(cfg)
    lab.sql(uuid_ddl.format(t="acct_01"))
    uid = "123e4567-e89b-12d3-a456-426655440000"
    for table in ("acct_00", "acct_01"):
        lab.sql(f"INSERT INTO {table} VALUES ('{uid}', 'a')")
        lab.cache(f"acct:{table}:{uid}")
        lab.sql(f"UPDATE {table} SET name = 'b'")
        wait_for(lambda: not lab.cached(f"acct:{table}:{uid}"),
                 what=f"the {table} key in the UUID's text form invalidated")


def test_init_prints_lint_warnings_and_exits_0_unless_strict(lab):
    # a text key under a _ci collation: lint warns (ci-collation), as on django_session
    lab.sql(f"CREATE TABLE {lab.db}.sessions_kv (session_key VARCHAR(40) PRIMARY KEY) "
            "COLLATE utf8mb4_general_ci")
    relaxed = cli(lab, "init", lab.db, "-o", str(lab.tmp / "a.yaml"))
    assert relaxed.returncode == 0, relaxed.stdout + relaxed.stderr
    assert "warning: " in relaxed.stdout and "ci-collation" in relaxed.stdout
    assert "--strict makes them fatal" in relaxed.stdout
    strict = cli(lab, "init", "--strict", lab.db, "-o", str(lab.tmp / "b.yaml"))
    assert strict.returncode == 4, strict.stdout + strict.stderr


def test_init_without_a_select_grant_names_the_grant(lab):
    hidden = f"{lab.db}_nogrant"
    lab.sql(f"CREATE DATABASE {hidden}")
    try:
        lab.sql(f"CREATE TABLE {hidden}.t (id INT PRIMARY KEY)")
        made = cli(lab, "init", hidden, "-o", str(lab.tmp / "c.yaml"))
        assert made.returncode != 0
        assert f"has no SELECT on it; an administrator can run: GRANT SELECT ON `{hidden}`.* " \
               "TO 'cachesync'@" in made.stderr + made.stdout
    finally:
        lab.sql(f"DROP DATABASE {hidden}")
