"""The kill class's fault injector: kills and restarts cachesync's processes and the broker.

As the chaos tests do, on the real processes: ``tail`` and ``consume`` get SIGKILL and a
replacement is started at once; the Kafka broker is stopped and started with
``devstack/stack.sh down|up kafka``. Each fault is an outage window, from the kill until the
component is back: a replacement cachesync process answers ``/readyz``, ``stack.sh up
kafka`` returned (it waits until the broker serves). Faults follow one another every
``interval_s`` (a new one only once the last outage ended) until ``stop``; the cycle goes
on where the previous cell's injector left it.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
import urllib.error
import urllib.request

from bench.common import log, wait_for

FAULTS = ("consume", "tail", "kafka")     # the cycle, in this order
READY_TIMEOUT_S = 180.0


class ChaosInjector(threading.Thread):
    """Kills and restarts in a cycle; ``outages`` is [(what, start, end)] (perf_counter)."""

    def __init__(self, box, procs: dict, configs: dict, interval_s: float,
                 stack_sh, first_after_s: float = 5.0, first: int = 0):
        super().__init__(name="chaos", daemon=True)
        self.box, self.procs, self.configs = box, procs, configs
        self.interval_s, self.first_after_s, self.stack_sh = interval_s, first_after_s, stack_sh
        self.stop = threading.Event()
        self.outages: list[tuple[str, float, float]] = []
        self.first = first          # where in the cycle to begin (it goes on across cells)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            if self.stop.wait(self.first_after_s):
                return
            n = self.first
            while not self.stop.is_set():
                what = FAULTS[n % len(FAULTS)]
                start = time.perf_counter()
                self._kafka() if what == "kafka" else self._kill(what)
                end = time.perf_counter()
                self.outages.append((what, start, end))
                log(f"consistency: {what} down for {end - start:.1f} s")
                n += 1
                if self.stop.wait(max(0.0, self.interval_s - (end - start))):
                    return
        except BaseException as e:  # noqa: BLE001 - raised by check() in the lab's thread
            self.error = e

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"the fault injector failed: {self.error}") from self.error

    def _kill(self, command: str) -> None:
        old = self.procs[command]
        old.send_signal(signal.SIGKILL)
        old.wait(30)
        new = self.box.spawn(command, self.configs[command])
        self.procs[command] = new
        await_ready(self.box, new)

    def _kafka(self) -> None:
        self.stack_sh(self.box.stack, "down", "kafka")
        self.stack_sh(self.box.stack, "up", "kafka")


def await_ready(box, proc) -> None:
    """Until the process's /readyz answers 200 (its metrics listen on a free port)."""
    def address():
        if proc.poll() is not None:
            raise RuntimeError(f"a restarted cachesync process exited:\n{box.proc_log(proc)}")
        m = re.search(r"metrics and health on http://(\S+) ", box.proc_log(proc, 100_000))
        return m and m.group(1)
    addr = wait_for(address, READY_TIMEOUT_S, "a restarted process's metrics address",
                    interval=0.05)

    def ready():
        try:
            with urllib.request.urlopen(f"http://{addr}/readyz", timeout=5) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError, json.JSONDecodeError):
            return False
    wait_for(ready, READY_TIMEOUT_S, "a restarted process to be ready", interval=0.05)
