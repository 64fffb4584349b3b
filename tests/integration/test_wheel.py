"""The wheel installs one top-level package, ``cachesync``, beside anything an application has.

Built from this checkout and installed into fresh virtualenvs that already hold (or later
get) PyPI's ``schema`` package, which the old wheel overwrote; then an application that
has its own ``schema.py`` and ``consumer/`` package imports ``cachesync.client`` and fills
a real Redis key through ``read_through``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PYPI_SCHEMA = "schema==0.7.7"


# What the Dockerfile copies: the wheel must build from exactly these.
SOURCES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "schema", "producer_outbox", "consumer",
           "cachesync")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Built from a copy, so the build leaves nothing (build/, *.egg-info) in the checkout."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                        if (ROOT / name).is_dir() else {}))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
                    str(src)], check=True, cwd=out)
    (found,) = out.glob("cachesync_mysql-*.whl")
    return found


def test_the_wheel_holds_exactly_one_top_level_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert top == {"cachesync"}
    for data in ("cachesync/schema/lua/fenced_write.lua", "cachesync/schema/sql/cachesync.sql",
                 "cachesync/examples/demo.yaml"):
        assert data in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


def _venv(path: Path) -> Path:
    venv.create(path, with_pip=True)
    return path / "bin" / "python"


def _pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    *args], check=True)


def _application(tmp: Path) -> Path:
    """An application directory with its own ``schema.py`` and ``consumer`` package."""
    app = tmp / "app"
    (app / "consumer").mkdir(parents=True)
    (app / "consumer" / "__init__.py").write_text("MINE = True\n")
    (app / "check.py").write_text(textwrap.dedent("""
        import sys
        import redis
        import schema                                  # PyPI's
        import consumer                                # the application's own
        from cachesync.client import read_through

        assert hasattr(schema, "Schema"), schema.__file__
        assert consumer.MINE
        assert schema.Schema(int).validate(5) == 5
        client = redis.Redis.from_url(sys.argv[1])
        key = sys.argv[2]
        client.delete(key)
        assert read_through(client, key, lambda: b"filled", ttl_s=60) == b"filled"
        assert client.get(key) == b"filled"
        assert read_through(client, key, lambda: b"not called", ttl_s=60) == b"filled"
        client.delete(key)
        loaded = [m for m in sys.modules if m.split(".")[0] in ("kafka", "pymysql", "yaml",
                                                                "click", "orjson", "pyspark", "confluent_kafka")]
        assert not loaded, loaded
        print("ok")
    """))
    return app


@pytest.mark.parametrize("order", ["schema first", "cachesync first"])
def test_installs_beside_pypi_schema_and_an_apps_own_packages(wheel, tmp_path, stack, order):
    python = _venv(tmp_path / "venv")
    if order == "schema first":
        _pip(python, PYPI_SCHEMA)
        _pip(python, str(wheel))
    else:
        _pip(python, str(wheel))
        _pip(python, PYPI_SCHEMA)
    app = _application(tmp_path)
    key = f"wheel-test:{order.replace(' ', '-')}"
    done = subprocess.run([str(python), "check.py", stack.env["CACHESYNC_REDIS_URL"], key],
                          cwd=app, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_command_line_without_the_sidecar_extra_says_what_to_install(wheel, tmp_path):
    python = _venv(tmp_path / "venv")
    _pip(python, str(wheel))
    done = subprocess.run([str(tmp_path / "venv" / "bin" / "cachesync"), "--help"],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert "pip install 'cachesync-mysql[sidecar]'" in done.stderr


def test_the_dockerfile_copies_what_the_wheel_is_built_from():
    copied = set()
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            copied.update(line.split()[1:-1])
    assert copied == set(SOURCES)
