"""The pipeline over SASL_SSL Kafka (the devstack's kafka-sasl variant): tail -> Kafka
(SCRAM-SHA-512 over TLS, the CA checked) -> consume -> Redis, the password read through
CACHESYNC_KAFKA_SASL_PASSWORD_FILE; a wrong password stops the process with exit 3."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys
import threading
import time

import pytest

from cachesync.runtime import config
from cachesync.commands.replay import run_replay
from cachesync.consumer.replay import parse_bound
from cachesync.runtime.kafka_security import client_security
from cachesync.producer_outbox.binlog.heartbeat import with_heartbeat
from cachesync.producer_outbox.publish.kafka_publisher import KafkaPublisher
from cachesync.producer_outbox.decode.rows import TxnContext, row_change
from cachesync.schema.event import encode
from cachesync.schema.keys import kafka_key
from cachesync.wiring import build_engine
from tests.support.variants import unsecured_jwt, use_kafka_oauth, use_kafka_sasl
from cachesync.producer_outbox.outbox import emit
from tests.support import (add_config_sections, prepare_outbox, spawn, status_json,
                           wait_for)

pytestmark = pytest.mark.integration

USERS = {"users": {"keys": ["user:{id}"]}}


@pytest.fixture
def sasl(lab):
    """(config, environment) of the lab pointed at the SASL_SSL broker, topics created there."""
    cfg = lab.write_config(USERS)
    return cfg, use_kafka_sasl(lab, cfg)


def _settings(lab, cfg, overrides):
    return config.load(cfg, {**os.environ, **lab.stack.env, **overrides})


def test_pipeline_over_sasl_ssl_invalidates_and_never_logs_the_password(lab, sasl):
    cfg, overrides = sasl
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(50) NOT NULL)")
    before = lab.checkpoint_updated_at()
    tailer = spawn(lab, cfg, "tail", env=overrides)
    wait_for(lambda: lab._alive(tailer) and lab.checkpoint_updated_at() != before, 60,
             what="the tailer's start checkpoint")
    engine = build_engine(_settings(lab, cfg, overrides))
    thread = threading.Thread(target=engine.run, daemon=True)
    thread.start()
    lab._threads.append((thread, engine))     # lab.close() stops it if the test fails
    lab.cache("user:1", "user:2")
    lab.sql("INSERT INTO users VALUES (1, 'Ada')")
    wait_for(lambda: not lab.cached("user:1"), 60, what="invalidation through SASL_SSL Kafka")
    assert lab.cached("user:2") == ["user:2"]
    assert lab.topic_records() == []   # the plain broker's copy of the topic saw nothing
    password = pathlib.Path(overrides["CACHESYNC_KAFKA_SASL_PASSWORD_FILE"]).read_text().strip()
    assert password and password not in lab.log(tailer)

    # the admin client (status, probes) and the dlq tools take the same settings
    code, report = status_json(lab, cfg, overrides)
    assert code == 0 and report["errors"] == {}, report["errors"]
    assert report["kafka"]["topic"] == lab.topic and report["dead_letters"] is not None
    listed = subprocess.run([sys.executable, "-m", "cachesync", "dlq", "list", "--config", cfg],
                            env={**os.environ, **lab.stack.env, **overrides},
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and f"no dead letters in {lab.dlq}" in listed.stdout, listed.stderr


def test_wrong_password_stops_consume_with_a_clear_error_and_exit_3(lab, sasl, tmp_path):
    cfg, overrides = sasl
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password\n")
    out = subprocess.run([sys.executable, "-m", "cachesync", "consume", "--config", cfg],
                         env={**os.environ, **lab.stack.env, **overrides,
                              "CACHESYNC_KAFKA_SASL_PASSWORD_FILE": str(wrong)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 3, out.stderr[-3000:]
    assert "cachesync: Kafka at" in out.stderr and "refused the login" in out.stderr
    assert "not-the-password" not in out.stderr + out.stdout


@pytest.mark.parametrize("client", ["kafka-python", "librdkafka"])
def test_wrong_password_stops_tail_with_a_clear_error_and_exit_3(lab, sasl, tmp_path, client):
    """The tailer's publisher on either Kafka client (kafka.client) refuses to retry a refused
    login, like the consumer."""
    cfg, overrides = sasl
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(50) NOT NULL)")
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password\n")
    tail = subprocess.Popen([sys.executable, "-m", "cachesync", "tail", "--config", cfg],
                            env={**os.environ, **lab.stack.env, **overrides,
                                 "CACHESYNC_KAFKA_SASL_PASSWORD_FILE": str(wrong),
                                 "CACHESYNC_KAFKA_CLIENT": client},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rows = iter(range(1, 10**6))

    def ended() -> bool:      # a row to publish: the tailer's first send needs the publisher
        lab.sql("INSERT INTO users VALUES (%s, 'a')", (next(rows),))
        return tail.poll() is not None
    try:
        wait_for(ended, 180, interval=0.5, what="tail to stop")
    finally:
        if tail.poll() is None:
            tail.kill()
        stdout, stderr = tail.communicate(timeout=60)
    assert tail.returncode == 3, stderr[-3000:]
    assert f"Kafka publisher on {client}" in stderr
    assert "cachesync: Kafka at" in stderr and "refused the login" in stderr
    assert "not-the-password" not in stderr + stdout


def test_both_replay_engines_read_the_topic_over_sasl_ssl(lab, sasl):
    """Spark reaches the broker with the PEM CA as truststore and a SCRAM JAAS line."""
    from cachesync.consumer.spark.session import spark_session
    cfg, overrides = sasl
    settings = _settings(lab, cfg, overrides)
    publisher = KafkaPublisher(settings.kafka.bootstrap_servers,
                               security=client_security(settings.kafka))
    acked = threading.Event()
    ctx = TxnContext("mariadb:sasl", "0-1-1", 1, time.time())
    event = row_change(ctx, 0, lab.db, "users", "insert", "id", None, {"id": 5, "name": "Eve"})
    publisher.send(settings.kafka.topic, kafka_key(lab.db, "users", event.pk), encode(event),
                   event.id, acked.set, lambda e: None)
    wait_for(acked.is_set, 60, what="the event acknowledged over SASL_SSL")
    publisher.close()
    everything = (parse_bound("earliest"), parse_bound("latest"))
    mappings = with_heartbeat(settings.tables, settings.mysql.state_db)
    for engine in ("python", "spark"):
        lab.cache("user:5")
        with spark_session("cachesync-sasl-test", "local[1]") as spark:
            report = run_replay(settings, mappings, engine, *everything, spark=spark,
                                show_progress=False)
        assert (report.records, report.keys_existed, lab.cached("user:5")) == (1, 1, []), engine


def test_relay_publishes_over_sasl_ssl_and_never_logs_the_password(lab, sasl):
    """Issue 15's untested path: `cachesync relay` is a Kafka producer too."""
    _, overrides = sasl
    prepare_outbox(lab)
    cfg = add_config_sections(lab.write_config({**USERS, "board": {"explicit_keys": ["board:{n}"]}}),
                              relay={"outbox_db": lab.db, "poll_interval_s": 0.05})
    relay = spawn(lab, cfg, "relay", env=overrides)
    engine = build_engine(_settings(lab, cfg, overrides))
    thread = threading.Thread(target=engine.run, daemon=True)
    thread.start()
    lab._threads.append((thread, engine))
    lab.cache("board:1", "board:2")
    with lab.stack.admin(lab.db, autocommit=False) as conn:
        emit(conn, "board", 1, "bumped", {"n": 1}, keys=[lab.prefix + "board:1"])
        conn.commit()
    wait_for(lambda: lab._alive(relay) and not lab.cached("board:1"), 60,
             what="the outbox event relayed and applied through SASL_SSL Kafka")
    # The relay marks the row published once the broker acknowledges it, which may come
    # after the consumer has already applied the event.
    wait_for(lambda: lab.sql("SELECT COUNT(*) FROM cachesync_outbox "
                             "WHERE published_at IS NULL")[0][0] == 0, 60,
             what="the relay marking the outbox row published")
    assert lab.cached("board:2") == ["board:2"]
    assert lab.topic_records() == []   # the plain broker's copy of the topic saw nothing
    password = pathlib.Path(overrides["CACHESYNC_KAFKA_SASL_PASSWORD_FILE"]).read_text().strip()
    assert password and password not in lab.log(relay)


