"""A secret set through the environment never shows in ``repr`` or in the logs."""

from __future__ import annotations

import dataclasses
import importlib
import io
import logging
import os
import pkgutil
import re
import subprocess
import sys
import threading

from cachesync.runtime import config, logs
from cachesync.runtime.kafka_security import spark_kafka_options
from cachesync.wiring import mysql_params
from cachesync.producer_outbox.binlog.heartbeat import HeartbeatWriter

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


# -- issue 15: every config dataclass, found by walking the packages -----------------------
SECRET = "Wa1k-s3cr3t-9d2e"
_SECRET_FIELD = re.compile(r"password|secret|jaas|url|dsn|credential", re.I)
_PACKAGES = ("cachesync", "cachesync.consumer", "cachesync.schema", "cachesync.producer_outbox")


def _dataclasses_holding_secrets():
    """Every dataclass of the installed packages with a secret-shaped field or a Settings."""
    found = {}
    for package in map(importlib.import_module, _PACKAGES):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            for obj in vars(module).values():
                if (isinstance(obj, type) and dataclasses.is_dataclass(obj)
                        and obj.__module__ == info.name and _holds_secrets(obj)):
                    found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


# fields holding the loaded Settings (or the adapters' factory over it), or one of its
# sections that holds a secret
_HOLDERS = ("settings", "adapters", "mysql", "kafka", "redis")


def _holds_secrets(cls) -> bool:
    return any(_SECRET_FIELD.search(f.name) or f.name in _HOLDERS
               for f in dataclasses.fields(cls))


def _secret_value(name: str, settings):
    if name == "settings":
        return settings
    if name == "adapters":
        from cachesync.wiring import SettingsAdapters
        return SettingsAdapters(settings)
    if name in _HOLDERS:
        return getattr(settings, name)
    if "url" in name.lower():
        return f"jdbc:mysql://user:{SECRET}@h:1/db?password={SECRET}&trustStorePassword={SECRET}"
    return SECRET


def _instance(cls, settings):
    """``cls`` with every secret-shaped field holding SECRET (built without validation, so
    a value its own checks would refuse is shown too) and the other fields their defaults."""
    obj = object.__new__(cls)
    for f in dataclasses.fields(cls):
        if _SECRET_FIELD.search(f.name) or f.name in _HOLDERS:
            value = _secret_value(f.name, settings)
        elif f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            value = None
        object.__setattr__(obj, f.name, value)
    return obj


def test_every_config_dataclass_masks_its_secrets(tmp_path, caplog):
    env = {**ENV, "CACHESYNC_MYSQL_PASSWORD": SECRET,
           "CACHESYNC_REDIS_URL": f"rediss://cachesync:{SECRET}@h:1/0?password={SECRET}",
           "CACHESYNC_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
           "CACHESYNC_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
           "CACHESYNC_KAFKA_SASL_USERNAME": "u", "CACHESYNC_KAFKA_SASL_PASSWORD": SECRET}
    settings = config.load(write_config(tmp_path), env)
    classes = _dataclasses_holding_secrets()
    # the walk finds the known holders (a rename must not make this test vacuous)
    assert {"cachesync.runtime.config.MySQLSettings", "cachesync.runtime.config.KafkaSettings",
            "cachesync.runtime.config.RedisSettings", "cachesync.runtime.config.Settings",
            "cachesync.consumer.spark.applier.ApplyConfig",
            "cachesync.consumer.spark.applier.AuditConfig",
            "cachesync.consumer.spark.audit.TableSource", "cachesync.wiring.SettingsAdapters",
            "cachesync.runtime.mysql.MySQLParams"} <= set(classes)
    with caplog.at_level(logging.DEBUG, logger="test.secrets"):
        for name, cls in classes.items():
            obj = _instance(cls, settings)
            logging.getLogger("test.secrets").debug("%s %r", obj, obj)
            for text in (repr(obj), str(obj), f"{obj}"):
                assert SECRET not in text, f"{name} shows a secret: {text}"
    assert SECRET not in caplog.text and caplog.records


def test_spark_kafka_options_mask_the_jaas_password(tmp_path):
    env = {**ENV, "CACHESYNC_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
           "CACHESYNC_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
           "CACHESYNC_KAFKA_SASL_USERNAME": "u", "CACHESYNC_KAFKA_SASL_PASSWORD": SECRET}
    options = spark_kafka_options(config.load(write_config(tmp_path), env).kafka)
    assert SECRET in options["kafka.sasl.jaas.config"]       # the JVM gets the password ...
    assert SECRET not in repr(options) and SECRET not in str(options)   # ... logs do not
