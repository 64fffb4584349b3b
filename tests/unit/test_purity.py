"""schema/, consumer/core and every module that calls itself pure import no I/O library (docs/design.md, "Layout and purity")."""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FORBIDDEN = {"pymysql", "redis", "kafka", "pyspark", "pymysqlreplication", "socket",
             "requests", "urllib", "http", "subprocess", "sqlalchemy"}
PURE_PACKAGES = ["schema", "consumer/core"]
# modules outside those packages whose docstring says they are pure (or import no I/O)
PURE_MODULES = ["cachesync/explain.py", "cachesync/runtime/grants.py", "consumer/audit.py", "consumer/consistency.py",
                "producer_outbox/unlogged_changes/altercolumns.py", "producer_outbox/binlog/settings.py",
                "producer_outbox/binlog/checksums.py", "producer_outbox/binlog/packets.py",
                "producer_outbox/binlog/compressed.py", "producer_outbox/binlog/tablemaps.py",
                "producer_outbox/binlog/eventtypes.py", "producer_outbox/unlogged_changes/foreignkeys.py",
                "producer_outbox/decode/images.py",
                "producer_outbox/publish/inflight.py", "producer_outbox/memory.py",
                "producer_outbox/decode/mysqljson.py",
                "producer_outbox/decode/outbox_binlog.py", "producer_outbox/encode/packing.py",
                "producer_outbox/ports.py",
                "producer_outbox/decode/rows.py", "producer_outbox/binlog/serverversion.py",
                "producer_outbox/binlog/statements.py",
                "producer_outbox/unlogged_changes/risks.py", "producer_outbox/decode/versioning.py",
                "producer_outbox/binlog/xa.py"]
# docstrings that use the word without claiming it for the module
NOT_A_CLAIM = {"consumer/__init__.py",    # "pure core, adapters, engines": the package's parts
               "consumer/spark/bundle.py", "consumer/spark/submit.py",   # "pure-Python libraries"
               "cachesync/runtime/zipnative.py"}      # "the pure-Python code runs" (vs the C accelerator)
CLAIM = re.compile(r"\bpure\b|no I/O", re.IGNORECASE)


def _imports(path: pathlib.Path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


@pytest.mark.parametrize("package", PURE_PACKAGES)
def test_pure_packages_import_no_io_library(package):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package} has no modules"
    offenders = [(str(f.relative_to(ROOT)), name) for f in files for name in _imports(f)
                 if name.split(".")[0] in FORBIDDEN]
    assert offenders == []


def test_the_guard_would_catch_an_io_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import redis\nfrom kafka import KafkaProducer\n")
    assert [n for n in _imports(bad) if n.split(".")[0] in FORBIDDEN] == ["redis", "kafka"]


@pytest.mark.parametrize("module", PURE_MODULES)
def test_modules_that_call_themselves_pure_import_no_io_library(module):
    offenders = [name for name in _imports(ROOT / module) if name.split(".")[0] in FORBIDDEN]
    assert offenders == []


def test_every_module_claiming_purity_is_checked():
    covered = {str(f.relative_to(ROOT)) for p in PURE_PACKAGES for f in (ROOT / p).rglob("*.py")}
    covered |= set(PURE_MODULES) | NOT_A_CLAIM
    claims = set()
    for top in ("schema", "consumer", "producer_outbox", "cachesync"):
        for f in (ROOT / top).rglob("*.py"):
            doc = ast.get_docstring(ast.parse(f.read_text(encoding="utf-8"))) or ""
            if CLAIM.search(doc):
                claims.add(str(f.relative_to(ROOT)))
    assert claims - covered == set()
