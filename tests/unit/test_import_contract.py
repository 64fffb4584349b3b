"""The import contract of pyproject.toml ([tool.importlinter]), checked by import-linter.

The repository's folders install as subpackages of ``cachesync`` (pyproject's package-dir), which
import-linter cannot see from a checkout: the test lays the sources out as they install, in a
temporary directory, and runs ``lint-imports`` there.
"""

import os
import pathlib
import shutil
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
FOLDERS = {"schema": "schema", "consumer": "consumer", "producer_outbox": "producer_outbox"}
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def _installed_layout(into: pathlib.Path) -> pathlib.Path:
    """``into/cachesync`` with the folders as its subpackages (sources only)."""
    sources = shutil.ignore_patterns("__pycache__", "*.so", "*.c", "*.pyc")

    def package_sources(directory, names):      # and never the folders themselves, if linked in
        top = set(FOLDERS) if pathlib.Path(directory) == ROOT / "cachesync" else set()
        return sources(directory, names) | (top & set(names))
    shutil.copytree(ROOT / "cachesync", into / "cachesync", ignore=package_sources)
    for name, folder in FOLDERS.items():
        shutil.copytree(ROOT / folder, into / "cachesync" / name, ignore=sources)
    return into


def test_the_import_contract_holds(tmp_path):
    layout = _installed_layout(tmp_path)
    lint = pathlib.Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(layout)}
    done = subprocess.run([str(lint), str(ROOT / "pyproject.toml"), "--no-cache", "--no-logo"],
                          cwd=layout, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "BROKEN" not in done.stdout and "KEPT" in done.stdout


def test_every_application_module_is_in_the_contract():
    """A module added at the top of cachesync/ is application (forbidden to the layers below)
    unless it goes into cachesync/runtime/: the contract's list must not fall behind."""
    [application] = [c for c in CONFIG["contracts"]
                     if c["name"] == "Nothing below the application imports it"]
    found = {f"cachesync.{p.stem if p.is_file() else p.name}"
             for p in (ROOT / "cachesync").iterdir()
             if (p.suffix == ".py" and p.stem != "__init__")
             or (p.is_dir() and (p / "__init__.py").exists()
                 and p.name not in ("runtime", *FOLDERS))}
    assert found == set(application["forbidden_modules"])
