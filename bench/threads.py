"""CPU per thread of running processes, for the breakdowns the benchmarks print.

Each thread's time on a CPU comes from ``/proc/<pid>/task/<tid>/schedstat`` (nanoseconds,
where a ``stat`` reading counts whole clock ticks: 10 ms, more than an idle thread uses in
a second). A thread is named by its Python name when ``py-spy`` is installed (``py-spy
dump`` prints each Python thread's native id and name; the threads a library starts in C
keep their ``comm``), else by its ``comm``. Threads of the same name in one process are
added up.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

DUMP_TIMEOUT_S = 30
_DUMP_THREAD = re.compile(r'^Thread (\d+) \([^)]*\): "([^"]*)"', re.M)


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (Linux's /proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except (OSError, ValueError):      # exited meanwhile
                continue
            out.extend(children)
            todo.extend(children)
    return out


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its live descendants."""
    return [pid, *descendants(pid)]


def schedstat(pid: int) -> dict[int, tuple[int, int, int]]:
    """Per thread of ``pid``: (nanoseconds on a CPU, nanoseconds runnable but waiting for
    one, times it was put on a CPU) so far; empty once it is gone."""
    out = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            on, queued, slices = (task / "schedstat").read_text().split()
            out[int(task.name)] = (int(on), int(queued), int(slices))
        except (OSError, ValueError):
            pass                # exited between two reads
    return out


def schedstat_ns(pid: int) -> dict[int, tuple[int, int]]:
    """Per thread of ``pid``: (nanoseconds on a CPU, nanoseconds runnable but waiting for
    one) so far; empty once it is gone."""
    return {tid: (on, queued) for tid, (on, queued, _) in schedstat(pid).items()}


def thread_runs(pids: list[int]) -> dict[tuple[int, int], tuple[int, int]]:
    """(pid, tid) -> (nanoseconds the thread ran, times it was put on a CPU) so far, for
    every thread of ``pids``. The count is the thread's wake-ups, the ones that ended a wait
    (a read, a lock, a sleep) and the ones after it was preempted."""
    return {(pid, tid): (on, slices) for pid in pids
            for tid, (on, _, slices) in schedstat(pid).items()}


def thread_names(pid: int) -> dict[int, str]:
    """tid -> name: the Python thread names ``py-spy dump`` reports, else each ``comm``."""
    names = {}
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            names[int(task.name)] = (task / "comm").read_text().strip()
    except OSError:
        return names
    spy = py_spy()
    if spy is not None:
        try:
            dump = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True,
                                  text=True, timeout=DUMP_TIMEOUT_S).stdout
        except (OSError, subprocess.SubprocessError):
            dump = ""
        names.update({int(tid): name for tid, name in _DUMP_THREAD.findall(dump)})
    return names


def py_spy() -> str | None:
    """The py-spy command, on the PATH or beside this Python; None without it."""
    beside = Path(sys.executable).with_name("py-spy")
    return shutil.which("py-spy") or (str(beside) if beside.exists() else None)


class ThreadClock:
    """Per-thread CPU and wake-ups of process trees between ``__init__`` and ``read()``."""

    def __init__(self, roots: dict[str, int]):
        self._roots = roots
        self._before = {name: thread_runs(tree_pids(pid)) for name, pid in roots.items()}

    def seconds(self) -> dict[str, dict[str, float]]:
        """process -> thread name -> CPU seconds since ``__init__``, largest first; a child
        process's threads are prefixed with ``child``."""
        return self.read()[0]

    def read(self) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, int]]]:
        """(``seconds()``, process -> thread name -> times put on a CPU since ``__init__``)."""
        seconds, wakes = {}, {}
        for name, root in self._roots.items():
            pids = tree_pids(root)
            after, before = thread_runs(pids), self._before[name]
            names = {pid: thread_names(pid) for pid in pids}
            ns: Counter = Counter()
            runs: Counter = Counter()
            for (pid, tid), (on, slices) in after.items():
                label = names[pid].get(tid, str(tid))
                if pid != root:
                    label = f"child {label}"
                on0, slices0 = before.get((pid, tid), (0, 0))
                ns[label] += on - on0
                runs[label] += slices - slices0
            seconds[name] = {label: n / 1e9 for label, n in ns.most_common() if n > 0}
            wakes[name] = {label: n for label, n in runs.most_common() if n > 0}
        return seconds, wakes


def scaled(seconds: dict[str, dict[str, float]], factor: float, digits: int = 3) -> dict:
    """``ThreadClock.seconds()`` times ``factor`` (1e2 / elapsed: % of a core; 1e6 / commits:
    µs per commit), rounded."""
    return {proc: {label: round(s * factor, digits) for label, s in threads.items()}
            for proc, threads in seconds.items()}


def median_threads(runs: list[dict]) -> dict:
    """The median of each process's thread over the runs' breakdowns (a thread missing
    from a run counts 0 there)."""
    from bench.common import median
    procs = {p for run in runs for p in run}
    return {p: dict(sorted(((label, median([run.get(p, {}).get(label, 0.0) for run in runs]))
                            for label in {lb for run in runs for lb in run.get(p, {})}),
                           key=lambda kv: -kv[1]))
            for p in sorted(procs)}
