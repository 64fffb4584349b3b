"""Pages that may not exist yet: listed in the nav, shown once they do.

A toctree entry ending in ``?`` (``edge-cases?``) is kept, without the ``?``, when the page
exists, and dropped when it does not; a Markdown link to such a page (``[x](edge-cases.md)``)
becomes its plain text while the page is missing. So the site lists the pages other work adds
as soon as they are merged, and the strict build never fails on a page not written yet.
"""

from __future__ import annotations

import re
from pathlib import Path

_OPTIONAL_ENTRY = re.compile(r"^([A-Za-z0-9_/.-]+)\?$", re.M)


def optional_pages(text: str) -> set[str]:
    return set(_OPTIONAL_ENTRY.findall(text))


def rewrite(text: str, srcdir: Path, optional: set[str]) -> str:
    """``text`` with optional entries resolved against the files in ``srcdir``."""
    def entry(m: re.Match) -> str:
        return m.group(1) if (srcdir / f"{m.group(1)}.md").exists() else ""

    def link(m: re.Match) -> str:
        return m.group(0) if (srcdir / f"{m.group(2)}.md").exists() else m.group(1)

    text = _OPTIONAL_ENTRY.sub(entry, text)
    if optional:
        names = "|".join(re.escape(n) for n in sorted(optional))
        text = re.sub(rf"\[([^\]]+)\]\((?:\./)?({names})\.md(?:#[^)]*)?\)", link, text)
    return text


def _on_source_read(app, docname: str, source: list[str]) -> None:
    srcdir = Path(app.srcdir)
    optional = optional_pages((srcdir / "index.md").read_text(encoding="utf-8"))
    source[0] = rewrite(source[0], srcdir, optional)


def setup(app):
    app.connect("source-read", _on_source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
