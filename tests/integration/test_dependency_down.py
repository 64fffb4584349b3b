"""Every command with each dependency down: a `cachesync:` line (JSON under --log-json) and an
exit code, never a traceback; a long-running command waits, logging, and stops cleanly.

All runs start at once (a one-shot command waits out its Kafka client's bootstrap timeout,
10 s, when Kafka is down), then each is checked; on a loaded 2-core host the 20 interpreters take
a while to start, hence the generous wait for a daemon's first complaint.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tests.support import wait_for

ROOT = Path(__file__).resolve().parents[2]

USERS = {"users": {"keys": ["user:{id}"]}}
ONE_SHOT = (("replay", "--dry-run"), ("dlq", "list"), ("status",), ("dedup", "purge"),
            ("relay", "--purge-only"))
# long-running commands and the dependencies they use (tail and relay never touch Redis)
DAEMONS = {("consume",): ("kafka", "mysql", "redis"), ("tail",): ("kafka", "mysql"),
           ("relay",): ("kafka", "mysql")}
DEPENDENCIES = ("kafka", "mysql", "redis")
EXIT_CODES = {0, 1, 2, 3}


def _closed_port() -> socket.socket:
    """A port bound and never listened on: connections are refused, and no other process
    (a metrics server on port 0) can take it while the test runs."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s


def _down(dependency: str, port: int) -> dict[str, str]:
    return {"kafka": {"CACHESYNC_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}"},
            "mysql": {"CACHESYNC_MYSQL_PORT": str(port)},
            "redis": {"CACHESYNC_REDIS_URL": f"redis://127.0.0.1:{port}/0"}}[dependency]


class Run:
    def __init__(self, lab, cfg, args, dependency, port):
        self.args, self.dependency = args, dependency
        self.err_path = lab.tmp / f"{'-'.join(args)}-{dependency}.err"
        env = {**os.environ, **lab.stack.env, **_down(dependency, port),
               "CACHESYNC_RELAY_OUTBOX_DB": lab.db, "CACHESYNC_CONSUMER_DEDUP_STORE": "mysql"}
        with open(self.err_path, "w") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "cachesync", *args, "--log-json",
                                          "--config", cfg], env=env, stdout=subprocess.DEVNULL,
                                         stderr=err, stdin=subprocess.DEVNULL)

    def lines(self) -> list[dict]:
        running = self.proc.poll() is None
        text = self.err_path.read_text()
        if running:                         # a line still being written is not read yet
            text = text[:text.rfind("\n") + 1]
        assert "Traceback" not in text, f"{self}: a traceback:\n{text}"
        out = []
        for line in text.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                raise AssertionError(f"{self}: not a JSON line: {line!r}") from None
        return out

    def complained(self) -> bool:
        """A warning or worse about the dependency that is down."""
        return any(l["level"] in ("warning", "error", "critical")
                   and (self.dependency in l["msg"].lower() or l["logger"].startswith(self.dependency))
                   for l in self.lines())

    def exiting(self) -> bool:
        lines = self.lines()
        return bool(lines) and lines[-1]["level"] == "critical"

    def __str__(self) -> str:
        return f"cachesync {' '.join(self.args)} with {self.dependency} down"


def test_every_command_with_each_dependency_down_ends_in_a_message_never_a_traceback(lab):
    lab.sql("CREATE TABLE users (id INT PRIMARY KEY, name VARCHAR(50))")
    lab.sql((ROOT / "schema" / "sql" / "outbox.sql").read_text(), None)   # its comments hold %
    # the relay's grants, so that it waits for the dependency instead of stopping on them
    lab.sql(f"GRANT SELECT, UPDATE, DELETE ON {lab.db}.cachesync_outbox TO cachesync@'127.0.0.1'")
    cfg = lab.write_config(USERS)
    closed = _closed_port()
    port = closed.getsockname()[1]
    one_shot = [Run(lab, cfg, a, d, port) for a in ONE_SHOT for d in DEPENDENCIES]
    daemons = [Run(lab, cfg, a, d, port) for a, deps in DAEMONS.items() for d in deps]
    try:
        for run in daemons:
            try:
                wait_for(lambda: run.proc.poll() is not None or run.complained(), 240,
                         interval=0.3, what=f"{run} to complain about it")
            except TimeoutError:
                raise AssertionError(f"{run}: nothing said in 240 s:\n"
                                     f"{run.err_path.read_text()}") from None
            # not while it exits on its own (its final line written): a signal arriving
            # during interpreter shutdown meets the default handler
            if run.proc.poll() is None and not run.exiting():
                run.proc.send_signal(signal.SIGTERM)
        for run in one_shot + daemons:
            run.proc.wait(120)
    finally:
        closed.close()
        for run in one_shot + daemons:
            if run.proc.poll() is None:
                run.proc.kill()
    for run in one_shot + daemons:
        lines = run.lines()
        role = " ".join(a for a in run.args if not a.startswith("--"))
        assert all(l["role"] == role and l["pid"] and l["host"] for l in lines), \
            f"{run}: {[l for l in lines if l['role'] != role][:1]}"
        rc = run.proc.returncode
        assert rc in EXIT_CODES, f"{run}: exit code {rc}\n{run.err_path.read_text()}"
        if rc != 0:
            last = lines[-1]
            assert (last["level"], last.get("exit_code")) == ("critical", rc), f"{run}: {last}"
    # the one-shot commands that need the dependency say which one is down (a daemon may
    # have been stopped by the test's SIGTERM first: exit 0, checked above)
    for args, dependency in ((("replay", "--dry-run"), "kafka"), (("dlq", "list"), "kafka"),
                             (("dedup", "purge"), "mysql"), (("relay", "--purge-only"), "mysql")):
        (run,) = [r for r in one_shot if (r.args, r.dependency) == (args, dependency)]
        assert run.proc.returncode == 1, str(run)
        assert f"{dependency} unavailable" in run.lines()[-1]["msg"].lower(), str(run)


def test_spark_engine_without_pyspark_is_a_message(lab, tmp_path):
    cfg = lab.write_config(USERS)
    hide = ("import sys; sys.modules['pyspark'] = None; from cachesync.cli import main; "
            "sys.argv = ['cachesync'] + sys.argv[1:]; main()")
    done = subprocess.run([sys.executable, "-c", hide, "consume", "--engine", "spark",
                           "--checkpoint-location", str(tmp_path / "ck"), "--config", cfg],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **lab.stack.env})
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == \
        "cachesync: pyspark is not installed; it comes with pip install 'cachesync-mysql[spark]'"
