"""`cachesync lint` against the live MariaDB (information_schema) and Redis (TTLs)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from cachesync.schema.keys import lease_key

pytestmark = pytest.mark.integration

USERS = {"users": {"keys": ["user:{id}", "user:email:{email}"]}}


def cachesync(lab, *args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cachesync", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **lab.stack.env, **(env or {})})


def warnings(result) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith("warning: ")]


def test_lint_is_clean_when_columns_exist_and_keys_expire(lab):
    # a binary collation: under the server's default _ci one, lint warns (issue 13, below)
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, email VARCHAR(100) COLLATE utf8mb4_bin, "
            "name TEXT)")
    cfg = lab.write_config(USERS)
    lab.cache("user:1", "user:email:a@x")               # with a TTL, as an application would
    result = cachesync(lab, "lint", "-c", cfg)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "1 table(s), 0 warning(s) (delete-path, columns, TTLs)"


def test_lint_flags_a_missing_column_a_missing_table_and_a_key_without_ttl(lab):
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name TEXT)")     # no email column
    cfg = lab.write_config({**USERS, "ghosts": {"keys": ["ghost:{id}"]}})
    lab.redis.set(lab.prefix + "user:1", b"cached forever")             # no TTL
    lab.cache("user:2")
    result = cachesync(lab, "lint", "-c", cfg)
    assert result.returncode == 4, result.stdout + result.stderr
    users, ghosts = f"{lab.db}.users", f"{lab.db}.ghosts"
    assert sorted(warnings(result)) == sorted([
        f"warning: {users}: [missing-column] column 'email' (named by "
        f"'{lab.prefix}user:email:{{email}}') is not in the live table; every change of this "
        "table would be dead-lettered and its keys left behind",
        f"warning: {users}: [no-ttl] 1 sampled key(s) matching '{lab.prefix}user:{{id}}' have "
        f"no TTL (e.g. {lab.prefix}user:1); a lost invalidation would keep them forever: set a "
        "TTL when filling the cache",
        f"warning: {ghosts}: [missing-table] the table does not exist (or the cachesync user "
        "cannot see it)",
    ])
    offline = cachesync(lab, "lint", "--offline", "-c", cfg)
    assert offline.returncode == 0 and warnings(offline) == []


def test_lint_reads_live_types_for_collisions_and_collations(lab):
    lab.sql("CREATE TABLE users (id VARCHAR(20) COLLATE utf8mb4_bin PRIMARY KEY, "
            "email VARCHAR(100) COLLATE utf8mb4_general_ci)")
    lab.sql("CREATE TABLE books (id INT PRIMARY KEY, a VARCHAR(9) COLLATE utf8mb4_bin, "
            "b INT)")
    cfg = lab.write_config({**USERS, "books": {"keys": ["bk:{a}:{b}"]}})
    result = cachesync(lab, "lint", "-c", cfg)
    assert result.returncode == 4, result.stdout + result.stderr
    users, books, p = f"{lab.db}.users", f"{lab.db}.books", lab.prefix
    found = sorted(re.fullmatch(r"warning: (\S+): \[([a-z-]+)\] (.*)", w).groups()
                   for w in warnings(result))
    assert [(table, check) for table, check, _ in found] == [
        (books, "ambiguous-key"), (users, "ci-collation"), (users, "overlapping-keys")], found
    assert found[0][2].startswith(f"'{p}bk:{{a}}:{{b}}': a value of {{a}} or {{b}} may contain")
    assert found[1][2].startswith("column 'email' uses the collation utf8mb4_general_ci")
    assert found[2][2].startswith(f"keys of '{p}user:email:{{email}}' (e.g. '{p}user:email:a') "
                                  f"can also be keys of '{p}user:{{id}}'")
    offline = cachesync(lab, "lint", "--offline", "-c", cfg)   # integer columns assumed
    assert offline.returncode == 0 and warnings(offline) == []


@pytest.mark.parametrize("env, code, message", [
    ({"CACHESYNC_MYSQL_PASSWORD": "wrong"}, 3, "MySQL refused"),
    ({"CACHESYNC_REDIS_URL": "redis://127.0.0.1:1/0"}, 1, "Redis unavailable"),
])
def test_lint_exit_codes_when_a_server_refuses_or_is_down(lab, env, code, message):
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, email VARCHAR(100))")
    cfg = lab.write_config(USERS)
    result = cachesync(lab, "lint", "-c", cfg, env=env)
    assert result.returncode == code, result.stdout + result.stderr
    assert message in result.stderr


def test_explain_needs_no_server(lab):
    cfg = lab.write_config(USERS)
    result = cachesync(lab, "explain", f"{lab.db}.users", "--before", '{"id": 1, "email": "a@x"}',
                       "--after", '{"id": 1, "email": "b@x"}', "-c", cfg,
                       env={"CACHESYNC_MYSQL_PORT": "1", "CACHESYNC_REDIS_URL": "redis://127.0.0.1:1/0"})
    assert result.returncode == 0, result.stderr
    p = lab.prefix
    assert result.stdout.splitlines()[1:] == [
        "update:",
        f"  UNLINK {p}user:1 {lease_key(p + 'user:1')}",
        f"  UNLINK {p}user:email:a@x {lease_key(p + 'user:email:a@x')}",
        f"  UNLINK {p}user:email:b@x {lease_key(p + 'user:email:b@x')}"]