def test_spark_stream_consumes_and_dead_letters_over_sasl_ssl(lab, sasl, tmp_path):
    """Issue 15's untested path: the Spark stream engine's Kafka source, and its workers'
    dead-letter producer, over SASL_SSL. One small run: a row event and an outbox event whose
    explicit key no allow-list permits (dead-lettered, key_not_allowed)."""
    from cachesync.commands.consume_spark import build_spark_engine
    from cachesync.consumer.spark.session import spark_session
    cfg, overrides = sasl
    settings = _settings(lab, cfg, overrides)
    k, security = settings.kafka, client_security(settings.kafka)
    publisher = KafkaPublisher(k.bootstrap_servers, security=security)
    ctx = TxnContext("mariadb:sasl", "0-1-2", 1, time.time())
    row = row_change(ctx, 0, lab.db, "users", "insert", "id", None, {"id": 6, "name": "Fay"})
    refused = dataclasses.replace(row, id=f"refused-{lab.suffix}", table="board",
                                  keys=(f"{lab.prefix}session:1",))
    acks = []
    for event in (row, refused):
        publisher.send(k.topic, kafka_key(lab.db, event.table, event.pk), encode(event),
                       event.id, lambda: acks.append(1), lambda e: None)
    wait_for(lambda: len(acks) == 2, 60, what="both events acknowledged over SASL_SSL")
    publisher.close()
    lab.cache("user:6", "session:1")
    with spark_session("cachesync-sasl-stream", "local[1]") as spark:
        engine = build_spark_engine(settings, spark, str(tmp_path / "checkpoint"))
        thread = threading.Thread(target=engine.run, daemon=True)
        thread.start()
        try:
            wait_for(lambda: engine.stats.consumed >= 2 or not thread.is_alive(), 180,
                     what="the Spark stream to consume both events over SASL_SSL")
        finally:
            engine.stop()
            thread.join(60)
    assert (engine.stats.applied, engine.stats.dead_lettered) == (1, 1)
    assert lab.cached("user:6", "session:1") == ["session:1"]
    dead = lab.topic_records(k.dead_letter_topic, bootstrap=k.bootstrap_servers, **security)
    assert [dict(r.headers)["reason"] for r in dead] == [b"key_not_allowed"]
    assert lab.topic_records(lab.dlq) == []          # nothing went to the plain broker


