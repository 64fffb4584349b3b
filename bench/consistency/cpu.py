"""Where a cell's CPU went: per process of the lab, CPU time and time spent waiting for a CPU.

Read from ``/proc/<pid>/task/<tid>/schedstat`` (time on a CPU, time runnable but waiting
on a run queue, both in ns, summed over the process's threads) every second of a cell. A
process that waited long for a CPU was starved; the host's own CPU time (``/proc/stat``)
says how much of the machine the lab's processes had at all (other users share it).
"""

from __future__ import annotations

import os
from pathlib import Path

from bench.common import host_cpu
from bench.threads import schedstat_ns

NS = 1e9
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def schedstat(pid: int) -> dict[int, tuple[float, float]]:
    """Per thread of ``pid``: (seconds on a CPU, seconds waiting for one); empty once it is
    gone. Per thread, because a thread's time leaves the process's sum when it ends."""
    return {tid: (on / NS, queued / NS) for tid, (on, queued) in schedstat_ns(pid).items()}


def host_busy() -> float:
    """CPU seconds the whole host spent busy (every user), from ``/proc/stat``."""
    return host_cpu()[0] / TICKS


def pid_file(path: str | Path) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


class CpuSample:
    """``update(pids, now)`` every second or so during a cell, then ``figures()``: per name,
    CPU and run-queue seconds between a process's first and last reading.

    ``pids``: name -> list of pids (a name may stand for several processes, such as the
    readers, or a killed process and its replacement). Each process counts from the first
    reading that saw it to the last, thread by thread, so a killed process counts until
    shortly before its kill and its replacement from shortly after its start.
    """

    def __init__(self):
        self.t0 = self.t1 = None
        self.first: dict[int, tuple[float, float]] = {}
        self.last: dict[int, tuple[float, float]] = {}
        self.names: dict[str, set[int]] = {}
        self.host0 = self.host1 = 0.0
        self.samples: list[tuple[float, float, dict[str, tuple[float, float]]]] = []

    def update(self, pids: dict[str, list[int]], now: float) -> None:
        if self.t0 is None:
            self.t0, self.host0 = now, host_busy()
        self.t1, self.host1 = now, host_busy()
        for name, ps in pids.items():
            for pid in ps:
                for tid, s in schedstat(pid).items():
                    self.names.setdefault(name, set()).add(tid)
                    self.first.setdefault(tid, s)
                    self.last[tid] = s
        self.samples.append((now, self.host1, self._totals()))

    def _totals(self) -> dict[str, tuple[float, float]]:
        return {name: (sum(self.last[t][0] - self.first[t][0] for t in tids),
                       sum(self.last[t][1] - self.first[t][1] for t in tids))
                for name, tids in self.names.items()}

    def timeline(self) -> list[dict]:
        """Per interval between two readings: its end, the host's busy CPU seconds and, per
        name, the CPU and run-queue seconds in it (where a stall's time went)."""
        out = []
        for (t0, h0, a), (t1, h1, b) in zip(self.samples, self.samples[1:]):
            out.append({"t": t1, "seconds": round(t1 - t0, 3), "host_busy_s": round(h1 - h0, 3),
                        "processes": {n: (round(c - a.get(n, (0, 0))[0], 4),
                                          round(w - a.get(n, (0, 0))[1], 4))
                                      for n, (c, w) in b.items()}})
        return out

    def figures(self) -> dict:
        seconds = (self.t1 - self.t0) or 1e-9
        out = {}
        for name, ps in self.names.items():       # ps: thread ids
            cpu = sum(self.last[p][0] - self.first[p][0] for p in ps)
            wait = sum(self.last[p][1] - self.first[p][1] for p in ps)
            out[name] = {"cpu_s": round(cpu, 1), "cpu_share": round(cpu / seconds, 3),
                         "waited_for_cpu_s": round(wait, 1),
                         "waited_share": round(wait / seconds, 3)}
        return {"seconds": round(seconds, 1),
                "host_busy_cpu_s": round(self.host1 - self.host0, 1),
                "host_cpus": os.cpu_count(), "processes": out,
                "rule": "per process, summed over its threads, from /proc/<pid>/task/*/schedstat "
                        "read every second while the writer ran: cpu_s on a CPU, "
                        "waited_for_cpu_s runnable but queued; shares of that wall time"}
