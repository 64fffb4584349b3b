"""Changes the binlog does not carry, named on the devstack: accounts that may SET
sql_log_bin=0 (doctor, lint, the tailer's start), application-time period keys (lint)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import wait_for

pytestmark = pytest.mark.integration


def cli(lab, command: str, cfg: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cachesync", command, "-c", cfg],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **lab.stack.env})


def test_accounts_that_may_turn_binary_logging_off_are_named(lab):
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY)")
    cfg = lab.write_config({"users": {"keys": ["user:{id}"]}})
    quiet = cli(lab, "doctor", cfg)
    assert "PASS unlogged-changes" in quiet.stdout, quiet.stdout    # sees only its own grants
    with lab.stack.admin() as conn, conn.cursor() as cur:   # now it may read every account's
        cur.execute("GRANT SELECT ON mysql.* TO cachesync@'127.0.0.1'")
    try:
        doctor = cli(lab, "doctor", cfg)
        assert "WARN unlogged-changes" in doctor.stdout and "'devadmin'@" in doctor.stdout, \
            doctor.stdout
        lint = cli(lab, "lint", cfg)
        assert "[unlogged-changes] sql_log_bin:" in lint.stdout and lint.returncode == 4
        tailer = lab.start_tailer(cfg)
        wait_for(lambda: "may SET sql_log_bin=0" in lab.log(tailer), 60,
                 what="the tailer's WARNING")
        assert "WARNING" in next(line for line in lab.log(tailer).splitlines()
                                 if "may SET sql_log_bin=0" in line)
    finally:
        with lab.stack.admin() as conn, conn.cursor() as cur:
            cur.execute("REVOKE SELECT ON mysql.* FROM cachesync@'127.0.0.1'")


def test_lint_refuses_update_mode_on_a_period_key_without_the_period(lab):
    lab.sql("CREATE TABLE prices (id INT, s DATE, e DATE, amount INT, PERIOD FOR p(s, e), "
            "PRIMARY KEY (id, p WITHOUT OVERLAPS))")
    bare = cli(lab, "lint", lab.write_config({"prices": {"keys": ["price:{id}"], "mode": "update"}}))
    assert "[period-key]" in bare.stdout and "FOR PORTION OF p" in bare.stdout, bare.stdout
    assert bare.returncode == 4
    keyed = cli(lab, "lint", lab.write_config(
        {"prices": {"keys": ["price:{id}:{s}"], "mode": "update"}}, name="keyed.yaml"))
    deleting = cli(lab, "lint", lab.write_config(
        {"prices": {"keys": ["price:{id}"]}}, name="delete.yaml"))
    assert "[period-key]" not in keyed.stdout + deleting.stdout
