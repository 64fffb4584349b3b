"""Pure parts of running on a Spark cluster: the spark-submit command line, the trigger
setting, the zip shipped to executors, the plans the driver's hooks get, and the snapshot's
fenced writes at a watermark."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from cachesync.runtime.config import MonitorSettings
from cachesync.consumer.core.plan import plan_batch
from cachesync.consumer.snapshot import Watermark, check_tombstone_window, snapshot_writes
from cachesync.consumer.spark.applier import driver_plans
from cachesync.consumer.spark.bundle import build_bundle, native_files
from cachesync.consumer.spark.stream import AVAILABLE_NOW, StreamOptions, parse_trigger
from cachesync.consumer.spark.submit import SubmitPlan, ship_config, submit_argv
from cachesync.producer_outbox.decode.rows import TxnContext, row_change
from cachesync.schema.errors import ConfigError, FatalError
from cachesync.schema.ids import binlog_version
from cachesync.schema.mapping import parse_mappings


@pytest.mark.parametrize("text, expected", [
    ("availableNow", AVAILABLE_NOW), ("AVAILABLENOW", AVAILABLE_NOW), ("500ms", 0.5),
    ("2s", 2.0), ("0", 0.0), ("1.5", 1.5),
])
def test_trigger_forms(text, expected):
    assert parse_trigger(text) == expected


@pytest.mark.parametrize("text", ["soon", "-1s", "3601s", ""])
def test_bad_triggers_name_the_accepted_forms(text):
    with pytest.raises(ValueError, match="availableNow"):
        parse_trigger(text)


def test_trigger_kwargs():
    assert StreamOptions("ck", trigger=AVAILABLE_NOW).trigger_kwargs() == {"availableNow": True}
    assert StreamOptions("ck", trigger=0.5).trigger_kwargs() == {"processingTime": "0.5 seconds"}


def plan(**kw) -> SubmitPlan:
    return SubmitPlan(**{"master": "spark://m:7077", "job_args": ("consume", "--engine", "spark"),
                         "main": Path("/x/spark_main.py"), "bundle": Path("/b/cs.zip"),
                         "jars": ("/j/a.jar", "/j/b.jar"), "driver_python": "/venv/bin/python",
                         **kw})


def test_submit_ships_the_zip_the_jars_and_the_executors_own_python():
    argv = submit_argv(plan(conf=(("spark.executor.cores", "2"),)), "/s/spark-submit")
    assert argv[:7] == ["/s/spark-submit", "--master", "spark://m:7077", "--deploy-mode",
                        "client", "--name", "cachesync"]
    assert argv[argv.index("--py-files") + 1] == "/b/cs.zip"
    assert argv[argv.index("--jars") + 1] == "/j/a.jar,/j/b.jar"
    confs = [argv[i + 1] for i, a in enumerate(argv) if a == "--conf"]
    assert confs == ["spark.pyspark.python=python3", "spark.pyspark.driver.python=/venv/bin/python",
                     "spark.executor.cores=2"]
    assert argv[-4:] == ["/x/spark_main.py", "consume", "--engine", "spark"]


def test_cluster_mode_ships_the_config_and_has_no_driver_python():
    args, files = ship_config(("consume", "--config", "/etc/cs/c.yaml", "--x"), "cluster")
    assert args == ("consume", "--config", "c.yaml", "--x") and files == ("/etc/cs/c.yaml",)
    assert ship_config(("consume", "--config=/a/b.yaml"), "cluster") == \
        (("consume", "--config=b.yaml"), ("/a/b.yaml",))
    assert ship_config(("consume", "--config", "/a.yaml"), "client") == \
        (("consume", "--config", "/a.yaml"), ())
    argv = submit_argv(plan(deploy_mode="cluster", files=files))
    assert "spark.pyspark.driver.python=/venv/bin/python" not in argv
    assert argv[argv.index("--files") + 1] == "/etc/cs/c.yaml"


@pytest.mark.parametrize("key, value", [
    ("spark.kafka.sasl.password", "x"), ("spark.executorEnv.REDIS_TOKEN", "x"),
    ("spark.x", "org.apache.kafka.common.security.scram.ScramLoginModule required password=1"),
    ("spark.hadoop.fs.s3a.access.key", "AKIA"), ("spark.yarn.appMasterEnv.CACHESYNC_X_SECRET", "y"),
])
def test_a_secret_like_conf_is_refused(key, value):
    with pytest.raises(ConfigError, match="secret"):
        submit_argv(plan(conf=((key, value),)))
    with pytest.raises(ConfigError, match="deploy mode"):
        submit_argv(plan(deploy_mode="both"))


def test_the_bundle_holds_cachesync_and_its_pure_libraries_and_is_reused(tmp_path):
    first = build_bundle(tmp_path)
    assert build_bundle(tmp_path) == first
    names = set(zipfile.ZipFile(first).namelist())
    for module in ("cachesync/wiring.py", "cachesync/schema/lua/fenced_write.lua",
                   "cachesync/consumer/spark/applier.py", "cachesync/producer_outbox/tailer.py",
                   "redis/__init__.py", "kafka/__init__.py", "pymysql/__init__.py"):
        assert module in names, module
    # compiled modules only as the C accelerator's data (cachesync.runtime.zipnative), never importable
    assert [n for n in names if n.endswith(".so")] == [n for name, n in native_files()]
    assert not [n for n in names if n.startswith("cachesync/schema/") and "/schema/schema" in n]


# What a Spark executor's Python worker does: import cachesync from the bundle alone
# (-S: without this environment's installed cachesync, as on an executor).
_NATIVE_SCRIPT = """
import sys
sys.path.insert(1, sys.argv[1])
import cachesync, cachesync.runtime.zipnative as native
from cachesync.schema import event, partition
from cachesync.consumer.core import plan
print(cachesync.__file__.startswith(sys.argv[1]), event.ACCELERATED, partition.ACCELERATED,
      plan._compiled_keys is not None)
