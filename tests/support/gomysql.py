"""go-mysql's reading of the shared real binlog files, made at test time.

The reader is tests/support/gomysql_rows/ (go-mysql's ``replication.NewBinlogParser``, its
modules from the Go module proxy; what it prints is in its main.go). It is built with the Go
that devstack/tools/go-toolchain.py finds or installs, and run on every file of the shared
``realbinlog/`` folder. Both are cached under ``build/gomysql-rows/`` (gitignored): the binary
by a digest of the reader's go.mod, go.sum and main.go, its reading by that and the files'
names and sizes, so a later run costs one file read. Nothing derived from the shared files is
kept in the repository.

``python -m tests.support.gomysql`` (``make gomysql-rows``) makes the reading and prints where
it lies.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pathlib
import subprocess
import sys

from tests.support.shared import shared_dir

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "support" / "gomysql_rows"
BUILD = ROOT / "build" / "gomysql-rows"
TOOLCHAIN = ROOT / "devstack" / "tools" / "go-toolchain.py"
BUILD_TIMEOUT_S = 900       # a cold module cache downloads go-mysql and its dependencies


class GoMysqlUnavailable(RuntimeError):
    """go-mysql's reading could not be made (no Go, a failed build or run): says why."""


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little") + part)
    return h.hexdigest()[:16]


def source_key() -> str:
    return _digest(*((SOURCE / name).read_bytes() for name in ("go.mod", "go.sum", "main.go")))


def files() -> list[pathlib.Path]:
    """The shared real binlog files, by name."""
    folder = shared_dir() / "realbinlog"
    return sorted(p for p in folder.iterdir() if p.name != "SOURCES.md")


def _run(what: str, command: list[str], **options) -> subprocess.CompletedProcess:
    """Runs ``command``; raises GoMysqlUnavailable naming ``what`` when it fails or hangs."""
    try:
        proc = subprocess.run(command, capture_output=True, timeout=BUILD_TIMEOUT_S, **options)
    except subprocess.TimeoutExpired:
        raise GoMysqlUnavailable(f"{what}: still running after {BUILD_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).decode(errors="replace")
        raise GoMysqlUnavailable(f"{what} (exit {proc.returncode}):\n{output[-3000:]}")
    return proc


def go_command() -> str:
    """Raises GoMysqlUnavailable when devstack/tools/go-toolchain.py finds no Go."""
    proc = _run("no Go to build go-mysql's reader with",
                [sys.executable, str(TOOLCHAIN), str(SOURCE / "go.mod")])
    return proc.stdout.decode().strip()


def binary() -> pathlib.Path:
    """The built reader, built first unless this source's build is cached.

    Raises GoMysqlUnavailable.
    """
    path = BUILD / f"gomysql-rows-{source_key()}"
    if path.exists():
        return path
    go = go_command()
    env = dict(os.environ)
    if go.startswith(str(ROOT)):
        env.pop("GOROOT", None)         # the Go of build/go/ finds its own root
    partial = path.with_suffix(".partial")
    _run(f"building go-mysql's reader failed ({go} build)",
         [go, "build", "-buildvcs=false", "-o", str(partial), "."], cwd=SOURCE, env=env)
    partial.rename(path)
    return path


def reading() -> dict[str, dict]:
    """file name -> go-mysql's reading of it (see main.go), made unless cached.

    Raises GoMysqlUnavailable.
    """
    return {f["file"]: f for f in json.loads(reading_file().read_text())}


def reading_file() -> pathlib.Path:
    """The cached reading of every shared file, made first unless cached.

    Raises GoMysqlUnavailable.
    """
    paths = files()
    key = _digest(source_key().encode(),
                  *(f"{p.name}\0{p.stat().st_size}".encode() for p in paths))
    out = BUILD / f"reading-{key}.json"
    BUILD.mkdir(parents=True, exist_ok=True)
    with open(BUILD / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)     # one build and run at a time
        if not out.exists():
            _read(binary(), paths, out)
    return out


def _read(reader: pathlib.Path, paths: list[pathlib.Path], out: pathlib.Path) -> None:
    proc = _run("go-mysql's reader failed", [str(reader), *map(str, paths)],
                env={**os.environ, "TZ": "UTC"})
    partial = out.with_suffix(".partial")
    partial.write_bytes(proc.stdout)
    partial.rename(out)


if __name__ == "__main__":
    try:
        print(reading_file())
    except GoMysqlUnavailable as e:
        sys.exit(str(e))
