"""The devstacks of the service tests' xdist workers (tests/support/stacks.py) never share a
port or a directory with the default stack, whatever the variants use, and find the Spark jars
`make install` fetched into the default stack's directory."""

import os
import re

import pytest

from tests.support.stacks import BASE_PORTS, MAX_WORKERS, ROOT, worker_env

# every variant's default port is its base port plus at most this (devstack/variants/*.sh)
VARIANT_SPAN = 100


def ports(env: dict[str, str] | None) -> set[int]:
    bases = BASE_PORTS if env is None else {name: int(env[name]) for name in BASE_PORTS}
    return {base + k for base in bases.values() for k in range(VARIANT_SPAN)}


def test_the_variants_ports_follow_the_base_ports_within_the_span():
    offsets = []
    for script in (ROOT / "devstack" / "variants").glob("*.sh"):
        offsets += [int(n) for n in re.findall(r"_PORT \+ (\d+)\)", script.read_text())]
    assert offsets and max(offsets) < VARIANT_SPAN
    spark = (ROOT / "devstack" / "variants" / "spark.sh").read_text()
    assert "DEVSTACK_SPARK_PORT_BASE:-17077" in spark


def test_each_worker_has_its_own_ports_below_the_ephemeral_range_and_its_own_directory():
    stacks = [None] + [worker_env(i) for i in range(1, MAX_WORKERS)]
    seen: set[int] = set()
    for env in stacks:
        mine = ports(env)
        assert not mine & seen and max(mine) < 32768
        seen |= mine
    directories = [env["CACHESYNC_DEVSTACK_DIR"] for env in stacks[1:]]
    assert len(set(directories)) == len(directories)
    assert all(d != str(ROOT / ".devstack") for d in directories)
    assert all(env["CACHESYNC_ENV_FILE"] == env["CACHESYNC_DEVSTACK_DIR"] + "/env" for env in stacks[1:])


@pytest.mark.parametrize("index", [0, MAX_WORKERS])
def test_a_worker_without_a_stack_is_refused(index):
    with pytest.raises(ValueError, match="at most"):
        worker_env(index)


def test_a_worker_stack_uses_the_spark_jars_make_install_fetched_into_the_default_stack(monkeypatch):
    from consumer.spark.session import JARS_ENV, jars_dir
    from tests.support.stacks import use_worker_stack
    environ = {k: v for k, v in os.environ.items()
               if k not in (JARS_ENV, "DEVSTACK_DIR", "CACHESYNC_DEVSTACK_DIR")}
    monkeypatch.setattr(os, "environ", environ)
    use_worker_stack(1)
    assert environ["CACHESYNC_DEVSTACK_DIR"] == worker_env(1)["CACHESYNC_DEVSTACK_DIR"]
    assert jars_dir() == ROOT / ".devstack" / "spark" / "jars"


def test_tests_and_benches_find_the_spark_jars_through_the_session_module():
    """A path built from a stack's own directory misses the jars on a worker's stack."""
    builders = [str(path.relative_to(ROOT))
                for top in ("tests/integration", "tests/contract", "tests/support", "bench")
                for path in (ROOT / top).rglob("*.py")
                if re.search(r'"spark"\s*/\s*"jars"|spark/jars', path.read_text())]
    assert builders == []