print(native.accelerator())
"""


def _in_worker(bundle) -> list[str]:
    import subprocess
    import sys
    import os
    env = {k: v for k, v in os.environ.items() if k != "CACHESYNC_NO_SPEEDUPS"}   # the build in use
    return subprocess.run([sys.executable, "-I", "-S", "-c", _NATIVE_SCRIPT, str(bundle)],
                          capture_output=True, text=True, check=True, env=env,
                          cwd=bundle.parent).stdout.splitlines()


def test_an_executor_loads_the_drivers_compiled_build_from_the_bundle(tmp_path):
    native = native_files()
    flags, status = _in_worker(build_bundle(tmp_path))
    if not native:          # cachesync installed without a C compiler: nothing to ship
        assert flags == "True False False False" and status.startswith("pure Python")
        return
    assert flags == "True True True True"
    assert status == f"compiled: {native[0][0].name}"
    assert (tmp_path / f"{build_bundle(tmp_path).name}.native" / native[0][0].name).is_file()


def test_an_executor_without_a_loadable_build_runs_pure_python(tmp_path, monkeypatch):
    import cachesync.consumer.spark.bundle as bundle
    from cachesync.runtime.zipnative import NATIVE_DIR
    # a build for another Python (its suffix is not one this Python loads)
    other = tmp_path / "_speedups.cpython-39-other.so"
    other.write_bytes(b"not loadable here")
    monkeypatch.setattr(bundle, "native_files", lambda: [(other, f"{NATIVE_DIR}/{other.name}")])
    (tmp_path / "zip").mkdir()
    flags, status = _in_worker(build_bundle(tmp_path / "zip"))
    assert flags == "True False False False"
    assert status.startswith("pure Python: the zip carries no compiled build this Python can load")


def test_the_bundle_ships_bytecode_that_zipimport_loads_without_the_source_check(tmp_path):
    import importlib.util
    import zipimport
    bundle = build_bundle(tmp_path)
    with zipfile.ZipFile(bundle) as zf:
        names = set(zf.namelist())
        sources = [n for n in names if n.endswith(".py")]
        assert sources and all(n[:-3] + ".pyc" in names for n in sources)
        header = zf.read("cachesync/wiring.pyc")[:8]
    # this Python's magic number; flags 0b01: hash-based, not checked against the source
    # (the zip's name is the digest of every source, and of this magic number)
    assert header[:4] == importlib.util.MAGIC_NUMBER
    assert int.from_bytes(header[4:8], "little") == 0b01
    importer = zipimport.zipimporter(str(bundle) + "/cachesync")
    assert importer.get_code("wiring").co_filename == "cachesync/wiring.py"


# Run in a fresh interpreter: what a Spark Python worker does with the bundle on sys.path
# (import from it, then PySpark's importlib.invalidate_caches() before every task).
_WORKER_SCRIPT = """
import importlib, sys, zipimport
sys.path.insert(1, sys.argv[1])
import cachesync.wiring, redis.client, kafka.consumer
read = []
real = zipimport._read_directory
zipimport._read_directory = lambda archive: read.append(archive) or real(archive)
importlib.invalidate_caches()
before = len(read)
from cachesync.consumer.spark.bundle import keep_zip_directories
keep_zip_directories(); keep_zip_directories()
read.clear()
importlib.invalidate_caches()
import pymysql.connections          # a package first imported after: the hook's importer
importlib.invalidate_caches()
print(before, len(read), cachesync.wiring.__file__.startswith(sys.argv[1]))
"""


def test_a_worker_reads_each_zips_directory_once_not_once_per_task(tmp_path):
    import subprocess
    import sys
    bundle = build_bundle(tmp_path)
    out = subprocess.run([sys.executable, "-I", "-c", _WORKER_SCRIPT, str(bundle)],
                         capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    before, after, from_zip = out.split()
    # one re-read of the whole directory per package imported from the zip, then none
    assert int(before) >= 5 and int(after) == 0 and from_zip == "True"


MAPPINGS = parse_mappings({"app.users": {"keys": ["user:{id}", "user:email:{email}"],
                                         "double_delete": 1.0},
                           "app.items": {"keys": ["item:{id}"], "mode": "update"}})


def event(table: str, n: int, op: str = "update"):
    ctx = TxnContext("s", f"0-1-{n}", n, 0.0)
    row = {"id": n, "email": f"{n}@x"}
    return row_change(ctx, 0, "app", table, op, "id", row if op != "insert" else None, row)


def test_the_driver_gets_every_double_delete_plan_and_the_monitors_sample():
    plans = plan_batch([event("users", 1), event("items", 2), event("items", 3)], MAPPINGS).events
    off = MonitorSettings(enabled=False)
    assert [p.event.table for p in driver_plans(plans, off)] == ["users"]
    every = MonitorSettings(sample_ratio=1.0)
    assert len(driver_plans(plans, every)) == 3
    assert driver_plans(plans, MonitorSettings(sample_ratio=0.0)) == driver_plans(plans, off)


def test_snapshot_writes_carry_the_watermark_version_and_the_consumers_values():
    wm = Watermark("0-1-41", 41, 1000.0)
    assert wm.version == binlog_version(41, (1 << 24) - 1)
    assert binlog_version(41, 0) < wm.version < binlog_version(42, 0)   # older than the stream
    items = MAPPINGS.tables["app.items"]
    writes, summary = snapshot_writes([{"id": 7, "name": "n"}, {"id": 8, "name": "m"}], items,
                                      ("id",), wm)
    assert [w.key for w in writes] == ["item:7", "item:8"]
    assert {int(w.version) for w in writes} == {wm.version}
    streamed = plan_batch([event("items", 7)], MAPPINGS).writes[0]
    assert streamed.kind == writes[0].kind and streamed.ttl_s == writes[0].ttl_s
    assert (summary.rows, summary.keys, summary.skipped) == (2, 2, 0)


def test_a_snapshot_stops_before_outliving_the_tombstones():
    items = MAPPINGS.tables["app.items"]
    wm = Watermark("0-1-41", 41, 1000.0)
    check_tombstone_window(items, wm, now=1000.0 + items.tombstone_s)
    with pytest.raises(FatalError, match="tombstone_ttl"):
        check_tombstone_window(items, wm, now=1000.0 + items.tombstone_s + 1)
