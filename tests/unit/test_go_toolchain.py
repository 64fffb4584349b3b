"""devstack/tools/go-toolchain.py: the go on PATH when new enough, else Go from the module proxy.

The download is exercised against a module proxy served here on loopback (a small zip in the
toolchain module's layout, its hash worked out here); the hash function is checked against
Go's own: the go.sum line of go-mysql, whose module zip the go-mysql reader's build left in
the module cache.
"""

from __future__ import annotations

import http.server
import importlib.util
import io
import os
import pathlib
import subprocess
import threading
import zipfile

import pytest

from tests.support import gomysql

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("go_toolchain",
                                               ROOT / "devstack" / "tools" / "go-toolchain.py")
gt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gt)

FAKE = "go1.99.1"


@pytest.mark.parametrize("text, version", [
    ("go1.25.0", (1, 25, 0)), ("1.25", (1, 25, 0)), ("go1.26rc1", (1, 26, 0)),
    ("go1.19.8\n", (1, 19, 8))])
def test_versions_read_as_numbers(text, version):
    assert gt.version_tuple(text) == version


def test_the_reader_needs_the_go_version_its_go_mod_names():
    line = next(x for x in (gomysql.SOURCE / "go.mod").read_text().splitlines()
                if x.startswith("go "))
    assert gt.required(gomysql.SOURCE / "go.mod") == gt.version_tuple(line.split()[1])


def fake_go(folder: pathlib.Path, version: str) -> pathlib.Path:
    """A `go` that answers `go env GOVERSION` with ``version``."""
    folder.mkdir(parents=True, exist_ok=True)
    go = folder / "go"
    go.write_text(f"#!/bin/sh\necho {version}\n")
    go.chmod(0o755)
    return go


def test_the_go_on_path_is_used_when_new_enough(tmp_path, monkeypatch):
    go = fake_go(tmp_path / "new", "go1.25.1")
    fake_go(tmp_path / "old", "go1.19.8")
    monkeypatch.setenv("PATH", f"{go.parent}:/usr/bin:/bin")
    assert gt.local_go((1, 25, 0)) == str(go)
    monkeypatch.setenv("PATH", f"{tmp_path / 'old'}:/usr/bin:/bin")
    assert gt.local_go((1, 25, 0)) is None


@pytest.mark.parametrize("goproxy, urls", [
    (None, [gt.DEFAULT_PROXY]), ("https://a.example/,direct", ["https://a.example"]),
    ("https://a.example|https://b.example,off", ["https://a.example", "https://b.example"])])
def test_the_proxies_are_those_goproxy_names(monkeypatch, goproxy, urls):
    if goproxy is None:
        monkeypatch.delenv("GOPROXY", raising=False)
    else:
        monkeypatch.setenv("GOPROXY", goproxy)
    assert gt.proxies() == urls


@pytest.mark.parametrize("goproxy", ["off", "direct"])
def test_no_proxy_to_download_from_is_said(monkeypatch, goproxy):
    monkeypatch.setenv("GOPROXY", goproxy)
    with pytest.raises(gt.NoGo, match=f"GOPROXY={goproxy} names no module proxy"):
        gt.proxies()


def toolchain_zip(version: str) -> bytes:
    """A toolchain module zip in golang.org/toolchain's layout, whose bin/go prints its
    version."""
    out = io.BytesIO()
    prefix = f"golang.org/toolchain@v0.0.1-{version}.{gt.platform_name()}/"
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr(prefix + "bin/go", f"#!/bin/sh\necho {version}\n")
        zf.writestr(prefix + "src/README", "not a Go source tree\n")
    return out.getvalue()


@pytest.fixture
def proxy(tmp_path, monkeypatch):
    """A module proxy on loopback serving the FAKE toolchain zip; its requested paths."""
    data, seen = toolchain_zip(FAKE), []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.path)
            if not self.path.endswith(f"/golang.org/toolchain/@v/v0.0.1-{FAKE}."
                                      f"{gt.platform_name()}.zip"):
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("GOPROXY", f"http://127.0.0.1:{server.server_port}/gp,direct")
    monkeypatch.setattr(gt, "PINNED", FAKE)
    monkeypatch.setattr(gt, "INSTALL_DIR", tmp_path / "build" / "go")
    yield data, seen
    server.shutdown()
    server.server_close()


def test_go_is_downloaded_checked_and_unpacked_once(proxy, monkeypatch):
    data, seen = proxy
    monkeypatch.setattr(gt, "HASHES", {gt.platform_name(): gt.dirhash(data)})
    go = gt.installed_go((1, 25, 0))
    assert go == str(gt.INSTALL_DIR / f"{FAKE}.{gt.platform_name()}" / "bin" / "go")
    assert subprocess.run([go], capture_output=True, text=True).stdout.strip() == FAKE
    assert os.access(go, os.X_OK)
    assert gt.installed_go((1, 25, 0)) == go and len(seen) == 1        # reused
    assert seen == [f"/gp/golang.org/toolchain/@v/v0.0.1-{FAKE}.{gt.platform_name()}.zip"]


def test_a_download_whose_hash_differs_is_refused(proxy, monkeypatch):
    monkeypatch.setattr(gt, "HASHES", {gt.platform_name(): "h1:" + "A" * 43 + "="})
    with pytest.raises(gt.NoGo, match="refusing it"):
        gt.installed_go((1, 25, 0))
    assert not list(gt.INSTALL_DIR.glob("go1*"))


def test_a_pinned_go_older_than_needed_is_not_taken(proxy):
    with pytest.raises(gt.NoGo, match="install one on PATH"):
        gt.installed_go((2, 0, 0))


def test_the_hash_is_gos_h1_of_a_module_zip(gomysql_reading):
    """go-mysql's module zip, which the reader's build left in the module cache, hashes to
    the h1: its go.sum line names."""
    go = gomysql.go_command()
    cache = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True,
                           check=True).stdout.strip()
    line = next(x for x in (gomysql.SOURCE / "go.sum").read_text().splitlines()
                if x.startswith("github.com/go-mysql-org/go-mysql ") and "/go.mod" not in x)
    _, version, h1 = line.split()
    module_zip = pathlib.Path(cache, "cache", "download", "github.com", "go-mysql-org",
                              "go-mysql", "@v", f"{version}.zip")
    assert gt.dirhash(module_zip.read_bytes()) == h1
