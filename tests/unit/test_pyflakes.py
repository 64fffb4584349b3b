"""Names every module uses are defined, and nothing is imported for nothing: ruff's pyflakes
rules (F) and syntax errors (E9) over the whole tree, as ``[tool.ruff]`` in pyproject.toml
configures them. A name a module uses without importing it fails only when that line runs;
this finds it before a test or a user does."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_no_undefined_or_unused_names():
    ruff = pathlib.Path(sys.executable).with_name("ruff")
    done = subprocess.run([str(ruff), "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
