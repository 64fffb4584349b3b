"""Shared fixtures. Integration and contract tests need the devstack; a missing
service FAILS the run (it never skips): `make test` starts them."""

from __future__ import annotations

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def devstack_env_path() -> pathlib.Path:
    if os.environ.get("CACHESYNC_ENV_FILE"):
        return pathlib.Path(os.environ["CACHESYNC_ENV_FILE"])
    base = os.environ.get("CACHESYNC_DEVSTACK_DIR") or str(ROOT / ".devstack")
    return pathlib.Path(base) / "env"


@pytest.fixture(scope="session")
def stack():
    from tests.support import Stack
    path = devstack_env_path()
    if not path.exists():
        pytest.fail(f"{path} is missing: the devstack is not running. Start it with "
                    "`devstack/stack.sh up` or run the whole suite with `make test`.")
    s = Stack.from_env_file(path)
    s.check()
    return s


@pytest.fixture
def lab(stack, tmp_path, request):
    """An isolated world for one test: schema, topics, group, tailer name, key prefix."""
    from tests.support import Lab
    lab = Lab(stack, tmp_path, request.node.name)
    yield lab
    lab.close()
