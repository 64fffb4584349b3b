"""The shared test data folder: binlog files real servers wrote and recorded bytes.

The data belongs to other projects' public test suites (sources in each folder's README or
SOURCES.md), so it is read from where it lies, never copied into this repository. The folder
is ``$CACHESYNC_SHARED``, by default the checkout's ``../shared``. Where it is absent a test
that needs it skips with that reason, except under ``CI=true``, where a missing folder fails
the run: CI always has it.
"""

from __future__ import annotations

import json
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def shared_dir() -> pathlib.Path:
    """The shared folder; skips the calling test (fails it under CI) when it is absent."""
    path = pathlib.Path(os.environ.get("CACHESYNC_SHARED") or ROOT.parent / "shared")
    if not path.is_dir():
        why = (f"the shared test data folder {path} is absent: set CACHESYNC_SHARED "
               "to the folder that holds realbinlog/ and recorded/")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why)
        pytest.skip(why, allow_module_level=True)
    return path


def shared_file(*parts: str) -> pathlib.Path:
    """One file of the shared folder, e.g. ``shared_file("realbinlog", "vector.binlog")``."""
    path = shared_dir().joinpath(*parts)
    if not path.is_file():
        pytest.fail(f"{path} is missing from the shared test data folder")
    return path


def recorded(name: str) -> dict:
    """A recorded JSON file of ``recorded/``, bytes (``{"hex": ...}``) turned back into bytes
    and lists, at any depth, into tuples."""
    return json.loads(shared_file("recorded", name).read_text(), object_hook=_bytes_back)


def _bytes_back(obj: dict):
    if set(obj) == {"hex"}:
        return bytes.fromhex(obj["hex"])
    return {k: _tuples(v) for k, v in obj.items()}


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value
