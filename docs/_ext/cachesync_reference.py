"""The reference pages, generated from the code's own declarations so they cannot drift.

* configuration: the settings dataclasses of ``cachesync.config`` (each field's ``doc``,
  default, secret flag) and the table-entry fields of ``cachesync.schema.mapping``;
* CLI: the click commands of ``cachesync.cli``;
* metrics: the metric families the sidecar's registries expose.

Each ``*_markdown()`` function is pure (it imports the package, reads nothing else) and is
tested in tests/unit. As a Sphinx extension, the module writes the pages into
``docs/reference/`` when a build starts (they are not committed).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

CONFIG_INTRO = """\
# Configuration reference

Settings come from the YAML file given with `--config` (or `CACHESYNC_CONFIG`) and from
environment variables `CACHESYNC_<SECTION>_<FIELD>`, which win. `CACHESYNC_<SECTION>_<FIELD>_FILE`
reads the value from a file (Docker and Kubernetes secrets). `--env-file` loads a `KEY=VALUE`
file first (variables already set win). Every value is checked when the settings load (types,
ranges, finite numbers, ports, non-empty lists, identifiers) and every error names the field;
secrets never appear in logs.

This page is generated from the settings declarations in `cachesync/config.py`.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def default_text(f: dataclasses.Field) -> str:
    """How the reference shows a field's default: `literal`, or words for empty / computed."""
    shown = f.metadata.get("shown")
    if shown:
        return shown
    value = f.default
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if value == "":
        return "empty"
    return f"`{value}`"


def configuration_markdown() -> str:
    """The configuration reference page (Markdown)."""
    from cachesync import config
    from cachesync.schema import mapping

    out = [CONFIG_INTRO]
    for section, cls in config._SECTIONS.items():
        out += [f"\n## `{section}`\n", "| setting | default | meaning |", "|---|---|---|"]
        for f in dataclasses.fields(cls):
            env = f"{config.ENV_PREFIX}{section.upper()}_{f.name.upper()}"
            doc = f.metadata.get("doc", "")
            if f.metadata.get("secret"):
                doc += f". Secret: never logged; `{env}_FILE` reads it from a file"
            out.append(f"| `{section}.{f.name}`<br>`{env}` | {_cell(default_text(f))} "
                       f"| {_cell(doc)} |")
    out += ["\n## `tables`\n",
            "One entry per mapped table, `tables: {<db.table>: {...}}` (no environment "
            "variables).\n", "| field | default | meaning |", "|---|---|---|"]
    for name, (default, doc) in mapping.FIELD_DOCS.items():
        out.append(f"| `tables.<db.table>.{name}` | {_cell(default)} | {_cell(doc)} |")
    return "\n".join(out) + "\n"


PAGES = {"configuration.md": configuration_markdown}


def write_pages(target: Path) -> list[Path]:
    """Writes every generated page into ``target`` (only when its text changed)."""
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in PAGES.items():
        path, text = target / name, make()
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def _on_builder_inited(app) -> None:
    write_pages(Path(app.srcdir) / "reference")


def setup(app):
    app.connect("builder-inited", _on_builder_inited)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":      # python docs/_ext/cachesync_reference.py: write the pages
    for page in write_pages(Path(__file__).resolve().parents[1] / "reference"):
        print(page)
