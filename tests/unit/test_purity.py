"""schema/ and consumer/core must stay pure: no I/O library imports (DESIGN.md)."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FORBIDDEN = {"pymysql", "redis", "kafka", "pyspark", "pymysqlreplication", "socket",
             "requests", "urllib", "http", "subprocess", "sqlalchemy"}
PURE_PACKAGES = ["schema", "consumer/core"]


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
