"""The tailer refuses to start against a server or account that cannot work, and says why."""

import subprocess
import sys
import uuid

import pytest

pytestmark = pytest.mark.integration


def test_missing_replication_grant_is_named_and_exit_code_is_3(lab):
    user, password = f"weak_{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    lab.sql(f"CREATE USER {user}@'127.0.0.1' IDENTIFIED BY %s", (password,))
    try:
        lab.sql(f"GRANT SELECT ON {lab.db}.* TO {user}@'127.0.0.1'")
        lab.sql(f"GRANT BINLOG MONITOR ON *.* TO {user}@'127.0.0.1'")
        lab.sql("CREATE TABLE users (id INT PRIMARY KEY)")
        cfg = lab.write_config({"users": {"keys": ["user:{id}"]}})
        env = {**lab.stack.env, "CACHESYNC_MYSQL_USER": user, "CACHESYNC_MYSQL_PASSWORD": password}
        env.pop("CACHESYNC_MYSQL_PASSWORD_FILE")
        done = subprocess.run([sys.executable, "-m", "cachesync", "tail", "--config", cfg],
                              env=env, capture_output=True, text=True, timeout=60)
    finally:
        lab.sql(f"DROP USER {user}@'127.0.0.1'")
    assert done.returncode == 3, done.stderr
    assert "lacks REPLICATION SLAVE" in done.stderr
    assert password not in done.stderr + done.stdout


def test_wrong_password_is_a_clear_fatal_error(lab):
    lab.sql("CREATE TABLE users (id INT PRIMARY KEY)")
    cfg = lab.write_config({"users": {"keys": ["user:{id}"]}})
    env = {**lab.stack.env, "CACHESYNC_MYSQL_PASSWORD": "wrong-password-123"}
    env.pop("CACHESYNC_MYSQL_PASSWORD_FILE")
    done = subprocess.run([sys.executable, "-m", "cachesync", "tail", "--config", cfg],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert "Access denied" in done.stderr
    assert "wrong-password-123" not in done.stderr
