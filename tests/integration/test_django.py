"""A Django shop made by ``django-admin startproject`` (tests/support/django_shop.py), on the
devstack's MariaDB and Redis with django-redis, set up with cachesync the documented way
(docs/frameworks.md: ``init --framework django``, the keys renamed, ``run --direct``): under
concurrent readers (HTTP, Django's server) and ORM writers (save, queryset update, a book
moving between authors), its views never serve an object older than the invalidation lag."""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
import yaml

from tests.support import cli, start, wait_for
from tests.support.django_shop import make_project

pytestmark = pytest.mark.integration

AUTHORS, BOOKS, PROBES = range(1, 9), range(1, 17), (9, 10)
VERSION = "3"
SECONDS = 15.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def shop(lab):
    """The migrated project, its rows, its environment and a running Django server."""
    stack = lab.stack
    with open(stack.env["DEVSTACK_MYSQL_ADMIN_PASSWORD_FILE"]) as f:
        password = f.read().strip()
    env = {**os.environ, "SHOP_DB": lab.db, "SHOP_DB_PORT": stack.env["CACHESYNC_MYSQL_PORT"],
           "SHOP_DB_USER": stack.env["DEVSTACK_MYSQL_ADMIN_USER"], "SHOP_DB_PASSWORD": password,
           "SHOP_REDIS_URL": stack.env["CACHESYNC_REDIS_URL"],
           "CACHE_KEY_PREFIX": lab.prefix.rstrip(":"), "CACHE_VERSION": VERSION,
           "DJANGO_SETTINGS_MODULE": "shopsite.settings"}
    project = make_project(lab.tmp, env)
    for a in [*AUTHORS, *PROBES]:
        lab.sql("INSERT INTO library_author (id, name, rev) VALUES (%s, %s, 0)", (a, f"a{a}"))
    for b in BOOKS:
        lab.sql("INSERT INTO library_book (id, author_id, title, rev) VALUES (%s, %s, %s, 0)",
                (b, AUTHORS[(b - 1) % 2 + 2 * (b // 2 % 4)], f"b{b}"))   # its writer's
    port = _free_port()
    log = open(lab.tmp / "runserver.log", "w")
    server = subprocess.Popen([sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}",
                               "--noreload"], cwd=project, env=env, stdout=log,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _get(f"{base}/author/1/") is not None, what="Django's server")
        yield project, env, base
    finally:
        server.terminate()
        server.wait(15)


def _get(url: str):
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return json.loads(r.read())
    except OSError:
        return None


def _cachesync_config(lab, shop_env) -> str:
    """The documented steps: ``cachesync init --framework django``, then the proposed keys
    renamed to the ones the views use; the key prefix and version from the application's."""
    path = lab.tmp / "cachesync.yaml"
    made = cli(lab, "init", "--framework", "django", lab.db, "-o", str(path))
    assert made.returncode == 0, made.stdout + made.stderr
    assert f"not mapped: {lab.db}.django_session: django's own table" in made.stdout
    doc = yaml.safe_load(path.read_text())
    assert sorted(doc["tables"]) == [f"{lab.db}.library_author", f"{lab.db}.library_book"]
    doc["framework"]["key_prefix"] = shop_env["CACHE_KEY_PREFIX"]
    doc["tables"][f"{lab.db}.library_author"]["keys"] = ["author:{id}"]
    doc["tables"][f"{lab.db}.library_book"]["keys"] = ["book:{id}", "author_books:{author_id}"]
    # this test's own tailer identity and metrics port (several run on one devstack)
    doc["tailer"] = {"name": f"tailer-{lab.suffix}", "server_id": 90000 + int(lab.suffix[:4], 16)}
    doc["metrics"] = {"listen": "127.0.0.1:0"}
    path.write_text(yaml.safe_dump(doc))
    return str(path)


class Readers:
    """Threads reading the three views at random rows; each read kept as (start, url, body)."""

    def __init__(self, base: str, count: int = 4):
        self.base, self.reads, self._stop = base, [], threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n,)) for n in range(count)]

    def _run(self, n: int) -> None:
        i = n
        while not self._stop.is_set():
            kind, pk = i % 3, 1 + (i * 7) % len(AUTHORS if i % 3 != 2 else BOOKS)
            url = ("/author/%d/", "/author/%d/books/", "/book/%d/")[kind] % pk
            started = time.time()
            body = _get(self.base + url)
            assert body is not None, f"GET {url} failed"
            self.reads.append((started, url, body))
            i += 1

    def __enter__(self):
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for t in self._threads:
            t.join(60)


