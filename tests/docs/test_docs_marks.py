"""Every python and shell block of the user docs is either run by a test or says why not; the
user docs carry no issue numbers or development history."""

from __future__ import annotations

import re

import yaml

from cachesync.runtime import config
from tests.docs.snippets import doc_files, snippets


def test_every_pasteable_block_is_run_or_says_why_not():
    unmarked = [s.where for s in snippets() if not s.mark]
    assert not unmarked, f"blocks without a <!-- snippet: ... --> mark: {unmarked}"
    for s in snippets():
        if not s.runnable:
            reason = re.fullmatch(r"not runnable:\s*(\S.{10,})", s.mark)
            assert reason, f"{s.where}: 'not runnable:' needs a reason, got {s.mark!r}"


def test_python_snippets_name_what_they_are_given():
    for s in snippets():
        if s.mark.startswith("run python"):
            assert s.lang in ("python", "py"), s.where


def test_user_docs_carry_no_issue_numbers_or_history():
    pattern = re.compile(r"\bissue #?\d+|\bissues? \d+|before issue|\(#\d+\)", re.I)
    found = [f"{p.name}:{n}" for p in doc_files()
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if pattern.search(line)]
    assert not found, found


def test_readme_is_a_front_door():
    readme = doc_files()[0].read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 250
    assert "make demo" in readme and "make test" in readme


def test_config_examples_load_through_the_config_loader(tmp_path):
    """A YAML block whose top-level keys are config sections is a config: it must load."""
    sections = {*config.SECTIONS, "tables"}
    checked = 0
    for s in snippets(langs={"yaml", "yml"}):
        doc = yaml.safe_load(s.body)
        if isinstance(doc, dict) and doc and set(doc) <= sections and "tables" in doc:
            path = tmp_path / f"{checked}.yaml"
            path.write_text(s.body)
            config.load(path, {})            # raises ConfigError naming the field
            checked += 1
    assert checked >= 1
