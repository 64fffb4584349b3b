"""The start path: each command imports only what it needs; the start steps and the publisher
started in the background."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import time

import click
import pytest

from cachesync import prespawn
from cachesync.runtime import startup
from cachesync.cli import COMMANDS, cli
from cachesync.producer_outbox.publish.starting_publisher import StartingPublisher

# what no consume or tail start may load: other engines, docs tools, other commands
NEVER = ("pyspark", "py4j", "sphinx", "matplotlib", "cachesync.consumer.spark.stream",
         "cachesync.devstack", "cachesync.commands.demo", "cachesync.commands.audit",
         "cachesync.commands.snapshot", "cachesync.commands.replay")
NOT_FOR = {"consume": ("pymysqlreplication", "cachesync.producer_outbox.tailer",
                       "cachesync.commands.tail"),
           "tail": ("cachesync.consumer.engine", "cachesync.commands.consume")}


def test_every_listed_command_loads_under_its_name():
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.name == name


def test_every_command_module_is_listed():
    from pathlib import Path
    import cachesync.commands
    folder = Path(cachesync.commands.__file__).parent
    modules = {p.stem for p in folder.glob("*.py")
               if "\ncommand = " in p.read_text() or "\ndef command(" in p.read_text()}
    assert modules == {m.rsplit(".", 1)[1] for m in COMMANDS.values()}


@pytest.mark.parametrize("command", ["consume", "tail"])
def test_the_start_path_imports_only_what_the_command_needs(command):
    """Loading the command and building what its start builds before any I/O: no other
    engine, command or tool is imported."""
    code = (
        "import sys, click\n"
        "from cachesync.cli import cli\n"
        f"cli.get_command(click.Context(cli), {command!r})\n"
        "from cachesync import wiring, operate, doctor, topics\n"
        "print('\\n'.join(sorted(sys.modules)))\n")
    found = set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                               text=True).stdout.split())
    unwanted = [m for m in (*NEVER, *NOT_FOR[command])
                if any(f == m or f.startswith(m + ".") for f in found)]
    assert not unwanted, f"`cachesync {command}` imports {unwanted} at its start"


def test_the_last_step_logs_every_step_since_launch_once(caplog):
    caplog.set_level(logging.INFO, "cachesync.runtime.startup")
    startup.mark("unit-a")
    startup.mark("unit-a")              # the first time counts
    startup.done("unit-done")
    startup.done("unit-done")
    lines = [r.getMessage() for r in caplog.records if "unit-done" in r.getMessage()]
    assert len(lines) == 1 and "unit-a " in lines[0]
    assert re.search(r" [\d.]+ s CPU, [\d.]+ s waiting for a CPU \(", lines[0]), lines[0]
    assert startup.since_launch()["unit-a"] <= startup.since_launch()["unit-done"]


def test_cpu_wait_counts_this_threads_time_in_the_run_queue():
    """The figure grows with the thread's life and never past its wall time."""
    begun = startup.cpu_wait_s()
    assert begun is not None and begun >= 0
    threads = [threading.Thread(target=lambda: sum(range(200_000))) for _ in range(4)]
    for t in threads:
        t.start()
    sum(range(200_000))
    for t in threads:
        t.join()
    assert begun <= startup.cpu_wait_s() <= time.time() - startup.launched_at()


class _Publisher:
    def __init__(self):
        self.sent, self.closed = [], False

    def send(self, *args, **kwargs):
        self.sent.append(args)

    def partitions(self, topic):
        return [0, 1, 2]

    def flush(self, timeout_s=None):
        pass

    def close(self, timeout_s=10):
        self.closed = True


def test_a_starting_publisher_waits_for_its_start_then_delegates():
    release, real = threading.Event(), _Publisher()

    def start():
        release.wait(5)
        return real
    publisher = StartingPublisher(start)
    assert "starting" in repr(publisher)
    release.set()
    assert publisher.partitions("t") == [0, 1, 2]
    publisher.send("t", "k", b"v", "id", None, None)
    publisher.flush()
    publisher.close()
    assert real.sent == [("t", "k", b"v", "id", None, None)] and real.closed


