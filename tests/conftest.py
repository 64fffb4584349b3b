"""Shared fixtures. Integration and contract tests need the devstack; a missing
service FAILS the run (it never skips): `make test` starts them."""

from __future__ import annotations

import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def pytest_configure(config):
    """A pytest-xdist worker past the first uses a devstack of its own (tests/support/stacks.py):
    its environment is set before any test reads it."""
    from tests.support.stacks import use_worker_stack, worker_index
    if worker_index():
        use_worker_stack(worker_index())


SERVICE_TESTS = (ROOT / "tests" / "integration", ROOT / "tests" / "contract")


@pytest.fixture(scope="session", autouse=True)
def _worker_stack(request):
    """On a pytest-xdist worker past the first that runs tests on the services: its stack's
    base services up before its first test, and what it started stopped after its last
    (``devstack/with-stack.sh`` does both for the first worker and for runs without workers)."""
    from tests.support.stacks import running, worker_index
    if not worker_index() or not any(pathlib.Path(item.path).is_relative_to(d)
                                     for item in request.session.items for d in SERVICE_TESTS):
        yield
        return
    from tests.support import stack_command
    before = running()
    stack_command("up")
    yield
    started = sorted(running() - before)
    if started:
        stack_command("down", *started)


@pytest.fixture(autouse=True)
def _one_start_per_test():
    """``cachesync.runtime.startup`` records one process's start; each test's commands start anew."""
    from cachesync.runtime import startup
    startup.reset()


@pytest.fixture(scope="session")
def stack():
    from cachesync.devstack import DevStack, default_env_file
    path = default_env_file(ROOT)
    if not path.exists():
        pytest.fail(f"{path} is missing: the devstack is not running. Start it with "
                    "`devstack/stack.sh up` or run the whole suite with `make test`.")
    s = DevStack.from_env_file(path)
    try:
        s.check()
    except ConnectionError as e:
        pytest.fail(str(e))
    return s


@pytest.fixture
def lab(stack, tmp_path, request):
    """An isolated world for one test: schema, topics, group, tailer name, key prefix."""
    from tests.support import Lab
    lab = Lab(stack, tmp_path, request.node.name)
    yield lab
    lab.close()


@pytest.fixture(params=["redis", "redis-cluster"])
def redis_server(request):
    """A client of the devstack's Redis, then of its 3-master cluster variant (started on
    demand): suites that must hold on both take this fixture."""
    if request.param == "redis":
        client = request.getfixturevalue("stack").redis()
    else:
        from tests.support.variants import redis_cluster
        client = redis_cluster()
    yield client
    client.close()


@pytest.fixture(scope="session")
def gomysql_reading():
    """go-mysql's reading of every shared real binlog file (tests/support/gomysql.py), made
    on first use: no Go to be had, a failed build or a failed run fails the tests that need
    it, with the reason."""
    from tests.support import gomysql
    try:
        return gomysql.reading()
    except gomysql.GoMysqlUnavailable as e:
        pytest.fail(str(e))
