"""The code blocks of the user docs (README.md, docs/*.md) a user would paste, with their marks.

A python or shell block must be preceded by one of
``<!-- snippet: run python, given NAME (what it is), ... -->``, ``<!-- snippet: run sh -->``
or ``<!-- snippet: not runnable: REASON -->``; the tests run the first two kinds against the
devstack and require a reason for the third.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PASTEABLE = {"python", "py", "sh", "bash", "shell", "console"}
_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[A-Za-z0-9_+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```",
                    re.M | re.S)
_MARK = re.compile(r"<!--\s*snippet:\s*(?P<mark>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Snippet:
    path: Path
    line: int
    lang: str
    body: str
    mark: str          # the text after "snippet:", or "" when the block has none

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def runnable(self) -> bool:
        return self.mark.startswith("run ")

    @property
    def given(self) -> list[str]:
        """The names a python snippet expects to exist (``given a (...), b (...)``)."""
        m = re.search(r"given (.*)$", self.mark)
        return re.findall(r"(?:^|,\s*)([A-Za-z_]\w*)", re.sub(r"\([^)]*\)", "", m.group(1))) if m else []


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def snippets(paths: list[Path] | None = None, langs: set[str] = PASTEABLE) -> list[Snippet]:
    out = []
    for path in paths or doc_files():
        text = path.read_text(encoding="utf-8")
        for m in _FENCE.finditer(text):
            lang = m.group("lang").lower()
            if lang not in langs:
                continue
            before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            mark = _MARK.search(before)
            body = "\n".join(line[len(m.group("indent")):] for line in m.group("body").splitlines())
            out.append(Snippet(path, text.count("\n", 0, m.start()) + 1, lang, body,
                               mark.group("mark") if mark else ""))
    return out