def test_a_starting_publisher_passes_serve_acks_on_once_started():
    """The tailer's reader asks its publisher to serve acknowledgements before each wait:
    nothing to do before the start ended (nothing was sent), the started publisher's own
    ``serve_acks`` after, and nothing for a publisher that serves them itself."""
    release, served = threading.Event(), []

    class Serving(_Publisher):
        def serve_acks(self, alone=False):
            served.append(alone)

    def start():
        release.wait(5)
        return Serving()
    publisher = StartingPublisher(start)
    publisher.serve_acks(True)              # still starting: returns at once
    release.set()
    publisher.started()
    publisher.serve_acks(True)
    publisher.serve_acks()
    assert served == [True, False]
    plain = StartingPublisher(_Publisher)
    plain.started()
    plain.serve_acks(True)                  # a publisher without it: nothing to do


def test_a_bounded_call_does_not_wait_for_a_start_stuck_on_an_unreachable_kafka(monkeypatch):
    """The tailer's outage limit bounds its partition request: a publisher whose start still
    waits for Kafka (its bootstrap gives up only after 10 s) makes it raise RetryableError
    after the limit and START_SLACK_S, so the tailer can apply changes directly at once."""
    from cachesync.producer_outbox.publish import starting_publisher
    from cachesync.schema.errors import RetryableError
    monkeypatch.setattr(starting_publisher, "START_SLACK_S", 0.05)
    stuck, asked = threading.Event(), []

    class Answering:
        send = flush = None

        def partitions(self, topic, timeout_s=None):
            asked.append((topic, timeout_s))
            return [0]

    def start():
        stuck.wait(10)
        return Answering()
    publisher = StartingPublisher(start)
    began = time.monotonic()
    with pytest.raises(RetryableError, match=r"not started within 0\.15s"):
        publisher.partitions("t", timeout_s=0.1)
    assert time.monotonic() - began < 5
    stuck.set()
    assert publisher.partitions("t", timeout_s=0.1) == [0] and asked == [("t", 0.1)]


def test_a_starting_publisher_raises_what_its_start_raised_at_first_use():
    from cachesync.schema.errors import RetryableError

    def start():
        raise RetryableError("Kafka unavailable at x:9092")
    publisher = StartingPublisher(start)
    with pytest.raises(RetryableError, match="Kafka unavailable"):
        publisher.send("t", "k", b"v", "id", None, None)
    with pytest.raises(RetryableError):
        publisher.flush()
    publisher.close()                   # nothing started: nothing to close


def test_connections_without_tls_options_share_one_tls_context():
    """pymysql's PREFERRED mode (no TLS option) gets one context per process; a connection
    with TLS options builds its own, verifying as configured."""
    import ssl
    from cachesync.runtime.mysql import _Connection
    conn = _Connection.__new__(_Connection)        # no server: only the context is built
    first, second = conn.ssl_context({}), conn.ssl_context({})
    assert first is second and first.verify_mode == ssl.CERT_NONE
    verified = conn.ssl_context({"ca": ssl.get_default_verify_paths().cafile,
                                     "check_hostname": True, "verify_mode": True})
    assert verified is not first and verified.verify_mode == ssl.CERT_REQUIRED


# -- children started with the command (cachesync.prespawn) ---------------------------------
def test_tail_starts_its_publisher_process_with_the_command_line(monkeypatch):
    started = []
    monkeypatch.setattr(prespawn, "start",
                        lambda name, module, env: started.append((name, module, env)))
    process = {"CACHESYNC_TAILER_PUBLISHER": "process"}
    prespawn.for_command(["cachesync", "tail", "--config", "x.yaml"], process)
    for argv in (["cachesync", "consume"], ["cachesync", "tail", "--help"], ["cachesync"],
                 ["cachesync", "run", "tail"]):
        prespawn.for_command(argv, process)
    prespawn.for_command(["cachesync", "tail"], {"CACHESYNC_TAILER_PUBLISHER": "thread"})
    from cachesync.producer_outbox.publish import process_publisher as procpublisher
    assert started == [("publisher", procpublisher.__name__, process)]


