"""cachesync's C accelerator for a cachesync imported from a zip (a Spark executor's py-files).

A zip cannot hold an importable extension module, so the Spark bundle
(``consumer/spark/bundle.py``) carries the driver's own build of ``cachesync._speedups`` as
data, under ``NATIVE_DIR``. When the ``cachesync`` package is imported from such a zip,
:func:`attach` extracts that build once into a directory beside the zip and appends the
directory to the package's path, so ``cachesync._speedups`` is the very build the driver
runs (its functions always match the shipped Python code, whatever else is installed on
the executor). It is used where this Python can load it: the same extension suffix (Python
version, ABI, platform) and a C library it links against. Otherwise -- no build in the zip,
another Python, a directory it cannot write, a failed load -- the pure-Python code runs,
with the same results; ``STATUS`` says which and why (logged once at INFO).

Standard library only: it runs while ``cachesync`` itself is being imported.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import logging
import os
import tempfile
import zipfile
from pathlib import Path

log = logging.getLogger(__name__)

NATIVE_DIR = "cachesync.native"      # in the zip: not a package name zipimport would look in
MODULE = "_speedups"
NOT_ZIPPED = "not imported from a zip"
STATUS = NOT_ZIPPED                  # what attach() found, for the Spark driver's log


def attach(package_path: list[str], archive: str) -> None:
    """Make ``cachesync._speedups`` importable from the build the zip ``archive`` carries;
    ``package_path`` is the ``cachesync`` package's ``__path__`` (appended to). Never raises
    for a build it cannot use: sets STATUS and leaves the pure-Python code in use."""
    global STATUS
    try:
        STATUS = _attach(package_path, archive)
    except (OSError, zipfile.BadZipFile) as e:
        STATUS = f"pure Python: could not extract the zip's compiled build ({e})"
    log.info("cachesync from %s: %s", archive, STATUS)


def _attach(package_path: list[str], archive: str) -> str:
    with zipfile.ZipFile(archive) as zf:
        names = set(zf.namelist())
        member = next((f"{NATIVE_DIR}/{MODULE}{suffix}"
                       for suffix in importlib.machinery.EXTENSION_SUFFIXES
                       if f"{NATIVE_DIR}/{MODULE}{suffix}" in names), None)
        if member is None:
            return ("pure Python: the zip carries no compiled build this Python can load "
                    f"(it loads {', '.join(importlib.machinery.EXTENSION_SUFFIXES)})")
        target = Path(f"{archive}.native")
        _extract(zf, member, target)
    package_path.append(str(target))
    try:
        importlib.import_module(f"cachesync.{MODULE}")
    except ImportError as e:
        package_path.remove(str(target))
        return f"pure Python: the zip's compiled build does not load here ({e})"
    return f"compiled: {Path(member).name}"


def _extract(zf: zipfile.ZipFile, member: str, target: Path) -> None:
    """``member`` as ``target/<its name>``, written whole or not at all (several Python
    workers of one executor may extract at once; the zip's name is its content's digest,
    so a file already there is this build)."""
    path = target / Path(member).name
    if path.exists():
        return
    target.mkdir(exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=target, prefix=".partial-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(zf.read(member))
        os.replace(partial, path)
    except BaseException:
        os.unlink(partial)
        raise


def accelerator() -> str:
    """Which code decodes and keys events in this process, and why: STATUS for a cachesync
    imported from a zip, else whether the installed cachesync has its compiled part."""
    if STATUS != NOT_ZIPPED:
        return STATUS
    try:
        importlib.import_module(f"cachesync.{MODULE}")
    except ImportError:
        return "pure Python: cachesync is installed without its compiled part"
    return "compiled: installed"
