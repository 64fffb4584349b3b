"""The README's configuration table says what the settings classes declare: every field, its
default, and nothing that does not exist (settings are declared once, in cachesync.config)."""

from __future__ import annotations

import dataclasses
import pathlib
import re

from cachesync import config
from cachesync.schema import mapping

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
ROW = re.compile(r"^\| `([a-z_]+)\.([a-z_]+)` \| ([^|]*) \|", re.M)
TABLE_ROW = re.compile(r"^\| `tables\.<db\.table>\.([a-z_]+)` \|", re.M)


def _reference() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("## Configuration reference")
    return text[start:text.index("\n## ", start + 1)]


def _documented() -> dict[tuple[str, str], str]:
    return {(section, name): default.strip() for section, name, default in ROW.findall(_reference())}


def _declared() -> dict[tuple[str, str], dataclasses.Field]:
    return {(section, f.name): f for section, cls in config._SECTIONS.items()
            for f in dataclasses.fields(cls)}


def test_every_setting_is_documented_and_every_documented_setting_exists():
    assert sorted(_documented()) == sorted(_declared())


def test_documented_defaults_are_the_declared_ones():
    for key, cell in _documented().items():
        default = _declared()[key].default
        shown = re.match(r"`([^`]*)`", cell)
        if shown is None:           # prose ("empty", "group id", "required by relay")
            assert default == "", f"{key}: README says {cell!r}, the default is {default!r}"
        elif isinstance(default, bool):     # YAML spelling: true / false
            assert shown.group(1) == str(default).lower(), key
        elif isinstance(default, (int, float)):
            assert float(shown.group(1)) == default, key
        else:
            assert shown.group(1) == str(default), key


def test_every_table_field_is_documented():
    assert sorted(TABLE_ROW.findall(_reference())) == sorted(mapping._FIELDS)


def test_each_declared_rule_refuses_what_it_should():
    refused = {("consumer", "batch_size"): -5, ("consumer", "claim_lease_s"): float("nan"),
               ("mysql", "port"): 99999, ("kafka", "bootstrap_servers"): "",
               ("consumer", "dedup_store"): "postgres", ("mysql", "state_db"): "x`; DROP",
               ("metrics", "listen"): "h:70000", ("tailer", "pack_bytes"): 10**7}
    for (section, name), value in refused.items():
        rule = _declared()[(section, name)].metadata["rule"]
        assert rule.problem(value), (section, name, value)
