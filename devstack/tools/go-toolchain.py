#!/usr/bin/env python3
"""Print the path of a `go` command new enough for a go.mod, installing Go when needed.

`devstack/tools/go-toolchain.py [GO_MOD]` (default: tests/support/gomysql_rows/go.mod, the
go-mysql reader the real-binlog tests build). The `go` on PATH is used when its version is at
least the go.mod's `go` line. Otherwise Go PINNED is taken from the Go module proxy as the go
command's own toolchain switch takes it (module golang.org/toolchain, the zip of version
v0.0.1-goX.Y.Z.linux-amd64), checked against its go.sum hash (pinned below, as the checksum
database lists it), and unpacked into build/go/ of the checkout; later runs reuse it.
GOPROXY is honoured (its first proxy URL; `off` or only `direct` refuse the download), and
the go command inherits the environment (GOFLAGS, GOTOOLCHAIN, GOPROXY) unchanged.

Exit 1, with the reason on stderr, when no Go can be had. Python's standard library only: it
runs before the virtualenv exists.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import io
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
GO_MOD = ROOT / "tests" / "support" / "gomysql_rows" / "go.mod"
INSTALL_DIR = ROOT / "build" / "go"
PINNED = "go1.27.3"
# the h1: hash (Go's dirhash over the zip's files) of each platform's toolchain zip, from
# the checksum database's record of golang.org/toolchain v0.0.1-go1.27.3.<platform>
HASHES = {"linux-amd64": "h1:r0ub+FnqzZxoWm/dSUOI9DcIqYWn/mNYGFJcv7PyBzs="}
DEFAULT_PROXY = "https://proxy.golang.org"
TIMEOUT_S = 300


class NoGo(RuntimeError):
    """No usable Go: the message says why and what to do."""


def version_tuple(text: str) -> tuple[int, ...]:
    """(1, 25, 0) from "go1.25.0", "1.25" or "go1.26rc1" (a pre-release counts as its x.y)."""
    match = re.match(r"(?:go)?(\d+)(?:\.(\d+))?(?:\.(\d+))?", text.strip())
    if not match:
        raise ValueError(f"not a Go version: {text!r}")
    return tuple(int(part or 0) for part in match.groups())


def required(go_mod: pathlib.Path) -> tuple[int, ...]:
    for line in go_mod.read_text().splitlines():
        if line.startswith("go "):
            return version_tuple(line.split()[1])
    raise NoGo(f"{go_mod} has no go line")


def local_go(need: tuple[int, ...]) -> str | None:
    """The go on PATH when it is at least ``need``."""
    go = shutil.which("go")
    if go is None:
        return None
    # outside any module and without switching: the version of this binary itself
    env = {**os.environ, "GOTOOLCHAIN": "local"}
    proc = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, env=env,
                          cwd="/", timeout=60)
    if proc.returncode != 0:
        return None
    try:
        have = version_tuple(proc.stdout)
    except ValueError:
        return None
    if have < need:
        print(f"go-toolchain: {go} is {proc.stdout.strip()}, older than the go "
              f"{'.'.join(map(str, need))} the module needs", file=sys.stderr)
        return None
    return go


def platform_name() -> str:
    machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    return f"{platform.system().lower()}-{machine}"


def proxies() -> list[str]:
    """The proxy URLs of GOPROXY, in order (``direct`` and ``off`` are not proxies)."""
    value = os.environ.get("GOPROXY") or DEFAULT_PROXY
    urls = [u.strip().rstrip("/") for u in re.split(r"[,|]", value)]
    found = [u for u in urls if u and u not in ("direct", "off")]
    if not found:
        raise NoGo(f"GOPROXY={value} names no module proxy to take Go {PINNED} from: install "
                   "Go yourself (on PATH) or set GOPROXY")
    return found


def dirhash(data: bytes) -> str:
    """Go's h1: hash of a module zip (golang.org/x/mod/sumdb/dirhash.Hash1): sha256 over
    the lines "<sha256 hex>  <name>\\n" of its files, sorted by name."""
    summary = hashlib.sha256()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for name in sorted(zf.namelist()):
            summary.update(f"{hashlib.sha256(zf.read(name)).hexdigest()}  {name}\n".encode())
    return "h1:" + base64.b64encode(summary.digest()).decode()


def download(version: str) -> bytes:
    errors = []
    for proxy in proxies():
        url = f"{proxy}/golang.org/toolchain/@v/{version}.zip"
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:
                return resp.read()
        except (urllib.error.URLError, OSError) as e:
            errors.append(f"{url}: {e}")
    raise NoGo(f"could not download Go {PINNED}: " + "; ".join(errors))


def unpack(data: bytes, version: str, target: pathlib.Path) -> None:
    """The zip's files under ``target``; module zips keep no modes, so bin/ and pkg/tool/
    get their execute bits back as the go command does when it switches toolchains."""
    prefix = f"golang.org/toolchain@{version}/"
    tmp = pathlib.Path(tempfile.mkdtemp(dir=target.parent, prefix=".unpack-"))
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for info in zf.infolist():
                if info.is_dir() or not info.filename.startswith(prefix):
                    continue
                rel = info.filename[len(prefix):]
                path = tmp / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(zf.read(info))
                if rel.startswith("bin/") or rel.startswith("pkg/tool/"):
                    path.chmod(0o755)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def installed_go(need: tuple[int, ...]) -> str:
    """Go PINNED under build/go/, downloaded and checked first if it is not there yet."""
    plat = platform_name()
    if plat not in HASHES or version_tuple(PINNED) < need:
        raise NoGo(f"no Go {'.'.join(map(str, need))} or newer on PATH, and the pinned Go "
                   f"{PINNED} does not fit ({plat}): install one on PATH")
    target = INSTALL_DIR / f"{PINNED}.{plat}"
    go = target / "bin" / "go"
    INSTALL_DIR.mkdir(parents=True, exist_ok=True)
    with open(INSTALL_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)       # one download at a time
        if not go.exists():
            version = f"v0.0.1-{PINNED}.{plat}"
            print(f"go-toolchain: downloading {PINNED} (golang.org/toolchain {version}) "
                  "from the module proxy", file=sys.stderr)
            data = download(version)
            got = dirhash(data)
            if got != HASHES[plat]:
                raise NoGo(f"golang.org/toolchain {version}: hash {got}, expected "
                           f"{HASHES[plat]}: refusing it")
            unpack(data, version, target)
    return str(go)


def main(argv: list[str]) -> int:
    go_mod = pathlib.Path(argv[1]) if len(argv) > 1 else GO_MOD
    try:
        need = required(go_mod)
        print(local_go(need) or installed_go(need))
    except NoGo as e:
        print(f"go-toolchain: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
