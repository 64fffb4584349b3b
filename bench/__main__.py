"""``python -m bench [--quick] [--only NAME] [--runs N]``: run the benchmarks.

Prints one JSON document to stdout (progress goes to stderr) and writes the same
document to bench/results/<name>-<UTC timestamp>.json. Needs the devstack running
(`devstack/stack.sh up`, or `make bench`, which starts and stops it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import logging
import os
import platform
import signal
import sys
import time
import traceback
from importlib import metadata

from bench import perf_table
from bench.common import ROOT, Stack, log

# what a plain `python -m bench` (and `make bench`) runs: every figure the README quotes,
# the 10-minute memory soak included; replay_spark is reachable with --only
BENCHMARKS = ("tailer", "consumer", "lag", "soak", "outbox", "consistency", "failover",
              "failover_redis_cluster")
_NOT_BENCHMARKS = {"__init__", "__main__", "common", "perf_table", "failover_promotion", "threads"}


def available() -> list[str]:
    """BENCHMARKS plus any other bench/<name>.py module (reachable with --only)."""
    extra = sorted(p.stem for p in (ROOT / "bench").glob("*.py")
                   if p.stem not in _NOT_BENCHMARKS and p.stem not in BENCHMARKS)
    return [*BENCHMARKS, *extra]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Run the cachesync benchmarks: one JSON document to stdout and to "
                    "bench/results/; progress on stderr.")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--only", choices=available(), action="append",
                        help="run only this benchmark (repeatable); default: "
                             + ", ".join(BENCHMARKS))
    parser.add_argument("--runs", type=int, default=3, help="repetitions per figure (default 3)")
    parser.add_argument("--minutes", type=float, default=None,
                        help="length of the soak in minutes (default 10, 1 with --quick), of the lag_drift "
                             "run (default 30, 1 with --quick) and "
                             "of each monitor run (default 1, 0.25 with --quick)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    # a SIGTERM (a timeout, a kill) unwinds like Ctrl-C: each benchmark's cleanup stops the
    # processes it spawned instead of leaving them to load the host
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    stack = Stack()
    stack.check()
    selected = args.only or list(BENCHMARKS)
    started = dt.datetime.now(dt.timezone.utc)
    t0 = time.perf_counter()
    doc = {"name": "cachesync-bench", "started_at": started.isoformat(timespec="seconds"),
           "mode": "quick" if args.quick else "full", "runs": args.runs,
           # BENCH_* variables change what a benchmark measures (BENCH_LAG_RATES, ...)
           "command": " ".join([*(f"{k}={v}" for k, v in sorted(os.environ.items())
                                  if k.startswith("BENCH_")),
                                "python -m bench", *(sys.argv[1:] if argv is None else argv)]),
           "host": _host(), "loadavg_start": _loadavg(), "versions": {**_versions(), **stack.versions()},
           "benchmarks": {}, "errors": {}}
    for name in selected:
        log(f"== {name} ==")
        b0 = time.perf_counter()
        try:
            extra = ({"minutes": args.minutes} if name in ("soak", "monitor", "lag_drift")
                     else {})
            result = importlib.import_module(f"bench.{name}").run(stack, args.quick, args.runs,
                                                                  **extra)
            result["duration_s"] = round(time.perf_counter() - b0, 1)
            result["loadavg_after"] = _loadavg()
            doc["benchmarks"][name] = result
        except KeyboardInterrupt:
            doc["errors"][name] = "interrupted"
            break
        except Exception as e:  # keep the other benchmarks' figures
            log(f"{name} FAILED: {type(e).__name__}: {e}")
            traceback.print_exc(file=sys.stderr)
            doc["errors"][name] = f"{type(e).__name__}: {e}"
        log(f"{name} took {time.perf_counter() - b0:.1f}s")
    doc["duration_s"] = round(time.perf_counter() - t0, 1)
    if not doc["errors"]:
        del doc["errors"]

    text = json.dumps(doc, indent=2, default=str)
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = "-".join([doc["mode"], *(args.only or [])])
    path = out_dir / f"{stem}-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(text + "\n")
    print(text)
    print(perf_table.render(doc), file=sys.stderr)
    log(f"wrote {path.relative_to(ROOT)} ({doc['duration_s']}s)")
    return 1 if "errors" in doc else 0


def _host() -> dict:
    return {"cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "machine": platform.machine()}


def _loadavg() -> list[float] | None:
    """1/5/15-minute load: the machine is shared (services, other users' test runs)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _versions() -> dict:
    out = {}
    for dist in ("cachesync", "mysql-replication", "kafka-python", "redis", "PyMySQL"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


if __name__ == "__main__":
    sys.exit(main())
