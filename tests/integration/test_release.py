"""The release artifacts, as `make dist` builds them from a copy of this checkout's tracked files:
the sdist, the manylinux_2_17 CPython 3.11 wheel and the pure-Python wheel, built without a
warning and passed by `twine check --strict`. Each is installed into a fresh virtualenv (the
sdist and the pure wheel with no C compiler on PATH), where `cachesync --version` and
`cachesync doctor` run against the devstack (a new pipeline: exit 0) and ``read_through`` fills
a key of its Redis. The docs extra alone builds the docs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from cachesync import DISTRIBUTION, __version__

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent
# the docs build docs/development.md gives (and `make docs` runs)
DOCS_BUILD = ("-W", "--keep-going", "-n", "-q", "-b", "html", "docs", "docs/_build/html")
READ_THROUGH = """
import sys, redis
from cachesync.client import read_through
from cachesync.schema import partition
client = redis.Redis.from_url(sys.argv[1])
key = sys.argv[2]
assert read_through(client, key, lambda: "filled", ttl_s=60) == "filled"
assert client.get(key) == b"filled" and 0 < client.ttl(key) <= 60
client.delete(key)
print("read_through ok; accelerated:", partition.ACCELERATED)
"""


def _tracked_copy(dest: Path) -> None:
    """The checkout's tracked files as they are in the work tree (what a clone would build)."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
                           ).stdout.decode().split("\0")
    for name in filter(None, names):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> dict:
    """`make dist` in a copy, with this test run's virtualenv (STAMP empty: it is installed,
    and the copy must never be installed into it)."""
    src = tmp_path_factory.mktemp("src")
    _tracked_copy(src)
    # twine's report one line per artifact (wide), read without its colours
    done = subprocess.run(["make", "-C", str(src), "dist", f"VENV={VENV}", "STAMP="],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "COLUMNS": "250"})
    output = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)
    assert done.returncode == 0, output[-5000:]
    built = sorted((src / "dist").iterdir())
    pick = lambda pattern: next(p for p in built if re.search(pattern, p.name))  # noqa: E731
    return {"output": output, "sdist": pick(r"\.tar\.gz$"), "pure": pick(r"-py3-none-any\.whl$"),
            "compiled": pick(r"-cp311-cp311-.*manylinux_2_17_x86_64.*\.whl$"), "all": built}


def test_make_dist_builds_three_artifacts_without_a_warning_and_twine_passes_them(dist):
    prefix = DISTRIBUTION.replace("-", "_") + f"-{__version__}"
    assert len(dist["all"]) == 3 and all(p.name.startswith(prefix) for p in dist["all"])
    warnings = [line for line in dist["output"].splitlines() if re.search(r"warn", line, re.I)]
    assert not warnings, warnings
    for artifact in dist["all"]:
        assert f"Checking dist/{artifact.name}: PASSED" in dist["output"], dist["output"][-3000:]
    print("\n".join(p.name for p in dist["all"]))


def test_the_pure_wheel_has_no_compiled_code_and_the_compiled_one_has_its_accelerator(dist):
    pure = zipfile.ZipFile(dist["pure"]).namelist()
    assert not [n for n in pure if n.endswith((".so", ".c"))]
    compiled = zipfile.ZipFile(dist["compiled"]).namelist()
    assert [n for n in compiled if re.fullmatch(r"cachesync/_speedups\..*\.so", n)]
    assert any(n.endswith("_speedups.c") for n in
               subprocess.run(["tar", "tzf", str(dist["sdist"])], capture_output=True,
                              text=True, check=True).stdout.splitlines())
    for names in (pure, compiled):
        assert "cachesync/schema/lua/fenced_write.lua" in names
        assert "cachesync/examples/demo.yaml" in names


@pytest.mark.parametrize("kind", ["sdist", "pure", "compiled"])
def test_each_artifact_installs_into_a_clean_venv_and_runs(dist, kind, tmp_path, lab):
    python = tmp_path / "venv" / "bin" / "python"
    venv.create(tmp_path / "venv", with_pip=True)
    # the sdist and the pure wheel without a compiler: PATH holds only the virtualenv
    env = {"PATH": str(python.parent), "HOME": str(tmp_path), "CC": "no-such-compiler",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_CACHE_DIR": os.environ.get(
               "PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))}
    assert shutil.which("gcc", path=env["PATH"]) is None
    install = subprocess.run([str(python), "-m", "pip", "install", "-q",
                              f"{DISTRIBUTION}[sidecar] @ {dist[kind].as_uri()}"],
                             capture_output=True, text=True, env=env, timeout=900)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    cachesync = str(python.parent / "cachesync")
    # run outside the checkout, so that only the installed package can be imported
    run = lambda *args, **extra: subprocess.run(  # noqa: E731
        list(args), capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**env, **extra})
    version = run(cachesync, "--version")
    assert version.returncode == 0 and version.stdout.strip() == f"cachesync, version {__version__}"
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY)")
    cfg = lab.write_config({"users": {"keys": ["user:{id}"]}})
    doctor = run(cachesync, "doctor", "-c", cfg, **lab.stack.env)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert doctor.stdout.splitlines()[-1].endswith(("worst: PASS", "worst: NOTE")), doctor.stdout
    filled = run(str(python), "-c", READ_THROUGH, lab.stack.env["CACHESYNC_REDIS_URL"],
                 f"{lab.prefix}release:{kind}")
    assert filled.returncode == 0, filled.stderr[-2000:]
    accelerated = kind == "compiled"
    assert f"read_through ok; accelerated: {accelerated}" in filled.stdout
    print(kind, version.stdout.strip(), "|", doctor.stdout.splitlines()[-1], "|",
          filled.stdout.strip())


def test_the_docs_extra_alone_builds_the_docs(tmp_path):
    """`pip install -e '.[docs]'` in a clean virtualenv, then the documented strict build."""
    src = tmp_path / "src"
    src.mkdir()
    _tracked_copy(src)
    python = tmp_path / "venv" / "bin" / "python"
    venv.create(tmp_path / "venv", with_pip=True)
    env = {"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": str(tmp_path), "CACHESYNC_PURE": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_CACHE_DIR": os.environ.get(
               "PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))}
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", ".[docs]"],
                             cwd=src, capture_output=True, text=True, env=env, timeout=900)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    built = subprocess.run(["sphinx-build", *DOCS_BUILD], cwd=src, capture_output=True,
                           text=True, env=env, timeout=900)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert (src / "docs" / "_build" / "html" / "reference" / "cli.html").is_file()