# --- OAUTHBEARER (the kafka-oauth variant: unsecured JWS validator, scope `cachesync`) ------

TOKEN_LIFETIME_S = 12     # short, so the test outlives the first tokens: a refresh must happen


class TokenRenewer(threading.Thread):
    """What a token sidecar does: writes a fresh token into the file every few seconds
    (write to a temporary file, then rename, so a reader never sees half a token)."""

    def __init__(self, path: pathlib.Path):
        super().__init__(daemon=True)
        self.path, self.written, self._stop_event = path, [], threading.Event()
        self.renew()

    def renew(self) -> None:
        token = unsecured_jwt(TOKEN_LIFETIME_S)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(token + "\n")
        tmp.replace(self.path)
        self.written.append(token)

    def run(self) -> None:
        while not self._stop_event.wait(3):
            self.renew()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(10)


TOKEN_COMMAND = """\
import base64, json, os, sys, time
def part(d): return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()
now = int(time.time())
with open(sys.argv[1], "a") as runs: runs.write(f"{os.getpid()} {os.getppid()} {now}\\n")
print(part({"alg": "none"}) + "." + part({"sub": "cachesync", "scope": "cachesync",
      "iat": now, "exp": now + int(sys.argv[2])}) + ".")
"""


def test_oauthbearer_pipeline_keeps_invalidating_after_its_first_tokens_expire(lab, tmp_path):
    """tail gets its tokens from a command, consume from a file a sidecar renews; both live
    12 s and the broker ends every login session when its token expires (KIP-368), so a
    change written after the first tokens expired is only applied if both refreshed."""
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(50) NOT NULL)")
    cfg = lab.write_config(USERS)
    token_file, runs = tmp_path / "kafka.token", tmp_path / "command-runs"
    renewer = TokenRenewer(token_file)
    renewer.start()
    script = tmp_path / "token.py"
    script.write_text(TOKEN_COMMAND)
    command = f"{sys.executable} {script} {runs} {TOKEN_LIFETIME_S}"
    overrides = use_kafka_oauth(lab, cfg, file=str(token_file))
    tail_env = {**{k: v for k, v in overrides.items() if not k.endswith("TOKEN_FILE")},
                "CACHESYNC_KAFKA_SASL_OAUTH_TOKEN_COMMAND": command}
    try:
        before = lab.checkpoint_updated_at()
        tailer = spawn(lab, cfg, "tail", env=tail_env)
        wait_for(lambda: lab._alive(tailer) and lab.checkpoint_updated_at() != before, 60,
                 what="the tailer's start checkpoint")
        engine = build_engine(_settings(lab, cfg, overrides))
        thread = threading.Thread(target=engine.run, daemon=True)
        thread.start()
        lab._threads.append((thread, engine))
        lab.cache("user:1", "user:2", "user:3")
        lab.sql("INSERT INTO users VALUES (1, 'Ada')")
        wait_for(lambda: not lab.cached("user:1"), 60, what="invalidation through OAUTHBEARER")
        started = time.time()
        first_expiry = started + TOKEN_LIFETIME_S + 2
        wait_for(lambda: time.time() > first_expiry, TOKEN_LIFETIME_S + 5, interval=0.5,
                 what="the first tokens to expire")
        lab.sql("INSERT INTO users VALUES (2, 'Bob')")
        wait_for(lambda: lab._alive(tailer) and not lab.cached("user:2"), 60,
                 what="invalidation after the first tokens expired")
    finally:
        renewer.stop()
    assert lab.cached("user:3") == ["user:3"]
    assert lab.topic_records() == []      # the plain broker's copy of the topic saw nothing
    by_process: dict[str, int] = {}
    for line in runs.read_text().splitlines():
        by_process[line.split()[1]] = by_process.get(line.split()[1], 0) + 1
    assert max(by_process.values()) >= 2, f"no process ran the command again: {by_process}"
    logged = lab.log(tailer)
    assert not any(token.split(".")[1] in logged for token in renewer.written)
    assert "eyJ" not in logged            # no token of the command either (base64 of '{"')


