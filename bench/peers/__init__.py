"""The peer readers of bench/tailer.py: Debezium and Canal reading the same binlog range.

Each peer is a small Java program (``bench/peers/src/cachesync/bench/``) with its own pom
(``bench/peers/<peer>/pom.xml``): Debezium 3.5.0.Final embedded with the MariaDB connector
and JSON records, and Alibaba Canal 1.1.7's parser (``canal.parse``). ``make install`` does
not build them: the first use runs Maven (offline when the local repository already holds
every artifact, else online) into ``bench/peers/<peer>/target/`` (gitignored), and later
uses reuse that build until a source or pom changes.

Both read as the devstack's admin account (Debezium's schema recovery reads grants, binlog
status and table definitions; the least-privilege cachesync account has too little), start
at the range's first event (Debezium: the GTID position in a preset in-memory offset; Canal:
the binlog file:pos) and stop after the range's N row changes. Each prints one JSON line:
rows, seconds and rows/s from the first row change to the last (JVM start and connection
setup excluded, reported apart as ``setup_s``), and the rows counted per operation.
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
PEERS = ("debezium", "canal")
_MAIN = {"debezium": "cachesync.bench.DebeziumReader", "canal": "cachesync.bench.CanalReader"}
_BUILD_TIMEOUT_S = 900          # a clean clone downloads ~100 MB of jars on the first build


class PeerUnavailable(RuntimeError):
    """No JDK or no Maven on this machine: the peer figures are null, with this reason."""


def unavailable_reason() -> str | None:
    """Why the peers cannot run here (a missing ``java``/``mvn``), or None when they can."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    return f"not on PATH: {', '.join(missing)}" if missing else None


def build(peer: str) -> str:
    """The Java classpath of ``peer``, built with Maven unless an up-to-date build exists.

    Raises PeerUnavailable without a JDK or Maven, RuntimeError when Maven fails.
    """
    reason = unavailable_reason()
    if reason:
        raise PeerUnavailable(reason)
    project = HERE / peer
    classpath_file = project / "target" / "classpath.txt"
    (project / "target").mkdir(exist_ok=True)
    # one build at a time (a test run and a benchmark may start together)
    with open(project / "target" / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _up_to_date(peer, classpath_file):
            _compile(peer, project, classpath_file)
    return f"{project / 'target' / 'classes'}:{classpath_file.read_text().strip()}"


def _compile(peer: str, project: Path, classpath_file: Path) -> None:
    """Raises RuntimeError when Maven fails offline and online."""
    goals = ["compile", "dependency:build-classpath", f"-Dmdep.outputFile={classpath_file}"]
    # offline first: a warm local repository builds without the network
    failure = _maven(project, ["-o", *goals]) and _maven(project, goals)
    if failure:
        raise RuntimeError(f"building the {peer} reader failed: mvn {' '.join(goals)}:\n{failure}")
    # Maven leaves classpath.txt (and unchanged classes) untouched: the stamp dates the build
    (project / "target" / "built").touch()


def _up_to_date(peer: str, classpath_file: Path) -> bool:
    stamp = HERE / peer / "target" / "built"
    if not (classpath_file.exists() and stamp.exists()):
        return False
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
    Raises PeerUnavailable without a JDK or Maven, RuntimeError when the reader fails or
    counts another number of rows.
    """
    classpath = build(peer)
    start_file, start_pos = data["start"].rsplit(":", 1)
    args = {"host": env["CACHESYNC_MYSQL_HOST"], "port": env["CACHESYNC_MYSQL_PORT"],
            "user": env["DEVSTACK_MYSQL_ADMIN_USER"],
            "password_file": env["DEVSTACK_MYSQL_ADMIN_PASSWORD_FILE"],
            "database": database, "table": table, "gtid": data["start_gtid"],
            "file": start_file, "pos": start_pos, "rows": rows, "server_id": server_id,
            "timeout_s": int(timeout_s)}
    command = ["java", "-cp", classpath, _MAIN[peer], *(f"{k}={v}" for k, v in args.items())]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s + 60)
    result = _last_json_line(proc.stdout)
    if proc.returncode != 0 or result is None or "error" in result:
        detail = result.get("error") if result else proc.stderr[-3000:]
        raise RuntimeError(f"the {peer} reader failed (exit {proc.returncode}): {detail}")
    if result["rows"] != rows:
        raise RuntimeError(f"the {peer} reader counted {result['rows']} rows, expected {rows}")
    return {"what": peer, **result}


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
           ("canal", "Alibaba Canal 1.1.7 parser (LogEventConvert, RowChange decoded)"))
TARGETS = (("debezium", ">= 1.0x Debezium (must)"), ("canal", ">= 1.0x Canal (goal)"))
BASIS = ("rows/s from the first row change of the range to the last, for every reader: "
         "connection setup (and the peers' JVM start, Debezium's schema recovery) excluded; "
         "cachesync: first row published to last row acknowledged by Kafka; the cachesync "
         "tail process: the broker's append times of the first and the last row")


def prepare() -> tuple[tuple[str, ...], str | None]:
    """The peers to run, built now so no build falls into a timed run, and why none run.

    Raises RuntimeError when Maven fails (a JDK and Maven are there, so the peers must run).
    """
    reason = unavailable_reason()
    if reason:
        log(f"tailer: no peer readers ({reason}); their figures are null")
        return (), reason
    for peer in PEERS:
        t0 = time.perf_counter()
        build(peer)
        log(f"tailer: {peer} reader ready ({time.perf_counter() - t0:.1f}s)")
    return PEERS, None


def compare(shapes: dict[str, dict], missing: str | None) -> dict:
    """Each reader's median rows/s (first row to last) per shape, with the target ratios."""
    out = {"basis": BASIS, "peers_missing": missing}
    for shape, figures in shapes.items():
        medians = {key: first_to_last_median(figures.get(key)) for key, _ in READERS}
        default = medians["contender"]      # the bench's contender runs the default pack_rows
        users = medians["process"]          # what users run: the targets are on it
        out[shape] = {
            "rows": figures["table"]["rows"], "txn_rows": figures["table"]["txn_rows"],
            "readers": {key: {"name": label, "rows_per_s": medians[key]}
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
