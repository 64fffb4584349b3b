"""The configuration reference is generated from the settings declarations: every setting
carries its doc text, and the generated page shows every field with its declared default and
nothing that does not exist (settings are declared once, in cachesync.runtime.config)."""

from __future__ import annotations

import dataclasses
import importlib.util
import pathlib
import re

import pytest

from cachesync.runtime import config
from cachesync.schema import mapping

_EXT = pathlib.Path(__file__).resolve().parents[2] / "docs" / "_ext" / "cachesync_reference.py"
ROW = re.compile(r"^\| `([a-z_]+)\.([a-z_]+)`<br>`([A-Z_]+)` \| ([^|]*) \|", re.M)
TABLE_ROW = re.compile(r"^\| `tables\.<db\.table>\.([a-z_]+)` \|", re.M)


def _reference_module():
    spec = importlib.util.spec_from_file_location("cachesync_reference", _EXT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def page() -> str:
    return _reference_module().configuration_markdown()


def _documented(page: str) -> dict[tuple[str, str], tuple[str, str]]:
    return {(section, name): (env, default.strip())
            for section, name, env, default in ROW.findall(page)}


def _declared() -> dict[tuple[str, str], dataclasses.Field]:
    return {(section, f.name): f for section, cls in config.SECTIONS.items()
            for f in dataclasses.fields(cls)}


def test_every_setting_declares_its_doc_text():
    missing = [f"{s}.{n}" for (s, n), f in _declared().items() if not f.metadata.get("doc")]
    assert not missing, f"settings without doc=...: {missing}"


def test_every_setting_is_documented_and_every_documented_setting_exists(page):
    assert sorted(_documented(page)) == sorted(_declared())


def test_each_row_names_the_environment_variable_the_loader_reads(page, tmp_path):
    missing = str(tmp_path / "absent")
    for (section, name), (env, _) in _documented(page).items():
        # the loader reads <env>_FILE for exactly this field: an unreadable file is named
        problems: list[str] = []
        config._section(section, config.SECTIONS[section], {}, {f"{env}_FILE": missing}, "t",
                        problems, {})
        assert any(f"{env}_FILE: cannot read" in p for p in problems), (env, problems)


def test_documented_defaults_are_the_declared_ones(page):
    for key, (_, cell) in _documented(page).items():
        field = _declared()[key]
        default = field.default
        shown = re.fullmatch(r"`([^`]*)`", cell)
        if field.metadata.get("shown"):      # words chosen in the declaration
            assert cell == field.metadata["shown"], key
        elif shown is None:                  # "empty"
            assert cell == "empty" and default == "", f"{key}: page says {cell!r}, default {default!r}"
        elif isinstance(default, bool):      # YAML spelling: true / false
            assert shown.group(1) == str(default).lower(), key
        elif isinstance(default, (int, float)):
            assert float(shown.group(1)) == default, key
        else:
            assert shown.group(1) == str(default), key


def test_secrets_are_marked_and_kept_out_of_repr(page):
    secrets = {k for k, f in _declared().items() if f.metadata.get("secret")}
    assert {("mysql", "password"), ("kafka", "sasl_password")} <= secrets
    for section, name in secrets:
        assert not _declared()[(section, name)].repr
        row = next(line for line in page.splitlines() if line.startswith(f"| `{section}.{name}`"))
        assert "Secret: never logged" in row


def test_every_table_field_is_documented(page):
    assert sorted(TABLE_ROW.findall(page)) == sorted(mapping._FIELDS)
    assert all(doc for _, doc in mapping.FIELD_DOCS.values())


def test_each_declared_rule_refuses_what_it_should():
    refused = {("consumer", "batch_size"): -5, ("consumer", "claim_lease_s"): float("nan"),
               ("mysql", "port"): 99999, ("kafka", "bootstrap_servers"): "",
               ("consumer", "dedup_store"): "postgres", ("mysql", "state_db"): "x`; DROP",
               ("metrics", "listen"): "h:70000", ("tailer", "pack_bytes"): 10**7}
    for (section, name), value in refused.items():
        rule = _declared()[(section, name)].metadata["rule"]
        assert rule.problem(value), (section, name, value)