def _served(url: str, body: dict) -> list[tuple[str, int]]:
    """The (row, rev) pairs a view's body shows."""
    if url.endswith("/books/"):
        return [(f"book:{pk}", rev) for pk, rev in body["books"]]
    return [(url.strip("/").replace("/", ":"), body["rev"])]


def test_django_views_never_serve_an_object_older_than_the_invalidation_lag(lab, shop,
                                                                            monkeypatch):
    project, env, base = shop
    cfg = _cachesync_config(lab, env)
    # the cache VERSION reaches cachesync from the variable the application reads it from
    monkeypatch.setenv("CACHESYNC_FRAMEWORK_VERSION", env["CACHE_VERSION"])
    start(lab, cfg, "run", "--direct")
    # prove the sidecar works on Django's keys before measuring: a cached view, an ORM write
    assert _get(f"{base}/author/1/")["rev"] == 0
    key = f"{lab.prefix}{VERSION}:author:1"
    assert pickle.loads(lab.redis.get(key))["rev"] == 0   # Django's own form and serializer
    lab.sql("UPDATE library_author SET name = 'x' WHERE id = 1")
    wait_for(lambda: lab.redis.get(key) is None, what="Django's key invalidated")

    commits: dict[tuple[str, int], float] = {}
    lags: list[float] = []
    writers = [subprocess.Popen(
        [sys.executable, "manage.py", "write_load", "--seconds", str(SECONDS),
         "--authors", *map(str, AUTHORS[w::2]), "--books", *map(str, BOOKS[w::2]),
         "--probe", str(PROBES[w])], cwd=project, env=env, stdout=subprocess.PIPE, text=True)
        for w in range(2)]
    with Readers(base) as readers:
        for w in writers:
            for line in w.stdout:
                fact = json.loads(line)
                if "probe_lag" in fact:
                    lags.append(fact["probe_lag"])
                else:
                    commits[(fact["row"], fact["rev"])] = fact["at"]
            assert w.wait(60) == 0
    window = max(lags)
    stale = [(url, row, rev, round(started - commits[(row, rev + 1)], 3))
             for started, url, body in readers.reads for row, rev in _served(url, body)
             if (row, rev + 1) in commits and commits[(row, rev + 1)] < started - window]
    print(f"{len(readers.reads)} reads, {len(commits)} ORM writes, {len(lags)} probes, "
          f"lag window {window * 1000:.1f} ms")
    assert len(commits) > 50 and len(readers.reads) > 200 and len(lags) > 10
    assert window < 5, f"commit -> invalidation took {window:.2f} s"
    assert stale == [], f"reads older than the {window * 1000:.0f} ms lag: {stale[:10]}"
    # readers saw the writes (the views are not serving one frozen value)
    assert len({body.get("rev") for _, url, body in readers.reads if url == "/author/1/"}) > 1
    # once writes stopped, every cached object is the database's (no key left stale)
    for table, rows in (("author", AUTHORS), ("book", BOOKS)):
        for pk in rows:
            (db_rev,), = lab.sql(f"SELECT rev FROM library_{table} WHERE id = %s", (pk,))
            wait_for(lambda: _cached_rev(lab, f"{table}:{pk}") in (None, db_rev),
                     timeout=window + 5, what=f"{table}:{pk} cached as the database has it")


def _cached_rev(lab, key: str) -> int | None:
    """The rev of the object Django's cache holds for ``key`` (None: not cached)."""
    data = lab.redis.get(f"{lab.prefix}{VERSION}:{key}")
    return None if data is None else pickle.loads(data)["rev"]