def test_refused_token_and_failing_command_stop_consume_with_clear_errors(lab, tmp_path):
    """A token without the scope the broker requires: exit 3 naming the refusal; a token
    command that fails: exit 2 naming the command and its stderr; neither token printed."""
    cfg = lab.write_config(USERS)
    wrong = tmp_path / "wrong.token"
    token = unsecured_jwt(600, scope="other")
    wrong.write_text(token)
    overrides = use_kafka_oauth(lab, cfg, file=str(wrong))
    # the bootstrap gives up after 8 s instead of kafka-python's 30 (the refusal is the same)
    quick = {"CACHESYNC_KAFKA_CONSUMER_PROPERTIES": '{"bootstrap_timeout_ms": 8000}'}
    out = subprocess.run([sys.executable, "-m", "cachesync", "consume", "--config", cfg],
                         env={**os.environ, **lab.stack.env, **overrides, **quick},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 3, out.stderr[-3000:]
    assert "cachesync: Kafka at" in out.stderr and "refused the OAuth token" in out.stderr
    assert token.split(".")[1] not in out.stderr + out.stdout

    failing = {k: v for k, v in overrides.items() if not k.endswith("TOKEN_FILE")}
    failing["CACHESYNC_KAFKA_SASL_OAUTH_TOKEN_COMMAND"] = "sh -c 'echo no session >&2; exit 4'"
    out = subprocess.run([sys.executable, "-m", "cachesync", "consume", "--config", cfg],
                         env={**os.environ, **lab.stack.env, **failing},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-3000:]
    assert ("cachesync: configuration error: kafka.sasl_oauth_token_command: sh exited with "
            "status 4: no session"
            in out.stderr), out.stderr[-3000:]
