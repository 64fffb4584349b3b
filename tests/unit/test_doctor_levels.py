"""`cachesync doctor`'s exit rule: a NOTE (expected on a new pipeline) exits 0 like a PASS,
so `cachesync doctor && cachesync run` works on a first start; a WARN exits 5, a FAIL 6."""

from __future__ import annotations

import logging

import pytest

from cachesync import doctor
from cachesync.doctor import EXIT_CODES, FAIL, NOTE, PASS, WARN, Check, worst


@pytest.mark.parametrize("levels, expected, code", [
    ([], PASS, 0),
    ([PASS, PASS], PASS, 0),
    ([PASS, NOTE], NOTE, 0),
    ([NOTE, WARN, PASS], WARN, 5),
    ([WARN, NOTE, FAIL], FAIL, 6),
])
def test_the_worst_level_decides_the_exit_code(levels, expected, code):
    level = worst([Check("c", lvl, "detail") for lvl in levels])
    assert level == expected and EXIT_CODES[level] == code


def test_a_note_is_logged_at_info_and_a_warn_as_a_warning(monkeypatch, caplog):
    found = [Check("consumer-group", NOTE, "no group yet"), Check("topic", WARN, "too long", "fix it"),
             Check("redis", PASS, "fine")]
    monkeypatch.setattr(doctor, "run_checks", lambda *a: found)
    with caplog.at_level(logging.INFO, logger="cachesync.doctor"):
        doctor.log_checks(None, "all")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "doctor: NOTE consumer-group: no group yet"),
        (logging.WARNING, "doctor: WARN topic: too long (fix: fix it)")]
