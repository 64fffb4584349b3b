"""A secret set through the environment never shows in ``repr`` or in the logs."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import threading

from cachesync import config, logs
from cachesync.wiring import mysql_params
from cachesync.producer_outbox.heartbeat import HeartbeatWriter

PASSWORD = "s3cr3t-Pw-4f9a"
REDIS_PASSWORD = "r3dis-Pw-77c1"
ENV = {"CACHESYNC_MYSQL_PASSWORD": PASSWORD, "CACHESYNC_MYSQL_PORT": "1",
       "CACHESYNC_REDIS_URL": f"redis://:{REDIS_PASSWORD}@127.0.0.1:1/0",
       "CACHESYNC_RELAY_OUTBOX_DB": "app"}


def write_config(tmp_path) -> str:
    path = tmp_path / "c.yaml"
    path.write_text("tables:\n  app.users: {keys: ['user:{id}']}\n")
    return str(path)


def test_settings_repr_masks_env_secrets(tmp_path):
    s = config.load(write_config(tmp_path), ENV)
    assert str(s.mysql.password) == PASSWORD                      # the value is there ...
    for text in (repr(s), str(s), repr(s.mysql), repr(s.redis), repr(mysql_params(s))):
        assert PASSWORD not in text and REDIS_PASSWORD not in text  # ... but never shown


def test_json_logs_of_failing_connections_hold_no_secret(tmp_path):
    """In-process: the heartbeat writer's failure line, at DEBUG, in JSON."""
    stream = io.StringIO()
    logs.setup("DEBUG", json_format=True)
    logging.getLogger().handlers[0].setStream(stream)
    try:
        s = config.load(write_config(tmp_path), ENV)
        writer, stop = HeartbeatWriter(mysql_params(s).connect, "t", 0.01), threading.Event()
        writer._session.run = _stop_after_one_failure(writer._session.run, stop)
        writer.run(stop)
    finally:
        logs.setup("INFO")
    out = stream.getvalue()
    assert '"level": "warning"' in out and "heartbeat write failed" in out
    assert PASSWORD not in out and REDIS_PASSWORD not in out


def _stop_after_one_failure(run, stop):
    def wrapped(work):
        try:
            return run(work)
        finally:
            stop.set()
    return wrapped


def test_a_command_failing_on_unreachable_servers_logs_no_secret(tmp_path):
    """A child process: `relay --purge-only` against a MySQL that is not there."""
    out = subprocess.run([sys.executable, "-m", "cachesync", "relay", "--purge-only", "--log-json",
                          "--log-level", "DEBUG", "--config", write_config(tmp_path)],
                         env={**os.environ, **ENV}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert "MySQL unavailable" in out.stderr
    assert PASSWORD not in out.stdout + out.stderr
    assert REDIS_PASSWORD not in out.stdout + out.stderr
