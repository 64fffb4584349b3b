"""The docs' diagrams are drawn from text: each checked-in SVG is what Graphviz makes of its
source today (`make diagrams` regenerates them), and the pages that show them point at them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DIAGRAMS = ROOT / "docs" / "diagrams"
SOURCES = sorted(DIAGRAMS.glob("*.dot"))


def _dot() -> str:
    found = shutil.which("dot")
    if not found:
        pytest.fail("dot is missing: apt-get install graphviz (it draws docs/diagrams/*.svg)")
    return found


def test_there_is_a_diagram():
    assert [s.name for s in SOURCES] == ["architecture.dot"]


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_each_svg_is_up_to_date_with_its_source(source):
    drawn = subprocess.run([_dot(), "-Tsvg", str(source)], capture_output=True, text=True,
                           timeout=60, check=True).stdout
    svg = source.with_suffix(".svg")
    assert svg.is_file(), f"{svg.name} is missing: make diagrams"
    assert svg.read_text(encoding="utf-8") == drawn, f"{svg.name} is older than {source.name}: make diagrams"


def test_the_readme_and_the_design_pages_show_the_architecture():
    for page, ref in ((ROOT / "README.md", "docs/diagrams/architecture.svg"),
                      (ROOT / "docs" / "index.md", "diagrams/architecture.svg"),
                      (ROOT / "docs" / "design.md", "diagrams/architecture.svg")):
        assert f"]({ref})" in page.read_text(encoding="utf-8"), page.name
