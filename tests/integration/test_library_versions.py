"""The binlog readers under the lowest and the highest versions of python-mysql-replication
and pymysql that the pins in pyproject.toml allow (the sidecar extra).

cachesync reaches into both libraries' private names (cachesync/runtime/library_adapter.py
lists them), so the pins say which versions that was checked with. For each end of the
pins, a throwaway virtualenv under build/library-versions/ (built with pip from PyPI the
first time, kept for the next runs) holds exactly those two libraries; a probe
(tests/support/library_probe.py) run there reads every shared real binlog file and a live
devstack range, with the fast reader and with the library's, and what it decodes must be
byte for byte what the main environment decodes.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import sysconfig
import tomllib
from concurrent.futures import ThreadPoolExecutor

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.support.columns import COLUMNS, INSERT, random_rows, scratch_database, special_rows
from tests.support.shared import shared_dir

ROOT = pathlib.Path(__file__).resolve().parents[2]
VENVS = ROOT / "build" / "library-versions"
LIBRARIES = ("mysql-replication", "pymysql")
ENDS = ("lowest", "highest")
PIP_TIMEOUT_S = 900


def pins() -> dict[str, Requirement]:
    """The sidecar extra's requirement of each library."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["sidecar"]
    found = {Requirement(r).name.lower(): Requirement(r) for r in extra}
    return {name: found[name] for name in LIBRARIES}


def released(name: str) -> list[Version]:
    """The versions of ``name`` on the package index (pip's view of it)."""
    done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name],
                          capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=True)
    line = next(line for line in done.stdout.splitlines()
                if line.startswith("Available versions:"))
    return [Version(v.strip()) for v in line.split(":", 1)[1].split(",")]


def ends() -> dict[str, dict[str, str]]:
    """"lowest" and "highest": library -> the version the pins allow at that end."""
    out: dict[str, dict[str, str]] = {"lowest": {}, "highest": {}}
    for name, requirement in pins().items():
        allowed = sorted(v for v in released(name)
                         if not v.is_prerelease and requirement.specifier.contains(v))
        assert allowed, f"no release of {name} satisfies {requirement}"
        out["lowest"][name], out["highest"][name] = str(allowed[0]), str(allowed[-1])
    return out


def venv(versions: dict[str, str]) -> pathlib.Path:
    """The python of a virtualenv holding exactly ``versions`` (built once, then reused),
    which sees the main environment's packages (cachesync, its other dependencies) after
    its own."""
    where = VENVS / "-".join(f"{name}-{v}" for name, v in sorted(versions.items()))
    python = where / "bin" / "python"
    if not (where / ".complete").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(where)], check=True,
                       timeout=PIP_TIMEOUT_S)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        *(f"{name}=={v}" for name, v in versions.items())],
                       check=True, timeout=PIP_TIMEOUT_S)
        (where / ".complete").write_text(json.dumps(versions))
    own = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                          "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip()
    main = sysconfig.get_paths()["purelib"]
    (pathlib.Path(own) / "zz_main_environment.pth").write_text(
        f"import site; site.addsitedir({main!r})\n")
    return python


def probe(python: pathlib.Path | str, live: dict) -> dict:
    command = [str(python), "-m", "tests.support.library_probe", "--live", json.dumps(live)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          timeout=PIP_TIMEOUT_S, env={**os.environ, "PYTHONNOUSERSITE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def live(stack):
    """A range of the devstack's binlog: rows of every column type written, updated and
    deleted in a scratch database, between two GTID states."""
    with scratch_database(stack, "libversions") as db, stack.admin(db) as conn, \
            conn.cursor() as cur:
        cur.execute("CREATE TABLE every_type (id BIGINT PRIMARY KEY, "
                    + ", ".join(f"{name} {sql}" for name, sql, _ in COLUMNS) + ")")
        cur.execute("SET SESSION sql_mode = ''")      # the special rows' zero dates
        cur.execute("SELECT @@gtid_binlog_pos")
        start = cur.fetchone()[0]
        cur.executemany(INSERT, special_rows() + random_rows(range(10, 130), seed=41))
        conn.commit()
        for i in range(1, 130, 7):
            cur.execute("UPDATE every_type SET i = i DIV 2, vc = 'upd' WHERE id = %s", (i,))
            conn.commit()
        cur.execute("DELETE FROM every_type WHERE id > 100 AND id < 200")
        conn.commit()
        cur.execute("SELECT @@gtid_binlog_pos")
        end = cur.fetchone()[0]
        env = stack.env
        with open(env["CACHESYNC_MYSQL_PASSWORD_FILE"], encoding="utf-8") as f:
            password = f.read().strip()
        yield {"host": env["CACHESYNC_MYSQL_HOST"], "port": int(env["CACHESYNC_MYSQL_PORT"]),
               "user": env["CACHESYNC_MYSQL_USER"], "password": password, "db": db,
               "table": "every_type", "start": start, "end": end}


@pytest.fixture(scope="module")
def readings(live, gomysql_reading):
    """What the main environment and each end of the pins decode: the two virtualenvs built
    and the three probes run at once (each probe reads the live range under a replica id of
    its own; the real files' tables are mapped by go-mysql's reading, which the probes read
    from its cache). {"reference": probe, "lowest"/"highest": (versions, probe)}."""
    shared_dir()
    versions = ends()
    with ThreadPoolExecutor(max_workers=3) as pool:
        pythons = dict(zip(ENDS, pool.map(venv, (versions[end] for end in ENDS))))
        runs = {"reference": pool.submit(probe, sys.executable, {**live, "server_id": 4000}),
                **{end: pool.submit(probe, pythons[end], {**live, "server_id": 4100 + 100 * i})
                   for i, end in enumerate(ENDS)}}
        got = {what: run.result() for what, run in runs.items()}
    return {"reference": got["reference"], **{end: (versions[end], got[end]) for end in ENDS}}


@pytest.mark.parametrize("end", ENDS)
def test_the_readers_decode_the_same_with_each_end_of_the_pins(end, readings):
    reference = readings["reference"]
    versions, got = readings[end]
    assert got["versions"] == versions
    assert all(str(VENVS) in path for path in got["paths"].values()), got["paths"]
    assert reference["live"]["fast"]["records"] > 120     # the range was read
    assert got["live"] == reference["live"]
    assert reference["live"]["fast"] == reference["live"]["library"]
    different = sorted(k for k in reference["files"]
                       if got["files"].get(k) != reference["files"][k])
    assert not different and got["files"].keys() == reference["files"].keys(), different
