"""Pieces of the demo: schema, the writes it makes, and the child processes it runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass

import pymysql

ER_NO_SUCH_TABLE = 1146
DEMO_SCHEMA = [
    "CREATE DATABASE IF NOT EXISTS demo",
    """CREATE TABLE IF NOT EXISTS demo.users (
         id BIGINT PRIMARY KEY, email VARCHAR(190) NOT NULL, name VARCHAR(100) NOT NULL,
         updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6))""",
    """CREATE TABLE IF NOT EXISTS demo.orders (
         id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, total_cents INT NOT NULL)""",
]


@dataclass(frozen=True)
class Write:
    label: str
    sql: str
    params: tuple
    keys: tuple[str, ...]


def ensure_demo_schema(admin) -> None:
    with admin.cursor() as cur:
        for statement in DEMO_SCHEMA:
            cur.execute(statement)
    admin.commit()


def forget_demo_checkpoint(admin, state_db: str, tailer: str) -> None:
    """Each demo's tailer starts at the server's current binlog position: the demo shows its
    own writes, and a checkpoint left by an earlier demo may point into binlogs the server
    has purged since (their expiry, a test), from which no tailer can resume."""
    with admin.cursor() as cur:
        try:
            cur.execute(f"DELETE FROM `{state_db}`.cachesync_checkpoint WHERE name = %s",
                        (tailer,))
        except pymysql.err.ProgrammingError as e:
            if e.args[0] != ER_NO_SUCH_TABLE:       # no tailer ever ran: nothing to forget
                raise
    admin.commit()


def demo_writes(count: int):
    """A cycle of insert / email change / order / delete, with ids unique to this run."""
    base = int(time.time()) % 10**6 * 100   # short ids, distinct across runs
    for i in range(count):
        uid = base + i // 4
        email, new_email = f"u{uid}@example.com", f"u{uid}.new@example.com"
        step = i % 4
        if step == 0:
            yield Write(f"INSERT demo.users id={uid}",
                        "INSERT INTO demo.users (id, email, name) VALUES (%s, %s, %s)",
                        (uid, email, "Ada"), (f"user:{uid}", f"user:email:{email}"))
        elif step == 1:
            yield Write(f"UPDATE demo.users id={uid} SET email",
                        "UPDATE demo.users SET email = %s WHERE id = %s", (new_email, uid),
                        (f"user:{uid}", f"user:email:{email}", f"user:email:{new_email}"))
        elif step == 2:
            yield Write(f"INSERT demo.orders id={uid}",
                        "INSERT INTO demo.orders (id, user_id, total_cents) VALUES (%s, %s, 1999)",
                        (uid, uid), (f"order:{uid}", f"user:orders:{uid}"))
        else:
            yield Write(f"DELETE demo.users id={uid}", "DELETE FROM demo.users WHERE id = %s",
                        (uid,), (f"user:{uid}", f"user:email:{new_email}"))


_SERVING = re.compile(r"metrics and health on (http://\S+)")


KAFKA_PIPELINE = (("tail",), ("consume",))
DIRECT_PIPELINE = (("run", "--direct"),)      # binlog -> Redis in one process, no Kafka


class Pipeline:
    """The pipeline's commands as children (`tail` and `consume`, or `run --direct`);
    stopped on exit, always."""

    def __init__(self, config_path: str, env: dict[str, str],
                 commands: tuple[tuple[str, ...], ...] = KAFKA_PIPELINE):
        # Any free metrics port (unless the user chose one): the demo must not fail because
        # another process holds 9464/9465; endpoints() says which ports were taken
        self._config, self._env = config_path, {"CACHESYNC_METRICS_LISTEN": "127.0.0.1:0", **env}
        self._commands = commands
        self._procs: list[tuple[str, subprocess.Popen, object]] = []

    def __enter__(self) -> "Pipeline":
        for command in self._commands:
            log = tempfile.TemporaryFile(mode="w+")
            proc = subprocess.Popen([sys.executable, "-m", "cachesync", *command,
                                     "--config", self._config],
                                    env=self._env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
            self._procs.append((" ".join(command), proc, log))
        return self

    def __exit__(self, *exc) -> None:
        for _, proc, _ in self._procs:
            if proc.poll() is None:
                proc.terminate()
        for _, proc, log in self._procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()

    def check_alive(self) -> None:
        for name, proc, _ in self._procs:
            if proc.poll() is not None:
                self.dump_logs()
                raise SystemExit(f"cachesync {name} exited with status {proc.returncode}")

    def endpoints(self) -> dict[str, str]:
        """Each child's metrics and health URL, as its log announced it."""
        found = {}
        for name, _, log in self._procs:
            # pread: the child shares this file's offset; moving it could make the child
            # write over its own first lines
            fd = log.fileno()
            text = os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", "replace")
            match = _SERVING.search(text)
            if match:
                found[name] = match.group(1)
        return found

    def dump_logs(self) -> None:
        for name, _, log in self._procs:
            log.seek(0)
            sys.stderr.write(f"----- cachesync {name} log -----\n{log.read()[-4000:]}\n")

    def wait_ready(self, admin, cache, timeout: float) -> None:
        """Write a probe row until its key is invalidated: proves tailer and consumer are live."""
        probe = uuid.uuid4().int % 10**9
        key = f"user:{probe}"
        deadline = time.monotonic() + timeout
        with admin.cursor() as cur:
            cur.execute("INSERT INTO demo.users (id, email, name) VALUES (%s, %s, 'probe')",
                        (probe, f"probe{probe}@example.com"))
        admin.commit()
        attempt = 0
        while True:
            self.check_alive()
            cache.set(key, b"probe", ex=60)
            with admin.cursor() as cur:  # touch the row again: a fresh event each round
                cur.execute("UPDATE demo.users SET name = %s WHERE id = %s", (f"probe{attempt}", probe))
            admin.commit()
            wait_until = time.monotonic() + 1.0
            while time.monotonic() < wait_until and cache.exists(key):
                time.sleep(0.01)
            if not cache.exists(key):
                break
            if time.monotonic() > deadline:
                self.dump_logs()
                raise SystemExit(f"pipeline not ready after {timeout:.0f}s")
            attempt += 1
        with admin.cursor() as cur:
            cur.execute("DELETE FROM demo.users WHERE id = %s", (probe,))
        admin.commit()
