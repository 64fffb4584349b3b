"""The zip that ships cachesync to Spark executors (``--py-files`` / ``SparkContext.addPyFile``).

Executors on a cluster do not have cachesync installed, so the driver ships it: the
``cachesync`` package (its subpackages come from the repository's top-level folders, as
the wheel installs them) plus the pure-Python part of every library the tasks import.
Compiled modules cannot be imported from a zip; they are left out, and the optional ones
(hiredis, orjson, crc32c) fall back to pure Python on executors that lack them. The one
exception is cachesync's own C accelerator: the driver's build goes in as data
(``cachesync.native/``), and an executor whose Python can load it uses it
(``cachesync/runtime/zipnative.py``), so driver and executors run the same compiled code.
The zip is built from the driver's own installation, so driver and executors always run
the same code; it is cached by content under ``directory``.

Every module goes in with its bytecode beside it (``name.pyc``, which zipimport loads
without compiling): a Python worker that compiled cachesync and its libraries from the
zip's sources spent seconds on it before its first record. The bytecode is the driver's
Python version's; an executor on another version finds a foreign magic number and
compiles the source.

On the executors, :func:`keep_zip_directories` stops every Spark task from re-reading the
directories of the zips on the Python path (see there).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import marshal
import sys
import uuid
import zipfile
import zipimport
from pathlib import Path
from typing import Iterator

log = logging.getLogger(__name__)

# The packages the Spark tasks import (consume, replay, audit, snapshot): cachesync's own and
# the pure-Python libraries of its sidecar dependencies.
PACKAGES = ("cachesync", "cachesync.schema", "cachesync.consumer", "cachesync.producer_outbox",
            "redis", "kafka", "pymysql", "pymysqlreplication", "packaging", "yaml", "click",
            "prometheus_client")
# Shipped when installed: what an executor's Python may need that the driver's does not
# (redis-py wants async_timeout below Python 3.11.3); the ``spark`` extra installs it.
OPTIONAL = ("async_timeout",)
COMPILED = (".so", ".pyd", ".dylib")


def package_files(name: str) -> Iterator[tuple[Path, str]]:
    """``(file, name in the zip)`` for every source file of package ``name``; raises
    ModuleNotFoundError when it is not installed."""
    spec = importlib.util.find_spec(name)
    if spec is not None and spec.origin and not spec.submodule_search_locations:
        yield Path(spec.origin), Path(spec.origin).name          # a single-module library
        return
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"cannot ship {name} to the executors: not installed", name=name)
    root = Path(next(iter(spec.submodule_search_locations)))
    prefix = name.replace(".", "/")
    for path in sorted(root.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        relative = path.relative_to(root)
        # a subpackage shipped on its own (cachesync.schema lives in schema/, not cachesync/)
        if name == "cachesync" and relative.parts[0] in ("schema", "consumer", "producer_outbox"):
            continue
        if path.name.endswith(COMPILED):
            continue
        yield path, f"{prefix}/{relative.as_posix()}"


def native_files() -> list[tuple[Path, str]]:
    """The driver's build of ``cachesync._speedups`` as ``(file, name in the zip)``, for
    cachesync.runtime.zipnative to load on the executors; none when the driver runs without it."""
    from cachesync.runtime.zipnative import MODULE, NATIVE_DIR
    try:
        spec = importlib.util.find_spec(f"cachesync.{MODULE}")
    except ImportError:
        spec = None
    if spec is None or not spec.origin or not spec.origin.endswith(COMPILED):
        return []
    return [(Path(spec.origin), f"{NATIVE_DIR}/{Path(spec.origin).name}")]


def build_bundle(directory: Path, packages: tuple[str, ...] = PACKAGES) -> Path:
    """Write (or reuse) ``cachesync-<digest>.zip`` in ``directory``; returns its path."""
    wanted = [*packages, *(n for n in OPTIONAL if importlib.util.find_spec(n) is not None)]
    files = [pair for name in wanted for pair in package_files(name)] + native_files()
    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER)
    for path, arcname in files:
        digest.update(arcname.encode() + b"\0" + path.read_bytes())
    target = Path(directory) / f"cachesync-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # a partial file of this call's own: drivers on one host may build the same bundle at once
    partial = target.with_suffix(f".zip.{uuid.uuid4().hex}.tmp")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, arcname in files:
            zf.write(path, arcname)
            if arcname.endswith(".py"):
                _write_bytecode(zf, path, arcname)
    partial.replace(target)
    log.info("built %s (%d files) for the Spark executors", target, len(files))
    return target


def _write_bytecode(zf: zipfile.ZipFile, source: Path, arcname: str) -> None:
    """``arcname``'s bytecode as ``<name>.pyc`` beside it, in the unchecked-hash form of
    PEP 552 (magic, flags 0b01, the source's hash, the marshalled code): the zip is
    content-addressed, its name changes with any source. A module this Python cannot
    compile is shipped as source only."""
    text = source.read_bytes()
    try:
        code = compile(text, arcname, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        log.debug("no bytecode for %s in the Spark zip: %s", arcname, e)
        return
    header = importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4, "little")
    zf.writestr(arcname[:-3] + ".pyc", header + importlib.util.source_hash(text) + marshal.dumps(code))


class _UnchangingZip(zipimport.zipimporter):
    """A zipimporter whose ``invalidate_caches`` keeps the directory it read: the archives
    on an executor's path do not change while it runs (Spark never replaces a shipped file
    with other content; the bundle's name is the digest of its content)."""

    def invalidate_caches(self):
        pass


def _unchanging_zip_hook(path: str):
    return _UnchangingZip(path)          # raises ZipImportError (an ImportError) if no zip


def keep_zip_directories() -> None:
    """In a Spark Python worker: read each zip archive's directory once, not once per task.

    PySpark's worker calls ``importlib.invalidate_caches()`` at the start of every task (to
    see py-files added since), and a zipimporter answers by re-reading its archive's whole
    directory: one zipimporter per package imported from a zip, on PySpark's own
    ``pyspark.zip``, the py4j zip and the spark-core jar (Spark puts them on the workers'
    PYTHONPATH) and on this bundle. Measured on the devstack's executor: 16 archives
    re-read, 0.15 s of CPU per task (over a second of wall time on a loaded 2-core host),
    for a task whose own work took 50 ms. A py-file added later still gets its importer
    from the path hook. Idempotent; call it at the start of a task (the worker's later
    tasks gain).
    """
    if _unchanging_zip_hook not in sys.path_hooks:
        hooks = sys.path_hooks
        at = hooks.index(zipimport.zipimporter) if zipimport.zipimporter in hooks else 0
        hooks.insert(at, _unchanging_zip_hook)
    for path, finder in list(sys.path_importer_cache.items()):
        if type(finder) is zipimport.zipimporter:
            sys.path_importer_cache[path] = _UnchangingZip(path)
