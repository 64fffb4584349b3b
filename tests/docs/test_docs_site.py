"""The docs site builds strictly (a warning, a broken link or a missing page fails), lists the
generated references, and renders in headless Chromium; its screenshots are kept in
artifacts/docs/ (home page, configuration and metrics references)."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "docs"
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

import cachesync_nav  # noqa: E402


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q",
                           "-E", "-b", "html", str(ROOT / "docs"), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_strict_build_has_every_page_and_the_generated_references(site):
    for page in ("index", "getting-started", "design", "deployment", "troubleshooting",
                 "upgrading", "performance", "consistency", "faq", "changelog", "operations", "configuration",
                 "security", "failover", "monitoring", "reference/configuration",
                 "reference/cli", "reference/metrics", "reference/performance-figures"):
        assert (site / f"{page}.html").is_file(), page
    config = (site / "reference" / "configuration.html").read_text(encoding="utf-8")
    assert "CACHESYNC_MYSQL_PASSWORD_FILE" in config and "tables.&lt;db.table&gt;.keys" in config
    assert "cachesync consume" in (site / "reference" / "cli.html").read_text(encoding="utf-8")


def test_a_broken_link_fails_the_strict_build(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT / "docs", src, ignore=shutil.ignore_patterns("_build"))
    (src / "faq.md").write_text("# FAQ\n\nSee [nowhere](no-such-page.md).\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q",
                           "-b", "html", str(src), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "no-such-page" in done.stderr


def test_optional_pages_show_once_they_exist(tmp_path):
    index = "```{toctree}\ngetting-started\nedge-cases?\n```\nsee [Edge cases](edge-cases.md).\n"
    optional = cachesync_nav.optional_pages(index)
    assert optional == {"edge-cases"}
    missing = cachesync_nav.rewrite(index, tmp_path, optional)
    assert "edge-cases" not in missing and "see Edge cases." in missing
    (tmp_path / "edge-cases.md").write_text("# Edge cases\n")
    present = cachesync_nav.rewrite(index, tmp_path, optional)
    assert "\nedge-cases\n" in present and "[Edge cases](edge-cases.md)" in present


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail("chromium is not installed: `apt-get install -y chromium` (`make test` does)")
    return found


def _render(page: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", "--window-size=1280,1000", *args,
                           page.as_uri()], capture_output=True, text=True, timeout=120)


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


@pytest.mark.parametrize("page, shot, expected", [
    ("index.html", "home.png", "Getting started"),
    ("reference/configuration.html", "configuration-reference.png", "mysql.ssl_verify_identity"),
    ("reference/metrics.html", "metrics-reference.png", "cachesync_consumer_commit_to_apply_seconds"),
])
def test_pages_render_in_headless_chromium(site, page, shot, expected):
    dom = _render(site / page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert expected in dom.stdout and 'class="sidebar-tree"' in dom.stdout   # Furo's nav rendered
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    target = ARTIFACTS / shot
    target.unlink(missing_ok=True)
    done = _render(site / page, f"--screenshot={target}")
    assert done.returncode == 0 and target.is_file(), done.stderr[-2000:]
    assert _png_size(target) == (1280, 1000) and target.stat().st_size > 20_000
