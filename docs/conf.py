"""Sphinx configuration: MyST Markdown pages, the Furo theme, reference pages generated from
the code (``_ext/cachesync_reference.py``) and a nav that lists pages other work adds
(``_ext/cachesync_nav.py``). Build: ``make docs`` (strict: any warning fails)."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "_ext"), str(HERE.parent)]

from cachesync import __version__  # noqa: E402

project = "cachesync"
author = "cachesync contributors"
copyright = "cachesync contributors"
version = release = __version__

extensions = ["myst_parser", "cachesync_reference", "cachesync_nav"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]
# a link to a page or anchor that does not exist is a warning, and the strict build fails on it
nitpicky = True
suppress_warnings: list[str] = []

html_theme = "furo"
html_title = f"cachesync {release}"
html_static_path: list[str] = []
html_theme_options = {"source_edit_link": None, "navigation_with_keys": True}
html_show_sourcelink = False