@pytest.mark.parametrize("environ, likely", [
    ({}, False),                                           # auto, confluent-kafka installed
    ({"CACHESYNC_KAFKA_CLIENT": "kafka-python"}, True),
    ({"CACHESYNC_NO_SPEEDUPS": "1"}, True),
    ({"CACHESYNC_TAILER_PUBLISHER": "process", "CACHESYNC_KAFKA_CLIENT": "librdkafka"}, True),
    ({"CACHESYNC_TAILER_PUBLISHER": "thread", "CACHESYNC_KAFKA_CLIENT": "kafka-python"}, False),
])
def test_the_publisher_process_is_started_early_where_tail_will_likely_use_one(environ, likely):
    pytest.importorskip("confluent_kafka")
    assert prespawn.publisher_process_likely(environ) is likely


@pytest.mark.parametrize("publisher, client, placement", [
    ("auto", "auto", "thread"), ("auto", "librdkafka", "thread"),
    ("auto", "kafka-python", "process"), ("process", "auto", "process"),
    ("thread", "kafka-python", "thread"),
])
def test_auto_publishes_from_a_thread_on_librdkafka_and_from_a_process_on_kafka_python(
        publisher, client, placement):
    pytest.importorskip("confluent_kafka")
    from cachesync.wiring import publisher_placement
    assert publisher_placement(publisher, client, {}) == placement


def test_an_early_child_is_taken_once_while_the_environment_is_the_one_it_got(monkeypatch):
    monkeypatch.delenv("CACHESYNC_UNIT_EARLY", raising=False)
    prespawn.start("unit", "base64")           # encodes its input until it ends
    child = prespawn.take("unit")
    try:
        assert child is not None and child.poll() is None
        assert prespawn.take("unit") is None
    finally:
        prespawn.discard(child)
    assert child.returncode == 0               # its input ended: it exited by itself


def test_an_early_child_started_before_the_environment_changed_is_ended(monkeypatch):
    monkeypatch.delenv("CACHESYNC_UNIT_EARLY", raising=False)
    prespawn.start("unit", "base64")
    (child, _), = [prespawn._early["unit"]]
    monkeypatch.setenv("CACHESYNC_UNIT_EARLY", "set by --env-file")
    assert prespawn.take("unit") is None
    assert child.poll() is not None            # ended, not left behind


def test_an_early_child_gets_the_environment_the_env_file_will_give_the_command(
        monkeypatch, tmp_path):
    from cachesync.runtime.env_file import with_env_file
    env_file = tmp_path / "env"
    env_file.write_text("CACHESYNC_UNIT_EARLY=from the file\nCACHESYNC_UNIT_SET=from the file\n")
    monkeypatch.delenv("CACHESYNC_UNIT_EARLY", raising=False)
    monkeypatch.delenv("CACHESYNC_ENV_FILE", raising=False)
    monkeypatch.setenv("CACHESYNC_UNIT_SET", "set before")
    for argv in (["cachesync", "tail", "--env-file", str(env_file)],
                 ["cachesync", "tail", f"--env-file={env_file}"]):
        env = prespawn.command_environ(argv, os.environ)
        assert env["CACHESYNC_UNIT_EARLY"] == "from the file"
        assert env["CACHESYNC_UNIT_SET"] == "set before"       # what is set wins, as in the command
    monkeypatch.setenv("CACHESYNC_ENV_FILE", str(env_file))
    assert prespawn.command_environ(["cachesync", "tail"], os.environ)["CACHESYNC_UNIT_EARLY"] \
        == "from the file"
    assert prespawn.command_environ(["cachesync", "tail"], {"CACHESYNC_ENV_FILE": "/absent"}) is None

    prespawn.start("unit", "base64", prespawn.command_environ(["cachesync", "tail"], os.environ))
    with_env_file(os.environ, env_file)         # what the command's --env-file does
    child = None
    try:
        child = prespawn.take("unit")
        assert child is not None and child.poll() is None       # same environment: adopted
    finally:
        os.environ.pop("CACHESYNC_UNIT_EARLY", None)
        if child is not None:
            prespawn.discard(child)


@pytest.mark.parametrize("settings, linger", [
    ({}, {"linger_ms": 0}),                       # packs span transactions: no second wait
    ({"pack_rows": 1}, {}),                        # a record per row: the client's linger
    ({"reader": "library"}, {}),                   # packs of one transaction: likewise
])
def test_the_tailers_publisher_lingers_only_where_packs_do_not(settings, linger):
    from cachesync.runtime.config import TailerSettings
    from cachesync.wiring import publisher_tunables
    assert publisher_tunables(TailerSettings(**settings)) == linger
