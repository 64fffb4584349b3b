"""Every python and shell block of the user docs marked ``<!-- snippet: run ... -->`` runs
against the devstack (tests/docs/snippets.py finds them; tests/docs/test_docs_marks.py makes
every other block say why it is not run). A wrong import or a renamed option fails here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.snippets import ROOT, Snippet, snippets

pytestmark = pytest.mark.integration
RUNNABLE = [s for s in snippets() if s.runnable]


def _given(name: str, lab) -> object:
    """What a snippet's ``given NAME`` stands for, on the devstack."""
    if name == "conn":               # the application's connection, with the tables it updates
        lab.sql("CREATE TABLE scores (id INT PRIMARY KEY, points INT NOT NULL)")
        lab.sql("INSERT INTO scores VALUES (42, 0)")
        return lab.stack.admin(database=lab.db, autocommit=False)
    if name == "redis_client":
        return lab.redis
    if name == "uid":
        return 42
    if name == "load_user_json":
        return lambda uid: json.dumps({"id": uid, "name": "Ann"})
    raise AssertionError(f"snippet names {name!r}: add it to _given")


@pytest.mark.parametrize("snippet", RUNNABLE, ids=[s.where for s in RUNNABLE])
def test_snippet_runs(snippet: Snippet, lab):
    if snippet.mark.startswith("run python"):
        namespace = {name: _given(name, lab) for name in snippet.given}
        redis_keys = set(lab.redis.keys("*"))
        exec(compile(snippet.body, snippet.where, "exec"), namespace)   # noqa: S102
        if "emit(" in snippet.body:   # the event is in the outbox, committed
            (count,) = lab.sql("SELECT COUNT(*) FROM cachesync_outbox")[0]
            assert count == 1
        if "read_through(" in snippet.body:      # the value was filled, with its TTL
            filled = set(lab.redis.keys("*")) - redis_keys
            assert filled and all(0 < lab.redis.ttl(k) <= 3600 for k in filled)
            lab.redis.delete(*filled)
    else:
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", snippet.body], cwd=ROOT,
                              capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, f"{snippet.where}:\n{done.stdout}\n{done.stderr}"


def test_there_are_runnable_snippets():
    kinds = {s.mark.split(",")[0] for s in RUNNABLE}
    assert {"run python", "run sh"} <= kinds, kinds
