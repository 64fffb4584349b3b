"""The peer readers of bench/tailer.py: Debezium, Canal and go-mysql reading the same range.

Debezium and Canal are small Java programs (``bench/peers/src/cachesync/bench/``) with their
own poms (``bench/peers/<peer>/pom.xml``): Debezium 3.5.0.Final embedded with the MariaDB
connector and JSON records, and Alibaba Canal 1.1.7's parser (``canal.parse``). go-mysql
is a Go program (``bench/peers/gomysql/``, its go.mod and go.sum): go-mysql 1.15.0's
``replication.BinlogSyncer``, every row decoded into Go values. ``make install`` builds
none of them: the first use runs Maven (offline when the local repository already holds
every artifact, else online) or ``go build`` into ``bench/peers/<peer>/target/``
(gitignored), and later uses reuse that build until a source, pom or go.mod changes. A
peer whose tools are missing (a JDK and Maven, or Go) is left out, with the reason.

Each reads as the devstack's admin account (Debezium's schema recovery reads grants, binlog
status and table definitions; the least-privilege cachesync account has too little), starts
at the range's first event (Debezium: the GTID position in a preset in-memory offset; Canal
and go-mysql: the binlog file:pos) and stops after the range's N row changes. Each prints
one JSON line: rows, seconds and rows/s from the first row change to the last (process start
and connection setup excluded, reported apart as ``setup_s``), the process's CPU seconds
over that span, and the rows counted per operation.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import time
from pathlib import Path

from bench.common import log, median, ratio

HERE = Path(__file__).resolve().parent
PEERS = ("debezium", "canal", "gomysql")
_MAIN = {"debezium": "cachesync.bench.DebeziumReader", "canal": "cachesync.bench.CanalReader"}
_TOOLS = {"debezium": ("java", "mvn"), "canal": ("java", "mvn"), "gomysql": ("go",)}
_GO_BINARY = "gomysql-reader"
_BUILD_TIMEOUT_S = 900          # a clean clone downloads ~100 MB of jars on the first build


class PeerUnavailable(RuntimeError):
    """A peer's tools (a JDK and Maven, or Go) are missing: its figures are null, with this
    reason."""


def unavailable_reason(peer: str) -> str | None:
    """Why ``peer`` cannot run here (its missing tools), or None when it can."""
    missing = [tool for tool in _TOOLS[peer] if shutil.which(tool) is None]
    return f"not on PATH: {', '.join(missing)}" if missing else None


def build(peer: str) -> list[str]:
    """The command that runs ``peer``'s reader, built unless an up-to-date build exists.

    Raises PeerUnavailable without its tools, RuntimeError when the build fails.
    """
    reason = unavailable_reason(peer)
    if reason:
        raise PeerUnavailable(reason)
    project = HERE / peer
    (project / "target").mkdir(exist_ok=True)
    # one build at a time (a test run and a benchmark may start together)
    with open(project / "target" / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if peer == "gomysql":
            if not _up_to_date(peer, project / "target" / _GO_BINARY):
                _go_build(project)
            return [str(project / "target" / _GO_BINARY)]
        classpath_file = project / "target" / "classpath.txt"
        if not _up_to_date(peer, classpath_file):
            _compile(peer, project, classpath_file)
    classpath = f"{project / 'target' / 'classes'}:{classpath_file.read_text().strip()}"
    return ["java", "-cp", classpath, _MAIN[peer]]


def _go_build(project: Path) -> None:
    """Raises RuntimeError when ``go build`` fails (the modules come from the Go proxy)."""
    proc = subprocess.run(["go", "build", "-o", f"target/{_GO_BINARY}", "."], cwd=project,
                          capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"building the gomysql reader failed: go build:\n"
                           f"{(proc.stdout + proc.stderr)[-3000:]}")
    (project / "target" / "built").touch()


def _compile(peer: str, project: Path, classpath_file: Path) -> None:
    """Raises RuntimeError when Maven fails offline and online."""
    goals = ["compile", "dependency:build-classpath", f"-Dmdep.outputFile={classpath_file}"]
    # offline first: a warm local repository builds without the network
    failure = _maven(project, ["-o", *goals]) and _maven(project, goals)
    if failure:
        raise RuntimeError(f"building the {peer} reader failed: mvn {' '.join(goals)}:\n{failure}")
    # Maven leaves classpath.txt (and unchanged classes) untouched: the stamp dates the build
    (project / "target" / "built").touch()


def _up_to_date(peer: str, output: Path) -> bool:
    stamp = HERE / peer / "target" / "built"
    if not (output.exists() and stamp.exists()):
        return False
    if peer == "gomysql":
        sources = [HERE / peer / name for name in ("go.mod", "go.sum", "main.go")]
    else:
        sources = [HERE / peer / "pom.xml", *(HERE / "src").rglob("*.java")]
    return all(path.stat().st_mtime <= stamp.stat().st_mtime for path in sources)


def _maven(project: Path, args: list[str]) -> str | None:
    """Runs mvn in ``project``; None on success, else the tail of its output."""
    proc = subprocess.run(["mvn", "-q", "-B", *args], cwd=project, capture_output=True,
                          text=True, timeout=_BUILD_TIMEOUT_S)
    if proc.returncode == 0:
        return None
    return (proc.stdout + proc.stderr)[-3000:]


def read_range(peer: str, env: dict, *, database: str, table: str, data: dict, rows: int,
               server_id: int, timeout_s: float = 600) -> dict:
    """Reads ``rows`` row changes of ``database.table`` from the range ``data`` describes.

    ``env`` is the devstack's env file; ``data`` has ``start_gtid`` and ``start``
    (``file:pos``) from bench/tailer.py's write_changes. Returns the reader's JSON figures.
    Raises PeerUnavailable without its tools, RuntimeError when the reader fails or counts
    another number of rows.
    """
    reader = build(peer)
    start_file, start_pos = data["start"].rsplit(":", 1)
    args = {"host": env["CACHESYNC_MYSQL_HOST"], "port": env["CACHESYNC_MYSQL_PORT"],
            "user": env["DEVSTACK_MYSQL_ADMIN_USER"],
            "password_file": env["DEVSTACK_MYSQL_ADMIN_PASSWORD_FILE"],
            "database": database, "table": table, "gtid": data["start_gtid"],
            "file": start_file, "pos": start_pos, "rows": rows, "server_id": server_id,
            "timeout_s": int(timeout_s)}
    command = [*reader, *(f"{k}={v}" for k, v in args.items())]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s + 60)
    result = _last_json_line(proc.stdout)
    if proc.returncode != 0 or result is None or "error" in result:
        detail = result.get("error") if result else proc.stderr[-3000:]
        raise RuntimeError(f"the {peer} reader failed (exit {proc.returncode}): {detail}")
    if result["rows"] != rows:
        raise RuntimeError(f"the {peer} reader counted {result['rows']} rows, expected {rows}")
    cpu = result.get("cpu_s")
    return {"what": peer, **result,
            "cpu_s_per_100k_rows": round(cpu / rows * 100_000, 4) if cpu is not None else None}


def _last_json_line(stdout: str) -> dict | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


# -- the benchmark's use: build before timing, compare after ------------------------------
# (key in bench/tailer.py's figures of one shape, label) of every reader compared
READERS = (("baseline", "raw python-mysql-replication (touching every value)"),
           ("process", "cachesync tail --from-gtid, the process, default settings"),
           ("contender", "cachesync Tailer in process, default (pack_rows 500)"),
           ("unpacked", "cachesync tail, one record per row (pack_rows 1)"),
           ("python_rows", "cachesync Tailer in process, default, rows written by the Python "
                           "path (compiled row writer off)"),
           ("debezium", "Debezium 3.5.0.Final embedded, MariaDB connector, JSON records"),
           ("canal", "Alibaba Canal 1.1.7 parser (LogEventConvert, RowChange decoded)"),
           ("gomysql", "go-mysql 1.15.0 BinlogSyncer (replication package, rows decoded)"))
TARGETS = (("debezium", ">= 1.0x Debezium (must)"), ("canal", ">= 1.0x Canal (goal)"))
BASIS = ("rows/s from the first row change of the range to the last, for every reader: "
         "connection setup (and the peers' JVM start, Debezium's schema recovery) excluded; "
         "cachesync: first row published to last row acknowledged by Kafka; the cachesync "
         "tail process: the broker's append times of the first and the last row")


def prepare() -> tuple[tuple[str, ...], str | None]:
    """The peers to run, built now so no build falls into a timed run, and why the others
    do not run (None: every peer runs).

    Raises RuntimeError when a build fails (its tools are there, so the peer must run).
    """
    ready, missing = [], []
    for peer in PEERS:
        reason = unavailable_reason(peer)
        if reason:
            missing.append(f"{peer}: {reason}")
            continue
        t0 = time.perf_counter()
        build(peer)
        log(f"tailer: {peer} reader ready ({time.perf_counter() - t0:.1f}s)")
        ready.append(peer)
    if missing:
        log(f"tailer: peer readers left out ({'; '.join(missing)}); their figures are null")
    return tuple(ready), "; ".join(missing) or None


def compare(shapes: dict[str, dict], missing: str | None) -> dict:
    """Each reader's median rows/s (first row to last) per shape, with the target ratios."""
    out = {"basis": BASIS, "peers_missing": missing}
    for shape, figures in shapes.items():
        medians = {key: first_to_last_median(figures.get(key)) for key, _ in READERS}
        default = medians["contender"]      # the bench's contender runs the default pack_rows
        users = medians["process"]          # what users run: the targets are on it
        out[shape] = {
            "rows": figures["table"]["rows"], "txn_rows": figures["table"]["txn_rows"],
            "readers": {key: {"name": label, "rows_per_s": medians[key],
                              "cpu_s_per_100k_rows": _cpu_median(figures.get(key))}
                        for key, label in READERS},
            "ratios": {f"cachesync_default_to_{peer}": ratio(default, medians[peer])
                       for peer, _ in TARGETS},
            "ratios_unpacked": {f"cachesync_unpacked_to_{peer}": ratio(medians["unpacked"],
                                                                       medians[peer])
                                for peer, _ in TARGETS},
            "ratios_process": {f"cachesync_process_to_{peer}": ratio(users, medians[peer])
                               for peer, _ in TARGETS},
            "targets": [_target(text, ratio(users, medians[peer])) for peer, text in TARGETS],
        }
    return out


def _target(text: str, value) -> dict:
    return {"target": text, "value": value, "met": None if value is None else value >= 1.0}


def _cpu_median(figure: dict | None):
    """Median CPU seconds per 100k rows (None where the reader's CPU is not measured)."""
    return ((figure or {}).get("median") or {}).get("cpu_s_per_100k_rows")


def first_to_last_median(figure: dict | None):
    """Median over runs of rows/s from the first row to the last (None: not measured)."""
    if not figure:
        return None
    rates = [_first_to_last(run) for run in figure["runs"]]
    return median([r for r in rates if r is not None])


def _first_to_last(run: dict):
    if "seconds" in run:                       # a peer: measured so by the reader itself
        return run["rows_per_s"]
    span = run["elapsed_s"] - (run.get("startup_s") or 0.0)
    return round(run["rows"] / span, 1) if span > 0 else None
