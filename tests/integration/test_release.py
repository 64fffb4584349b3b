"""The release artifacts install anywhere Python does: the sdist, the pure-Python wheel and the
compiled wheel (its tags checked by auditwheel) are built from this checkout; the sdist and the
pure wheel are installed into fresh virtualenvs with no C compiler on PATH, where
``cachesync --help`` runs and ``read_through`` fills a key of the devstack's Redis."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SOURCES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "schema", "producer_outbox",
           "consumer", "cachesync")
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


def _build(tmp: Path, *args: str, pure: bool = False) -> list[Path]:
    src, out = tmp / "src", tmp / "out"
    if not src.exists():
        src.mkdir()
        for name in SOURCES:
            if (ROOT / name).is_dir():
                shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns(
                    "__pycache__", "*.so"))
            else:
                shutil.copy2(ROOT / name, src / name)
    env = {**os.environ, "CACHESYNC_PURE": "1" if pure else "0"}
    done = subprocess.run([sys.executable, "-m", "build", *args, "--outdir", str(out), str(src)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return sorted(out.iterdir())


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("release")
    _build(tmp, "--sdist", "--wheel")
    built = _build(tmp, "--wheel", pure=True)
    pick = lambda suffix: next(p for p in built if p.name.endswith(suffix))  # noqa: E731
    return {"sdist": pick(".tar.gz"), "pure": pick("-py3-none-any.whl"),
            "compiled": pick("-linux_x86_64.whl")}


def test_the_pure_wheel_has_no_compiled_code_and_the_compiled_one_is_manylinux(artifacts, tmp_path):
    names = zipfile.ZipFile(artifacts["pure"]).namelist()
    assert not [n for n in names if n.endswith((".so", ".c"))]
    assert any(n.endswith("_speedups.c") for n in
               subprocess.run(["tar", "tzf", str(artifacts["sdist"])], capture_output=True,
                              text=True, check=True).stdout.splitlines())
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    repaired = subprocess.run([str(BIN / "auditwheel"), "repair", "--wheel-dir", str(tmp_path),
                               str(artifacts["compiled"])], capture_output=True, text=True, env=env)
    assert repaired.returncode == 0, repaired.stderr[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    assert "-manylinux" in wheel.name, wheel.name
    print(wheel.name)


@pytest.mark.parametrize("kind", ["sdist", "pure"])
def test_installs_without_a_compiler_and_runs(artifacts, kind, tmp_path, stack):
    python = tmp_path / "venv" / "bin" / "python"
    venv.create(tmp_path / "venv", with_pip=True)
    # no compiler: PATH holds only the virtualenv, and CC names nothing
    env = {"PATH": str(python.parent), "HOME": str(tmp_path), "CC": "no-such-compiler",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_CACHE_DIR": os.environ.get(
               "PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))}
    assert shutil.which("gcc", path=env["PATH"]) is None
    install = subprocess.run([str(python), "-m", "pip", "install", "-q",
                              f"cachesync[sidecar] @ {artifacts[kind].as_uri()}"],
                             capture_output=True, text=True, env=env, timeout=600)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    # run outside the checkout, so that only the installed package can be imported
    helped = subprocess.run([str(python.parent / "cachesync"), "--help"], capture_output=True,
                            text=True, env=env, timeout=60, cwd=tmp_path)
    assert helped.returncode == 0 and "cachesync consume" not in helped.stderr
    assert "consume" in helped.stdout and "tail" in helped.stdout, helped.stdout
    url = stack.env["CACHESYNC_REDIS_URL"]
    filled = subprocess.run([str(python), "-c", READ_THROUGH, url, f"release-test:{kind}"],
                            capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path)
    assert filled.returncode == 0, filled.stderr[-2000:]
    assert "read_through ok; accelerated: False" in filled.stdout
    print(kind, install.returncode, helped.stdout.splitlines()[0], filled.stdout.strip())
